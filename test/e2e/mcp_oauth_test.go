package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
)

// TestMCPEndpointAsProtectedResource: with mcp_serve.resource the MCP endpoint is an
// OAuth 2.1 protected resource as MCP clients discover one, checked with the MCP Go
// SDK's own discovery: a request without a token gets 401 with a challenge naming the
// resource's metadata (RFC 9728), which names the token issuer as its authorization
// server; a token issued for the resource (audience = its URL) opens a session and lists
// the tenant's tools; a token for another audience (the gRPC API's) is refused as an
// invalid token.
func TestMCPEndpointAsProtectedResource(t *testing.T) {
	sign := newSigner(t, "k1")
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + addr + "/mcp"
	m := startMesh(t, "", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
mcp_serve:
  listen: %s
  resource: %q
  scopes: {"context:read": ["show_context_*"], "math:use": ["add", "math"]}
`, sign.jwks, addr, resource))
	m.startWorker("acme-1", "echo_acme")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(sign.tenantToken(t, "acme"), true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = acme.Close() }()
	if err := harness.WaitWorkers(ctx, acme, "acme-1"); err != nil {
		t.Fatal(err)
	}

	// Discovery, as an MCP client does it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, resource, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	// The challenge names the scopes to ask for (RFC 6750), as the MCP authorization spec asks.
	if resp.StatusCode != http.StatusUnauthorized || err != nil || len(challenges) != 1 || challenges[0].Scheme != "bearer" || challenges[0].Params["scope"] != "context:read math:use" {
		t.Fatalf("without a token: HTTP %d, challenges %v (%v)", resp.StatusCode, challenges, err)
	}
	metaURL := challenges[0].Params["resource_metadata"]
	if want := "http://" + addr + "/.well-known/oauth-protected-resource/mcp"; metaURL != want {
		t.Errorf("resource_metadata %q, want %q", metaURL, want)
	}
	prm, err := oauthex.GetProtectedResourceMetadata(ctx, metaURL, resource, http.DefaultClient)
	if err != nil {
		t.Fatalf("the protected resource metadata: %v", err)
	}
	if !slices.Equal(prm.AuthorizationServers, []string{"https://issuer.test"}) || !slices.Contains(prm.BearerMethodsSupported, "header") ||
		!slices.Equal(prm.ScopesSupported, []string{"context:read", "math:use"}) {
		t.Errorf("metadata %+v", prm)
	}

	// A token issued for the resource opens a session; one for the gRPC API does not.
	forResource := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": resource, "sub": "user-1", "tenant": "acme",
		"scope": "context:read", "exp": time.Now().Add(time.Hour).Unix()})
	session, err := connectMCPServe(ctx, resource, forResource)
	if err != nil {
		m.dump()
		t.Fatalf("a token for the resource: %v", err)
	}
	defer func() { _ = session.Close() }()
	tools, err := session.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 || tools.Tools[0].Name != "show_context_acme" {
		t.Fatalf("tools %v, %v; want acme's", tools, err)
	}
	// What a session lists is its tenant's and its own (facades unfold per session): only
	// the caller's client may cache it.
	if tools.CacheScope != "private" {
		t.Errorf("tools/list's cache scope %q, want private", tools.CacheScope)
	}
	checkSessionHeldToItsScopes(t, ctx, sign, resource, session.ID(), forResource)
	checkCrossSiteAndHeaderBounds(t, ctx, resource, "http://"+addr, forResource)
	// A token whose scopes grant none of the tenant's tools opens a session that lists none.
	otherScope := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": resource, "sub": "user-2", "tenant": "acme",
		"scope": "math:use", "exp": time.Now().Add(time.Hour).Unix()})
	narrow, err := connectMCPServe(ctx, resource, otherScope)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = narrow.Close() }()
	if tools, err := narrow.ListTools(ctx, nil); err != nil || len(tools.Tools) != 0 {
		t.Errorf("a token scoped to math:use lists %v, %v; want no tool of acme's echo group", tools, err)
	}
	if res, err := narrow.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}}); err == nil && !res.IsError {
		t.Errorf("a token scoped to math:use called show_context_acme: %v", res)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, resource, nil)
	req.Header.Set("Authorization", "Bearer "+sign.tenantToken(t, "acme")) // audience "toolmesh"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	challenges, _ = oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if resp.StatusCode != http.StatusUnauthorized || len(challenges) != 1 || challenges[0].Params["error"] != "invalid_token" {
		t.Errorf("a token for another audience: HTTP %d, challenges %v; want 401 invalid_token", resp.StatusCode, challenges)
	}
}

// checkSessionHeldToItsScopes: the session is its opener's, scopes included: the same
// user with a narrower token (a refresh under fewer grants, another client) does not use
// it (404: the client opens a session of its own); it did, keeping the grants of the
// token that opened it. Outside the session its call of a tool the narrower scopes do not
// grant is refused as MCP's step-up asks: 403 insufficient_scope, naming the scopes that
// grant it. With the opener's token the call is served.
func checkSessionHeldToItsScopes(t *testing.T, ctx context.Context, sign *signer, resource, sid, forResource string) {
	t.Helper()
	narrower := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": resource, "sub": "user-1", "tenant": "acme",
		"scope": "math:use", "exp": time.Now().Add(time.Hour).Unix()})
	call := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"show_context_acme","arguments":{}}}`
	list := `{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{}}`
	for _, tc := range []struct {
		token, body string
		want        int
	}{{narrower, list, http.StatusNotFound}, {narrower, call, http.StatusNotFound}, {forResource, call, http.StatusOK}} {
		code, _ := mcpPost(ctx, t, resource, tc.token, sid, tc.body)
		if code != tc.want {
			t.Errorf("%.40s in user-1's session with a token scoped %q: HTTP %d, want %d", tc.body[30:], map[bool]string{true: "math:use", false: "context:read"}[tc.token == narrower], code, tc.want)
		}
	}
	// Outside the session (a new one, or MCP 2026-07-28's requests, which belong to none)
	// the narrower token's call is the step-up's.
	code, h := mcpPostHeaders(ctx, t, resource, narrower, "", call)
	challenges, _ := oauthex.ParseWWWAuthenticate(h.Values("WWW-Authenticate"))
	if code != http.StatusForbidden || len(challenges) != 1 || challenges[0].Params["error"] != "insufficient_scope" || challenges[0].Params["scope"] != "context:read math:use" ||
		!strings.Contains(challenges[0].Params["resource_metadata"], "/.well-known/oauth-protected-resource") {
		t.Errorf("the narrower token's call: HTTP %d, challenges %v; want 403 insufficient_scope, scope \"context:read math:use\" and the resource's metadata", code, challenges)
	}
	// A tool no scope grants, or that the tenant does not offer, is no step-up's.
	for _, name := range []string{"nope", "show_context_globex"} {
		body := `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"` + name + `","arguments":{}}}`
		if code, _ := mcpPost(ctx, t, resource, forResource, sid, body); code == http.StatusForbidden {
			t.Errorf("a call of %s: 403; want it refused as a tool the session does not have", name)
		}
	}
}

// checkCrossSiteAndHeaderBounds: a request from another site's page is refused, as
// streamable HTTP requires (a valid token notwithstanding); so are headers past 64 KiB.
// Both were served.
func checkCrossSiteAndHeaderBounds(t *testing.T, ctx context.Context, resource, origin, forResource string) {
	t.Helper()
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, header, value string
		want                int
	}{
		{"another site's origin", "Origin", "https://evil.example", http.StatusForbidden},
		{"a null origin", "Origin", "null", http.StatusForbidden},
		{"the endpoint's own origin", "Origin", origin, http.StatusOK},
		{"a header of 100 KiB", "X-Padding", strings.Repeat("x", 100<<10), http.StatusRequestHeaderFieldsTooLarge},
	} {
		if code, _ := mcpPost(ctx, t, resource, forResource, "", initialize, tc.header, tc.value); code != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, code, tc.want)
		}
	}
}
