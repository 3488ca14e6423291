package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// bearerRT sends every request with a bearer token.
type bearerRT string

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPServeTenants: the orchestrator's MCP endpoint beside bearer tokens and tenants.
// A request without a valid token is refused (401); a tenant's session is offered only
// its groups' tools, its calls carry the verified tenant whatever _meta claims, a tool
// of another tenant's group cannot be called; another caller cannot use the session
// (403), and a session's end frees it.
func TestMCPServeTenants(t *testing.T) {
	sign := newSigner(t, "k1")
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
  globex: {groups: [echo_globex]}
mcp_serve:
  listen: %s
`, sign.jwks, addr))
	m.startWorker("acme-1", "echo_acme")
	m.startWorker("globex-1", "echo_globex")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acmeTok := sign.tenantToken(t, "acme")
	admin, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(acmeTok, true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	waitWorkerCount(ctx, t, admin, 1) // acme lists the worker of its group alone
	globexC, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(sign.tenantToken(t, "globex"), true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = globexC.Close() }()
	waitWorkerCount(ctx, t, globexC, 1)
	endpoint := "http://" + addr + "/"

	checkMCPServeUnauthorized(ctx, t, sign, endpoint)

	acme, err := connectMCPServe(ctx, endpoint, acmeTok)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	defer func() { _ = acme.Close() }()
	checkMCPServeTenantSession(ctx, t, acme, admin)
	checkMCPServeSessionOwner(ctx, t, sign, endpoint, acme)
}

// connectMCPServe opens an MCP session on endpoint, with the bearer token if it is not
// empty.
func connectMCPServe(ctx context.Context, endpoint, token string) (*sdk.ClientSession, error) {
	hc := &http.Client{}
	if token != "" {
		hc.Transport = bearerRT(token)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, nil)
	// A session (which a caller owns, and in which facades unfold) is 2025-11-25's.
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// mcpServeText is the text content of a tool call's result.
func mcpServeText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// checkMCPServeUnauthorized checks that a request with no token, or a token of the
// wrong audience, is refused with 401 and opens no session.
func checkMCPServeUnauthorized(ctx context.Context, t *testing.T, sign *signer, endpoint string) {
	t.Helper()
	// No token, or a token of the wrong audience: refused with 401.
	for name, tok := range map[string]string{"no token": "", "wrong audience": sign.token(t, jwt.MapClaims{
		"iss": "https://issuer.test", "aud": "elsewhere", "sub": "u", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: HTTP %d (WWW-Authenticate %q), want 401 with a Bearer challenge", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if _, err := connectMCPServe(ctx, endpoint, tok); err == nil {
			t.Errorf("%s: an MCP session opened", name)
		}
	}
}

// checkMCPServeTenantSession checks that acme's session is offered acme's tools alone,
// that its calls carry the verified tenant, and that it cannot call globex's tool.
func checkMCPServeTenantSession(ctx context.Context, t *testing.T, acme *sdk.ClientSession, admin *client.Client) {
	t.Helper()
	res, err := acme.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range res.Tools {
		names = append(names, x.Name)
	}
	if !slices.Contains(names, "show_context_acme") || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "globex") }) {
		t.Fatalf("acme's session is offered %v; want acme's tools and none of globex's", names)
	}
	call, err := acme.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}, Meta: sdk.Meta{"tenant_id": "globex"}})
	if err != nil || call.IsError || !strings.Contains(mcpServeText(call), `"tenant_id":"acme"`) || strings.Contains(mcpServeText(call), "globex") {
		t.Errorf("acme's call that claims globex in _meta: %q %v; want the verified tenant acme", mcpServeText(call), err)
	}
	call, err = acme.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_globex", Arguments: map[string]any{}})
	if err == nil && !call.IsError {
		t.Errorf("acme called globex's tool: %q", mcpServeText(call))
	}
	if calls := workerCalls(t, admin); calls["globex-1"] != 0 {
		t.Errorf("calls per worker %v; globex's worker must see none of acme's", calls)
	}
}

// checkMCPServeSessionOwner checks that globex presenting acme's session is refused
// with 403 and that acme's session still works afterwards.
func checkMCPServeSessionOwner(ctx context.Context, t *testing.T, sign *signer, endpoint string, acme *sdk.ClientSession) {
	t.Helper()
	// globex presenting acme's session: 403, and nothing runs.
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"show_context_acme","arguments":{}}}`
	if code, _ := mcpPost(ctx, t, endpoint, sign.tenantToken(t, "globex"), acme.ID(), body); code != http.StatusForbidden {
		t.Errorf("globex using acme's session: HTTP %d, want 403", code)
	}
	// acme's own session still works.
	if call, err := acme.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}}); err != nil || call.IsError {
		t.Errorf("acme's session after globex's attempt: %v %v", call, err)
	}
}

// TestMCPServeMutualTLS: with mutual TLS on, the MCP endpoint is HTTPS with the
// orchestrator's certificate; a client certificate of a tenant's identity opens a
// session of that tenant, a client without one is refused (401), and one whose identity
// trust.clients does not list is refused (403).
func TestMCPServeMutualTLS(t *testing.T) {
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dev := "spiffe://" + trustDomain + "/client/dev"
	m := startTLSMeshWith(t, tlsMeshConfig{script: "onecall.yaml",
		workers: []string{"{id: spiffe://" + trustDomain + "/worker/math, groups: [math]}"},
		clients: []string{dev},
		extra:   fmt.Sprintf("tenants:\n  acme: {groups: [math], clients: [%s]}\nmcp_serve:\n  listen: %s\n", dev, addr)})
	m.worker("math-1", "math", tlsArgs(m.pki.valid(t, "worker-math", "/worker/math"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m.waitWorker(ctx, "math-1", true)
	endpoint := "https://" + addr + "/"
	with := func(s *trust.Source, cert bool) *http.Client {
		tc := s.ClientTLS(trust.Expect(m.orchID()))
		tc.NextProtos = []string{"h2", "http/1.1"}
		if !cert {
			tc.GetClientCertificate = nil
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, nil)
	session, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: with(m.client, true), MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // facades unfold in a session
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	text := func(r *sdk.CallToolResult) string {
		var b strings.Builder
		for _, x := range r.Content {
			if tc, ok := x.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	if res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "math", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("opening the math facade over HTTPS: %v %v", res, err)
	}
	if res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}}); err != nil || text(res) != "5" {
		t.Errorf("add over HTTPS: %v %v", res, err)
	}

	post := func(hc *http.Client) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(with(m.client, false)); code != http.StatusUnauthorized {
		t.Errorf("no client certificate: HTTP %d, want 401", code)
	}
	other, err := trust.Load(m.pki.valid(t, "client-other", "/client/other"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if code := post(with(other, true)); code != http.StatusForbidden {
		t.Errorf("an identity trust.clients does not list: HTTP %d, want 403", code)
	}
}

// mcpPost POSTs a JSON-RPC body to an MCP endpoint as a streamable HTTP client does, with
// a bearer token and a session when given ("" for none) and the headers in extra (name,
// value pairs); it returns the status and the body.
func mcpPost(ctx context.Context, t *testing.T, endpoint, token, sid, body string, extra ...string) (int, string) {
	t.Helper()
	code, out, _ := mcpExchange(ctx, t, endpoint, token, sid, body, extra...)
	return code, out
}

// mcpPostHeaders is mcpPost's status and the response's headers.
func mcpPostHeaders(ctx context.Context, t *testing.T, endpoint, token, sid, body string, extra ...string) (int, http.Header) {
	t.Helper()
	code, _, h := mcpExchange(ctx, t, endpoint, token, sid, body, extra...)
	return code, h
}

// mcpExchange is mcpPost's status and body, and the response's headers.
func mcpExchange(ctx context.Context, t *testing.T, endpoint, token, sid, body string, extra ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}
