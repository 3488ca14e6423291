package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// startDocsServer is a streamable-HTTP MCP server (go-sdk) with a tool <name>_ping, a
// prompt "greet" and a resource "mem://doc", each answer naming the server.
func startDocsServer(t *testing.T, name string) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: name + "_ping", Description: "Answers pong."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil, nil
	})
	s.AddPrompt(&sdk.Prompt{Name: "greet", Description: "Greets."}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "hello from " + name}}}}, nil
	})
	s.AddResource(&sdk.Resource{Name: "doc", URI: "mem://doc", MIMEType: "text/plain"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: name + "'s doc"}}}, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestMCPPromptsAndResourcesPerTenant: two tenants, each granted one of two MCP groups
// whose servers have a prompt and a resource of the same names. Through the endpoint each
// tenant's session lists its own group's items, under the group's role, reads and gets
// them by the server's names (which are then unambiguous), and cannot name the other
// group's, qualified or not.
func TestMCPPromptsAndResourcesPerTenant(t *testing.T) {
	sign := newSigner(t, "k1")
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [docs_acme]}
  globex: {groups: [docs_globex]}
mcp_serve:
  listen: %s
mcp_servers:
  acme: {url: %s}
  globex: {url: %s}
groups:
  docs_acme: {mcp: {server: acme}}
  docs_globex: {mcp: {server: globex}}
`, sign.jwks, addr, startDocsServer(t, "acme"), startDocsServer(t, "globex")))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitListening(ctx, t, addr)
	for tenant, other := range map[string]string{"acme": "globex", "globex": "acme"} {
		cs, err := connectMCPServe(ctx, "http://"+addr+"/", sign.tenantToken(t, tenant))
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		defer func() { _ = cs.Close() }()
		var prompts, uris []string
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			prompts = append(prompts, p.Name)
		}
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			uris = append(uris, r.URI)
		}
		if want := "docs_" + tenant + "/greet"; !slices.Equal(prompts, []string{want}) {
			t.Errorf("%s lists prompts %v, want [%s]", tenant, prompts, want)
		}
		if want := "toolmesh://docs_" + tenant + "/mem://doc"; !slices.Equal(uris, []string{want}) {
			t.Errorf("%s lists resources %v, want [%s]", tenant, uris, want)
		}
		p, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "greet"})
		if err != nil || p.Messages[0].Content.(*sdk.TextContent).Text != "hello from "+tenant {
			t.Errorf("%s gets greet: %v %v", tenant, p, err)
		}
		r, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "mem://doc"})
		if err != nil || r.Contents[0].Text != tenant+"'s doc" {
			t.Errorf("%s reads mem://doc: %v %v", tenant, r, err)
		}
		if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "docs_" + other + "/greet"}); err == nil || !strings.Contains(err.Error(), "unknown prompt") {
			t.Errorf("%s gets %s's prompt: %v", tenant, other, err)
		}
		if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "toolmesh://docs_" + other + "/mem://doc"}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%s reads %s's resource: %v", tenant, other, err)
		}
	}
}

// waitListening waits until something accepts connections on addr (the MCP endpoint
// listens once the orchestrator has started it).
func waitListening(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing listens on %s: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
