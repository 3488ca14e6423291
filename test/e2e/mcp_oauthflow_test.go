package e2e

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
)

// oauthMesh starts a mesh whose MCP endpoint is a protected resource of the
// authorization server p (its tokens checked against p's key set, fetched from it), with
// the scope context:read granting acme's show_context tool, and waits for acme's worker.
// It returns the mesh and the resource's URL.
func oauthMesh(t *testing.T, p *idp) (*mesh, string) {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + addr + "/mcp"
	m := startMesh(t, "", fmt.Sprintf(`
auth:
  jwt: {jwks_url: %q, issuer: %q, audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
mcp_serve:
  listen: %s
  resource: %q
  scopes: {"context:read": ["show_context_*"]}
`, p.issuer+"/jwks.json", p.issuer, addr, resource))
	m.startWorker("acme-1", "echo_acme")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(p.sign(jwt.MapClaims{"aud": "toolmesh", "sub": "ops",
		"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}), true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	if err := harness.WaitWorkers(ctx, admin, "acme-1"); err != nil {
		m.dump()
		t.Fatal(err)
	}
	return m, resource
}

// TestMCPOAuthWithAnAuthorizationServer: an MCP client that knows nothing but the
// endpoint's URL signs in as MCP's authorization specification describes, with the MCP
// Go SDK's own OAuth client against a real authorization server: the endpoint's 401
// names its resource metadata, which names the authorization server; the client reads
// that server's metadata, registers itself, sends the user through the authorization
// code flow with PKCE and the resource indicator, and retries with the token it gets,
// which is issued for the endpoint alone and carries the scopes its metadata lists. The
// session then lists and calls the tools those scopes grant, as the user's tenant.
func TestMCPOAuthWithAnAuthorizationServer(t *testing.T) {
	p := startIdP(t, "alice", "acme", "context:read", "admin")
	_, resource := oauthMesh(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	redirect := "http://127.0.0.1:1/callback" // never reached: the browser below stops at the redirect
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "toolmesh e2e", TokenEndpointAuthMethod: "none"}},
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: browserSignIn,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e-oauth", Version: "v1"}, nil)
	session, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: resource, OAuthHandler: h, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connecting with the OAuth flow: %v", err)
	}
	defer func() { _ = session.Close() }()
	tools, err := session.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "show_context_acme" {
		t.Fatalf("tools %v, %v; want acme's show_context alone", tools, err)
	}
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(mcpServeText(res), "acme") {
		t.Errorf("call: %v, %v; want acme's context", res, err)
	}
	issued := p.tokens()
	if len(issued) != 1 {
		t.Fatalf("the authorization server issued %d tokens, want 1", len(issued))
	}
	if issued[0]["aud"] != resource || issued[0]["scope"] != "context:read" || issued[0]["sub"] != "alice" {
		t.Errorf("the token's claims %v: want the endpoint as audience and the scope its metadata lists", issued[0])
	}
}

// TestMCPStepUpAuthorization: a client whose token's scopes do not grant a tool it calls
// is led to the token it needs, as MCP's authorization specification describes (step-up):
// the endpoint answers the call 403 with error="insufficient_scope" and the scopes that
// grant it; the MCP Go SDK's OAuth client goes through the authorization server again for
// them and sends the call again. Over MCP 2026-07-28, whose requests belong to no
// session, the call is then served. A 2025-11-25 session is bound to the scopes it was
// opened with: the retry in it is told the session is not there, and the client opens a
// new one with the new token, which lists and calls the tool. The call was refused as a
// tool the session did not have, which no client can step up from.
func TestMCPStepUpAuthorization(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		t.Run(cmp.Or(version, "latest"), func(t *testing.T) { stepUp(t, version) })
	}
}

// stepUp is TestMCPStepUpAuthorization over MCP version ("": the SDK's latest).
func stepUp(t *testing.T, version string) {
	p := startIdP(t, "alice", "acme", "context:read", "admin")
	_, resource := oauthMesh(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	redirect := "http://127.0.0.1:1/callback"
	first := true
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "toolmesh e2e step-up", TokenEndpointAuthMethod: "none"}},
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: browserSignIn,
		// The user first signs in for the admin scope alone, which grants none of the
		// endpoint's tools; then for what the step-up asks.
		ScopeFilter: func(scopes []string) []string {
			if first {
				first = false
				return []string{"admin"}
			}
			return scopes
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e-step-up", Version: "v1"}, nil)
	connect := func() *sdk.ClientSession {
		t.Helper()
		session, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: resource, OAuthHandler: h, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connecting with the OAuth flow: %v", err)
		}
		t.Cleanup(func() { _ = session.Close() })
		return session
	}
	session := connect()
	if tools, err := session.ListTools(ctx, nil); err != nil || len(tools.Tools) != 0 {
		t.Fatalf("with the admin scope alone: tools %v, %v; want none", tools, err)
	}
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}})
	if version != "" {
		if !errors.Is(err, sdk.ErrSessionMissing) {
			t.Fatalf("the call that needs context:read in the admin token's session: %v, %v; want the step-up, then the session missing to the new token", res, err)
		}
		session = connect()
		res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}})
	}
	if err != nil || res.IsError || !strings.Contains(mcpServeText(res), "acme") {
		t.Errorf("the call after the step-up: %v, %v; want acme's context", res, err)
	}
	if tools, err := session.ListTools(ctx, nil); err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "show_context_acme" {
		t.Errorf("after the step-up: tools %v, %v; want show_context_acme", tools, err)
	}
	issued := p.tokens()
	scopes := func(i int) []string {
		s, _ := issued[i]["scope"].(string)
		return slices.Sorted(slices.Values(strings.Fields(s)))
	}
	if len(issued) != 2 || !slices.Equal(scopes(0), []string{"admin"}) || !slices.Equal(scopes(1), []string{"admin", "context:read"}) {
		t.Errorf("the authorization server issued %d tokens: %v; want one for admin, then one for admin and context:read", len(issued), issued)
	}
}

// browserSignIn is the user's browser in the authorization code flow: it opens the
// authorization URL (the user is signed in at once) and reads the code from where the
// server redirects it.
func browserSignIn(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		return nil, fmt.Errorf("the authorization server answered %d, redirecting to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	q := back.Query()
	if e := q.Get("error"); e != "" {
		return nil, errors.New("authorization refused: " + e + ": " + q.Get("error_description"))
	}
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// TestMCPInspectorSignsIn: the MCP Inspector's CLI (npm @modelcontextprotocol/inspector,
// TOOLMESH_MCP_INSPECTOR its launcher), given the endpoint's URL alone, signs in through
// the authorization server as the Go SDK's client does, lists the tools the granted scope
// reaches and calls one. The test is the user's browser: it opens the URL the CLI asks the
// user to visit, and the authorization server's redirect reaches the CLI's own callback
// listener.
func TestMCPInspectorSignsIn(t *testing.T) {
	inspector := os.Getenv("TOOLMESH_MCP_INSPECTOR")
	if inspector == "" {
		t.Skip("TOOLMESH_MCP_INSPECTOR is not set (make test sets it)")
	}
	p := startIdP(t, "alice", "acme", "context:read")
	_, resource := oauthMesh(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	home := t.TempDir()
	callback, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	out := runInspector(ctx, t, inspector, home, "--cli", resource, "--transport", "http", "--method", "tools/list",
		"--callback-url", "http://"+callback+"/oauth/callback")
	if !strings.Contains(out, `"show_context_acme"`) {
		t.Fatalf("tools/list printed %s; want acme's show_context", out)
	}
	// Signed in once: the next call uses the token the CLI stored.
	out = runInspector(ctx, t, inspector, home, "--cli", resource, "--transport", "http", "--method", "tools/call",
		"--tool-name", "show_context_acme", "--stored-auth-only")
	if !strings.Contains(out, "acme") {
		t.Errorf("tools/call printed %s; want acme's context", out)
	}
	if n := len(p.tokens()); n != 1 {
		t.Errorf("the authorization server issued %d tokens, want 1", n)
	}
}

// runInspector runs the Inspector's CLI with HOME at home (where it keeps its clients and
// tokens) and returns its standard output. When it asks the user to visit a URL on
// standard error, the test opens it as the user's browser would, following redirects.
func runInspector(ctx context.Context, t *testing.T, inspector, home string, args ...string) string {
	t.Helper()
	// No browser here: xdg-open (which the CLI runs to open the URL) does nothing, and the
	// test opens the URL the CLI prints.
	bin := filepath.Join(home, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, inspector, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "NO_COLOR=1", "MCP_AUTO_OPEN_ENABLED=true", "MCP_INSPECTOR_SECRET_STORE=file", "PATH="+bin+":"+os.Getenv("PATH"))
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	browsed := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			log.WriteString(line + "\n")
			if _, u, ok := strings.Cut(line, "Please navigate to: "); ok {
				go func() { browsed <- browse(ctx, strings.TrimSpace(u)) }()
			}
		}
	}()
	err = cmd.Wait()
	select {
	case berr := <-browsed:
		if berr != nil {
			t.Errorf("the browser: %v", berr)
		}
	default:
	}
	if err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), log.String())
	}
	return stdout.String()
}

// browse opens u as a browser does: it follows the redirects to the page at their end.
func browse(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s ended at %s with HTTP %d", u, resp.Request.URL, resp.StatusCode)
	}
	return nil
}
