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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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
	tm := startTenantsMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checkTenantWorkers(ctx, t, tm)
	runID := checkTenantVerified(ctx, t, tm)
	checkTenantGroupGrant(ctx, t, tm)
	checkTenantRunsHidden(ctx, t, tm, runID)
	checkTenantRunIDs(ctx, t, tm, runID)
	checkTenantQuotas(ctx, t, tm)
	checkTenantToolGrant(ctx, t, tm)
	checkTenantRunBound(ctx, t, tm)
	checkTenantTokens(ctx, t, tm)
}

// tenantsMesh is the mesh of TestTenants, the signer of its tokens and a client per tenant.
type tenantsMesh struct {
	m                   *mesh
	sign                *signer
	acme, globex, hooli *client.Client
}

// startTenantsMesh starts an orchestrator with the tenants acme, globex and hooli, a
// worker for each one's group, and a client authenticated as each tenant.
func startTenantsMesh(t *testing.T) *tenantsMesh {
	t.Helper()
	sign := newSigner(t, "k1")
	m := startMesh(t, "tenants.yaml", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
  globex: {groups: [echo_globex], tool_calls_per_minute: 2, max_messages: 3, max_concurrent_runs: 2}
  hooli: {groups: [math], tools: [math, add], max_request_bytes: 4096}
agentic_tools:
  sneaky:
    description: Look around.
    parameters: {type: object, properties: {task: {type: string}}, required: [task]}
    tools: [show_context_acme, show_context_globex]
`, sign.jwks))
	m.startWorker("acme-1", "echo_acme")
	m.startWorker("globex-1", "echo_globex")
	m.startWorker("math-1", "math")
	as := func(tenant string) *client.Client {
		c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(sign.tenantToken(t, tenant), true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return &tenantsMesh{m: m, sign: sign, acme: as("acme"), globex: as("globex"), hooli: as("hooli")}
}

// checkTenantWorkers checks that each tenant lists the workers of its own groups only.
func checkTenantWorkers(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	waitWorkerCount(ctx, t, tm.acme, 1)
	waitWorkerCount(ctx, t, tm.globex, 1)
	waitWorkerCount(ctx, t, tm.hooli, 1)
	if ws, _ := tm.acme.ListWorkers(ctx); len(ws) != 1 || ws[0].GetWorkerId() != "acme-1" || len(ws[0].GetGroups()) != 1 {
		t.Errorf("acme lists the workers %v; want acme-1 alone", ws)
	}
}

// checkTenantVerified runs acme's runs and checks that its calls carry its verified
// tenant and never reach globex's tool; it returns the id of acme's first run.
func checkTenantVerified(ctx context.Context, t *testing.T, tm *tenantsMesh) string {
	t.Helper()
	m, acme := tm.m, tm.acme
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
	// An agentic tool whose sub-tools include globex's: its nested loop is not offered
	// globex's tool, and a call of it goes nowhere.
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
	if !strings.Contains(sneak, "Tool 'show_context_globex' does not exist") {
		t.Errorf("the nested call of globex's tool answered %q; want that it does not exist (the sub-tool is not offered)", sneak)
	}
	if calls := workerCalls(t, acme); workerCalls(t, tm.globex)["globex-1"] != 0 || calls["acme-1"] != 1 {
		t.Errorf("calls per worker %v; want one on acme-1 and none on globex-1", calls)
	}
	return runID
}

// checkTenantGroupGrant checks that acme may neither ask for nor list globex's group.
func checkTenantGroupGrant(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	// A group outside the grant is refused before the run starts.
	_, err := tm.m.firstEvent(ctx, tm.acme, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_globex"}})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "tool_groups[0]") {
		t.Errorf("acme asking for globex's group: %v, want PERMISSION_DENIED naming tool_groups[0]", err)
	}
	// Its manifest lacks globex's tools.
	tools, err := tm.acme.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if ti.GetGroup() == "echo_globex" {
			t.Errorf("acme's ListTools shows %s of globex", ti.GetDefinition().GetName())
		}
	}
}

// checkTenantRunsHidden checks that acme's run does not exist for globex, and does for acme.
func checkTenantRunsHidden(ctx context.Context, t *testing.T, tm *tenantsMesh, runID string) {
	t.Helper()
	globex := tm.globex
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
	if r, err := tm.acme.GetRun(ctx, runID); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("acme's GetRun of its run: %v, %v", r.GetState(), err)
	}
}

// checkTenantRunIDs checks that run ids are the tenant's own: hooli starting a run with
// the id of acme's learns nothing of it (it used to be refused ALREADY_EXISTS where every
// other call answers NOT_FOUND); the two runs then live side by side, each its tenant's.
func checkTenantRunIDs(ctx context.Context, t *testing.T, tm *tenantsMesh, runID string) {
	t.Helper()
	acme, hooli := tm.acme, tm.hooli
	for _, id := range []string{runID, "shared-id"} {
		if id == "shared-id" {
			if _, err := tm.m.firstEvent(ctx, acme, &toolpb.RunRequest{RunId: id, Prompt: "echo", ToolGroups: []string{"echo_acme"}}); err != nil {
				t.Fatalf("acme's run %s: %v", id, err)
			}
		}
		var got string
		for ev, err := range hooli.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: "echo", ToolGroups: []string{"math"}}) {
			if err != nil {
				t.Fatalf("hooli's run with acme's run id %s: %v", id, err)
			}
			got = ev.GetRunId()
		}
		if got != id {
			t.Errorf("hooli's run with id %s reports run id %s", id, got)
		}
		for who, c := range map[string]*client.Client{"acme": acme, "hooli": hooli} {
			r, err := c.GetRun(ctx, id)
			if err != nil || r.GetRunId() != id {
				t.Errorf("%s's GetRun(%s): %v, %v", who, id, r, err)
			}
		}
		for ev, err := range hooli.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: "echo", ToolGroups: []string{"math"}}) {
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("hooli's second run with its id %s: %v, %v; want ALREADY_EXISTS", id, ev, err)
			}
			break
		}
	}
	if runs, _, err := hooli.ListRuns(ctx, toolpb.RunState_RUN_STATE_UNSPECIFIED, 100, ""); err != nil || len(runs) != 2 {
		t.Errorf("hooli lists %v, %v; want its two runs", runs, err)
	} else {
		for _, r := range runs {
			if r.GetRunId() != runID && r.GetRunId() != "shared-id" {
				t.Errorf("hooli lists a run id %q, not one it gave", r.GetRunId())
			}
		}
	}
}

// checkTenantQuotas checks globex's quotas: two tool calls a minute (the third is not
// sent, and the model reads when to try again), three messages to start a run with.
func checkTenantQuotas(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	var texts []string
	for range 3 {
		for ev, err := range tm.globex.Run(ctx, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_globex"}}) {
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
	if _, err := tm.m.firstEvent(ctx, tm.globex, &toolpb.RunRequest{Messages: msgs, ToolGroups: []string{"echo_globex"}}); !quotaRefusal(err, "messages") {
		t.Errorf("globex's run of 4 messages: %v, want RESOURCE_EXHAUSTED naming messages, without RetryInfo", err)
	}
}

// checkTenantToolGrant checks that hooli may use the math group's facade and add,
// nothing else of it: unfolding the facade offers add alone, a call of multiply (named
// though never offered) reaches no worker, ListTools shows only the two, and naming
// multiply is refused; and that its requests are at most 4 KiB.
func checkTenantToolGrant(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	m, hooli := tm.m, tm.hooli
	var added []string
	var answer string
	for ev, err := range hooli.Run(ctx, &toolpb.RunRequest{Prompt: "unfold", ToolGroups: []string{"math"}}) {
		if err != nil {
			m.dump()
			t.Fatalf("hooli's run: %v", err)
		}
		if c := ev.GetToolsChanged(); c != nil {
			added = append(added, c.GetAdded()...)
		}
		if f := ev.GetFinalResult(); f != nil {
			answer = f.GetText()
		}
	}
	if !slices.Contains(added, "add") || slices.Contains(added, "multiply") || slices.Contains(added, "subtract") {
		t.Errorf("unfolding math offered hooli %v; want add and none of the tools outside its grant", added)
	}
	if !strings.Contains(answer, "add: 3") || !strings.Contains(answer, "Tool 'multiply' does not exist") {
		t.Errorf("hooli's run answered %q; want add's sum and that multiply does not exist", answer)
	}
	if calls := workerCalls(t, hooli); calls["math-1"] != 1 {
		t.Errorf("math-1 ran %d calls; want add's alone", calls["math-1"])
	}
	tools, err := hooli.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if n := ti.GetDefinition().GetName(); ti.GetGroup() == "math" && n != "math" && n != "add" {
			t.Errorf("hooli's ListTools shows %s of math", n)
		}
	}
	if _, err := m.firstEvent(ctx, hooli, &toolpb.RunRequest{Prompt: "x", Tools: []string{"multiply"}}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "tools[0]") {
		t.Errorf("hooli naming multiply: %v, want PERMISSION_DENIED naming tools[0]", err)
	}
	req := &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "math", Tools: []string{"add", "multiply"}}}}
	if _, err := m.firstEvent(ctx, hooli, req); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "required_tool_groups[0].tools[1]") {
		t.Errorf("hooli requiring multiply: %v, want PERMISSION_DENIED naming required_tool_groups[0].tools[1]", err)
	}
	// Its requests are at most 4 KiB.
	if _, err := m.firstEvent(ctx, hooli, &toolpb.RunRequest{Prompt: strings.Repeat("big ", 2000), ToolGroups: []string{"math"}}); !quotaRefusal(err, "max_request_bytes") {
		t.Errorf("hooli's 8 KB request: %v, want RESOURCE_EXHAUSTED naming max_request_bytes, without RetryInfo", err)
	}
}

// checkTenantRunBound checks globex at its bound of two runs in progress: a third is
// refused at once, with RetryInfo, while acme's runs go on.
func checkTenantRunBound(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	m, globex := tm.m, tm.globex
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
	_, err := m.firstEvent(ctx, globex, &toolpb.RunRequest{Prompt: "slow"})
	st := status.Convert(err)
	var ce *client.Error
	retry := errors.As(err, &ce) && ce.RetryAfter > 0
	if st.Code() != codes.ResourceExhausted || !retry || !strings.Contains(st.Message(), `tenant "globex" is running its maximum of 2 runs`) {
		t.Errorf("globex's third run: %v (retry info %v), want RESOURCE_EXHAUSTED with RetryInfo", err, retry)
	}
	if _, err := m.firstEvent(ctx, tm.acme, &toolpb.RunRequest{Prompt: "slow"}); err != nil {
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
}

// checkTenantTokens checks the tokens the orchestrator must refuse.
func checkTenantTokens(ctx context.Context, t *testing.T, tm *tenantsMesh) {
	t.Helper()
	sign := tm.sign
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
			c, err = client.Dial(tm.m.orch.Addr, insecure.NewCredentials())
		} else {
			c, err = client.Dial(tm.m.orch.Addr, insecure.NewCredentials(), client.Bearer(tc.token, true))
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
}

// quotaRefusal reports whether err is a tenant's quota refusing a request for good:
// RESOURCE_EXHAUSTED with a QuotaFailure, its message naming what, and no RetryInfo
// (sending it again would not help).
func quotaRefusal(err error, what string) bool {
	st := status.Convert(err)
	var quota, retry bool
	for _, d := range st.Details() {
		switch d.(type) {
		case *errdetails.QuotaFailure:
			quota = true
		case *errdetails.RetryInfo:
			retry = true
		}
	}
	return st.Code() == codes.ResourceExhausted && quota && !retry && strings.Contains(st.Message(), what)
}

// firstEvent starts a run and returns its first event, or the error that ended it.
func (m *mesh) firstEvent(ctx context.Context, c *client.Client, req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
	for ev, err := range c.Run(ctx, req) {
		return ev, err
	}
	return nil, nil
}

// waitWorkerCount waits until c lists n workers (a tenant's client lists the workers of
// its groups).
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
