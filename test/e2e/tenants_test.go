package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// signer issues test JWTs with an ECDSA key whose public half is in a JWKS file.
type signer struct {
	key  *ecdsa.PrivateKey
	kid  string
	jwks string
}

func newSigner(t *testing.T, kid string) *signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	pad := func(b []byte) []byte { return append(make([]byte, 32-len(b)), b...) }
	set := map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
		"x": b64(pad(key.X.Bytes())), "y": b64(pad(key.Y.Bytes()))}}}
	js, _ := json.Marshal(set)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, js, 0o600); err != nil {
		t.Fatal(err)
	}
	return &signer{key: key, kid: kid, jwks: path}
}

func (s *signer) token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = s.kid
	raw, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (s *signer) tenantToken(t *testing.T, tenant string) string {
	return s.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": "user-1", "tenant": tenant,
		"exp": time.Now().Add(time.Hour).Unix()})
}

// TestTenants (catalogue S05, S06, S07's run isolation, S08's tenant, S10): clients
// authenticate with bearer JWTs; a tenant is offered and may call only its groups' tools
// (a call to another's, which the model names though it was never offered, never reaches
// a worker), its calls carry its verified tenant whatever the client put in the context,
// and it cannot see another tenant's runs; tokens that are expired, for another audience,
// of another issuer, badly signed or without a tenant are refused.
func TestTenants(t *testing.T) {
	sign := newSigner(t, "k1")
	m := startMesh(t, "tenants.yaml", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
  globex: {groups: [echo_globex], tool_calls_per_minute: 2, max_messages: 3, max_concurrent_runs: 2}
agentic_tools:
  sneaky:
    description: Look around.
    parameters: {type: object, properties: {task: {type: string}}, required: [task]}
    tools: [show_context_acme, show_context_globex]
`, sign.jwks))
	m.startWorker("acme-1", "echo_acme")
	m.startWorker("globex-1", "echo_globex")
	as := func(tenant string) *client.Client {
		c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(sign.tenantToken(t, tenant), true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	acme, globex := as("acme"), as("globex")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitWorkerCount(ctx, t, acme, 2)

	// A run of acme's, whose client claims to be globex in the context.
	var final, runID string
	for ev, err := range acme.Run(ctx, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_acme"}, Context: map[string]string{"tenant_id": "globex"}}) {
		if err != nil {
			m.dump()
			t.Fatalf("acme's run: %v", err)
		}
		runID = ev.GetRunId()
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	acmePart, globexPart, _ := strings.Cut(final, " | ")
	if !strings.Contains(acmePart, `"tenant_id":"acme"`) || strings.Contains(acmePart, "globex") {
		t.Errorf("acme's worker saw %s; want the verified tenant acme, not the client's globex", acmePart)
	}
	if !strings.Contains(globexPart, "Tool 'show_context_globex' does not exist") {
		t.Errorf("the call of globex's tool, never offered, answered %q; want that it does not exist", globexPart)
	}
	// An agentic tool whose sub-tools include globex's: the nested call is refused
	// before it leaves.
	var sneak string
	for ev, err := range acme.Run(ctx, &toolpb.RunRequest{Prompt: "sneak", Tools: []string{"sneaky"}}) {
		if err != nil {
			m.dump()
			t.Fatalf("acme's sneaky run: %v", err)
		}
		if f := ev.GetFinalResult(); f != nil {
			sneak = f.GetText()
		}
	}
	if !strings.Contains(sneak, "Tool 'show_context_globex' is not available to this run") {
		t.Errorf("the nested call of globex's tool answered %q; want the refusal", sneak)
	}
	if calls := workerCalls(t, acme); calls["globex-1"] != 0 || calls["acme-1"] != 1 {
		t.Errorf("calls per worker %v; want one on acme-1 and none on globex-1", calls)
	}

	// A group outside the grant is refused before the run starts.
	_, err := m.firstEvent(ctx, acme, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_globex"}})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "tool_groups[0]") {
		t.Errorf("acme asking for globex's group: %v, want PERMISSION_DENIED naming tool_groups[0]", err)
	}
	// Its manifest lacks globex's tools.
	tools, err := acme.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if ti.GetGroup() == "echo_globex" {
			t.Errorf("acme's ListTools shows %s of globex", ti.GetDefinition().GetName())
		}
	}

	// Another tenant's runs do not exist for globex.
	if _, err := globex.GetRun(ctx, runID); status.Code(err) != codes.NotFound {
		t.Errorf("globex's GetRun of acme's run: %v, want NotFound", err)
	}
	if _, err := globex.CancelRun(ctx, runID, "mine now"); status.Code(err) != codes.NotFound {
		t.Errorf("globex's CancelRun of acme's run: %v, want NotFound", err)
	}
	for _, err := range globex.Watch(ctx, runID, 0) {
		if status.Code(err) != codes.NotFound {
			t.Errorf("globex's WatchRun of acme's run: %v, want NotFound", err)
		}
		break
	}
	if r, err := acme.GetRun(ctx, runID); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("acme's GetRun of its run: %v, %v", r.GetState(), err)
	}

	// globex's quotas: two tool calls a minute (the third is not sent, and the model reads
	// when to try again), three messages to start a run with.
	var texts []string
	for range 3 {
		for ev, err := range globex.Run(ctx, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_globex"}}) {
			if err != nil {
				t.Fatalf("globex's run: %v", err)
			}
			if f := ev.GetFinalResult(); f != nil {
				texts = append(texts, f.GetText())
			}
		}
	}
	if len(texts) != 3 || strings.Contains(texts[1], "was not called") || !strings.Contains(texts[2], "Tool 'show_context_globex' was not called: this run's tenant has made its 2 tool calls of the last minute. Try again in") {
		t.Errorf("globex's three runs answered %q; want the third call refused by the rate", texts)
	}
	msgs := make([]*toolpb.ConversationMessage, 4)
	for i := range msgs {
		msgs[i] = &toolpb.ConversationMessage{Role: toolpb.Role_ROLE_USER, Text: "echo"}
	}
	if _, err := m.firstEvent(ctx, globex, &toolpb.RunRequest{Messages: msgs, ToolGroups: []string{"echo_globex"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "messages") {
		t.Errorf("globex's run of 4 messages: %v, want INVALID_ARGUMENT naming messages", err)
	}

	// globex at its bound of two runs in progress: a third is refused at once, with
	// RetryInfo, while acme's runs go on.
	slowDone := make(chan error, 2)
	started := make(chan struct{}, 2)
	for range 2 {
		go func() {
			for ev, err := range globex.Run(ctx, &toolpb.RunRequest{Prompt: "slow"}) {
				if err != nil {
					slowDone <- err
					return
				}
				if ev.GetStarted() != nil {
					started <- struct{}{}
				}
			}
			slowDone <- nil
		}()
	}
	<-started
	<-started
	_, err = m.firstEvent(ctx, globex, &toolpb.RunRequest{Prompt: "slow"})
	st := status.Convert(err)
	var ce *client.Error
	retry := errors.As(err, &ce) && ce.RetryAfter > 0
	if st.Code() != codes.ResourceExhausted || !retry || !strings.Contains(st.Message(), `tenant "globex" is running its maximum of 2 runs`) {
		t.Errorf("globex's third run: %v (retry info %v), want RESOURCE_EXHAUSTED with RetryInfo", err, retry)
	}
	if _, err := m.firstEvent(ctx, acme, &toolpb.RunRequest{Prompt: "slow"}); err != nil {
		t.Errorf("acme's run while globex is at its bound: %v", err)
	}
	for range 2 {
		if err := <-slowDone; err != nil {
			t.Errorf("a slow run of globex: %v", err)
		}
	}
	if _, err := m.firstEvent(ctx, globex, &toolpb.RunRequest{Prompt: "slow"}); err != nil {
		t.Errorf("globex's run once its runs ended: %v", err)
	}

	// Tokens the orchestrator must refuse.
	exp := time.Now().Add(time.Hour).Unix()
	other := newSigner(t, "k1")
	for _, tc := range []struct {
		name  string
		token string
		want  codes.Code
	}{
		{"expired", sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "tenant": "acme", "exp": time.Now().Add(-time.Hour).Unix()}), codes.Unauthenticated},
		{"another audience", sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "someone-else", "tenant": "acme", "exp": exp}), codes.Unauthenticated},
		{"another issuer", sign.token(t, jwt.MapClaims{"iss": "https://evil.test", "aud": "toolmesh", "tenant": "acme", "exp": exp}), codes.Unauthenticated},
		{"another key", other.tenantToken(t, "acme"), codes.Unauthenticated},
		{"no tenant", sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "exp": exp}), codes.Unauthenticated},
		{"no expiry", sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "tenant": "acme"}), codes.Unauthenticated},
		{"unknown tenant", sign.tenantToken(t, "initech"), codes.PermissionDenied},
		{"none", "", codes.Unauthenticated},
	} {
		var c *client.Client
		var err error
		if tc.token == "" {
			c, err = client.Dial(m.orch.Addr, insecure.NewCredentials())
		} else {
			c, err = client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(tc.token, true))
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListTools(ctx)
		_ = c.Close()
		if status.Code(err) != tc.want {
			t.Errorf("a token %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if m.orch.CountLogs("tool call refused: outside the tenant's groups", map[string]string{"tenant": "acme"}) != 1 {
		t.Error("no audit event for the refused call")
	}
}

// firstEvent starts a run and returns its first event, or the error that ended it.
func (m *mesh) firstEvent(ctx context.Context, c *client.Client, req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
	for ev, err := range c.Run(ctx, req) {
		return ev, err
	}
	return nil, nil
}

// waitWorkerCount waits until c lists n workers (c may be any tenant's client: the
// workers are everyone's to list).
func waitWorkerCount(ctx context.Context, t *testing.T, c *client.Client, n int) {
	t.Helper()
	for {
		ws, err := c.ListWorkers(ctx)
		if err == nil && len(ws) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workers: %v, %v; want %d", ws, err, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
