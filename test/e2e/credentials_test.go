package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/credentials/credentialstest"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// seenCall is what a worker's tool received of a call: its verified tenant and context.
type seenCall struct {
	tenant string
	ctx    map[string]string
}

// credWorker is a worker (pkg/worker, in this process) serving three groups — billing
// (an exchanged token), crm (a tenant's secret) and plain (neither) — whose tools record
// what each call carried and answer "ok", so that no credential reaches the model.
type credWorker struct {
	mu   sync.Mutex
	seen map[string][]seenCall // by tool
}

func (w *credWorker) calls(name string) []seenCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen[name])
}

func startCredWorker(ctx context.Context, t *testing.T, orchestrator string) *credWorker {
	t.Helper()
	cw := &credWorker{seen: map[string][]seenCall{}}
	recorder := func(name string) tool.Tool {
		return tool.MustFunc(name, "Records what it receives.", func(ctx context.Context, _ struct{}) (string, error) {
			bag := toolctx.FromContext(ctx)
			tenant, _ := bag.Get(toolctx.TenantKey)
			cw.mu.Lock()
			cw.seen[name] = append(cw.seen[name], seenCall{tenant: tenant, ctx: bag.Map()})
			cw.mu.Unlock()
			return "ok", nil
		})
	}
	group := func(role string) worker.Group {
		return worker.Group{Role: role, Description: role + " tools", Provider: "test", Version: "1", Tools: []tool.Tool{recorder(role + "_tool")}}
	}
	w, err := worker.New(worker.Options{ID: "cred-worker", Orchestrator: orchestrator, Listen: "127.0.0.1:0", MinBackoff: 50 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, DrainTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)},
		group("billing"), group("crm"), group("plain"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return cw
}

// writeTenantSecret writes a tenant's api_key as a Kubernetes Secret volume holds it,
// swapping its ..data link to a new directory.
func writeTenantSecret(t *testing.T, root, tenant, version, value string) {
	t.Helper()
	dir := filepath.Join(root, tenant)
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, version, "api_key"), []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "api_key")); err != nil {
		if err := os.Symlink("..data/api_key", filepath.Join(dir, "api_key")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// credConfig is the orchestrator's config of TestGroupCredentials.
func credConfig(sign *signer, idp *credentialstest.Server, clientSecretFile, secrets, mcpURL, journalDir, key string) string {
	return `
provider: {name: openai}
log: {level: DEBUG}
journal: {data_dir: ` + quote(journalDir) + `, encryption_key_file: ` + quote(key) + `}
auth: {jwt: {jwks_file: ` + quote(sign.jwks) + `, issuer: "https://issuer.test", audience: toolmesh}}
tenants:
  acme: {groups: [billing, crm, plain, docs]}
  globex: {groups: [billing, crm, plain, docs]}
mcp_servers: {meta: {url: ` + quote(mcpURL) + `}}
groups:
  billing:
    context: {kind: allow-keys, keys: [user_token, correlationId]}
    token_exchange: {token_endpoint: ` + quote(idp.URL) + `, client_id: toolmesh, client_secret_file: ` + quote(clientSecretFile) + `,
      audience: billing-api, scope: billing.read, context_key: user_token}
  crm:
    context: {kind: allow-keys, keys: [x-api-key]}
    secrets: {dir: ` + quote(secrets) + `, context_keys: {api_key: x-api-key}, reload_interval: 50ms}
  plain:
    context: {kind: pass-through}
  docs:
    mcp: {server: meta}
    context: {kind: allow-keys, keys: [correlationId]}
    token_exchange: {token_endpoint: ` + quote(idp.URL) + `, client_id: toolmesh, client_secret_file: ` + quote(clientSecretFile) + `,
      client_auth: client_secret_basic, audience: docs-api, header: Authorization}
`
}

// credRun runs the four tools once as the bearer of token and returns the events.
func credRun(ctx context.Context, t *testing.T, m *mesh, token string) []*toolpb.RunResponse {
	t.Helper()
	c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(token, true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var evs []*toolpb.RunResponse
	for ev, err := range c.Run(ctx, &toolpb.RunRequest{Prompt: "use them", ToolGroups: []string{"billing", "crm", "plain", "docs"},
		Context: map[string]string{"correlationId": "c-1", "user_token": "client-forged", "x-api-key": "client-forged"}}) {
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// audienceOf is the aud claim of an issued token (the test endpoint's), read unverified.
func audienceOf(tok string) string {
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(strings.TrimPrefix(tok, "Bearer "), claims); err != nil {
		return ""
	}
	aud, _ := claims["aud"].(string)
	return aud
}

// credEnv is an orchestrator whose groups have credentials, the token endpoint, the MCP
// server and the worker they use, and a signer of callers' tokens.
type credEnv struct {
	m                   *mesh
	idp                 *credentialstest.Server
	sign                *signer
	cw                  *credWorker
	meta                *metaServer
	rcv                 *otlpReceiver
	secrets, journalDir string
}

// startCredEnv starts a credEnv whose model calls the four tools at once, then answers
// "done"; extra is YAML added to its config.
func startCredEnv(ctx context.Context, t *testing.T, extra string) *credEnv {
	t.Helper()
	e := &credEnv{sign: newSigner(t, "k1")}
	e.rcv, _ = startTraceCollector(t)
	useModel(t, &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"billing_tool", `{}`}, {"crm_tool", `{}`}, {"plain_tool", `{}`}, {"echo", `{"text":"hi"}`}}},
		{text: "done"},
	}})
	e.idp = credentialstest.Start("toolmesh", "idp-client-secret-4f1c", "billing-api", "docs-api")
	t.Cleanup(e.idp.Close)
	dir := t.TempDir()
	clientSecret, key := filepath.Join(dir, "client-secret"), filepath.Join(dir, "journal.key")
	for path, v := range map[string]string{clientSecret: "idp-client-secret-4f1c\n", key: strings.Repeat("cd", 32)} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.secrets, e.journalDir = filepath.Join(dir, "tenants"), filepath.Join(dir, "data")
	writeTenantSecret(t, e.secrets, "acme", "..v1", "acme-secret-1a2b")
	writeTenantSecret(t, e.secrets, "globex", "..v1", "globex-secret-3c4d")
	e.meta = startMetaServer(t)
	e.m = startMesh(t, "", credConfig(e.sign, e.idp, clientSecret, e.secrets, e.meta.url, e.journalDir, key), extra)
	e.cw = startCredWorker(ctx, t, e.m.orch.Addr)
	lister := e.client(t, e.caller(t, "alice", "acme"))
	waitWorkerCount(ctx, t, lister, 1)
	return e
}

// caller is a bearer token of sub in tenant.
func (e *credEnv) caller(t *testing.T, sub, tenant string) string {
	return e.sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": sub, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()})
}

// client is a client of the orchestrator with token, closed when the test ends.
func (e *credEnv) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.Dial(e.m.orch.Addr, insecure.NewCredentials(), client.Bearer(token, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestGroupCredentials: each group gets its own credentials and no other's. billing (a
// worker group) gets a token exchanged for the caller's with its audience, docs (an MCP
// group) one with its own as its session's Authorization header, crm its tenant's secret
// from a Kubernetes-style Secret volume (read again when it is swapped), plain none of
// them; a client's own values under those keys never reach a group. Many calls exchange
// once per caller and group; a token endpoint that refuses becomes a tool error the model
// reads. No token, secret or client secret is in the orchestrator's log, a span, the
// journal's files or the run's events.
func TestGroupCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := startCredEnv(ctx, t, "")
	alice, bob := e.caller(t, "alice", "acme"), e.caller(t, "bob", "globex")
	var events []*toolpb.RunResponse
	for _, tok := range []string{alice, alice, alice, bob} {
		evs := credRun(ctx, t, e.m, tok)
		events = append(events, evs...)
		if got := finalText(t, evs); got != "done" {
			t.Fatalf("final %q", got)
		}
	}
	if n := e.idp.Calls.Load(); n != 4 {
		t.Errorf("4 runs of 2 callers calling 2 groups with exchanged tokens: the token endpoint was called %d times, want 4 (once per caller and group)", n)
	}
	checkGroupsSaw(t, e.cw, e.meta, e.idp, []string{"acme", "acme", "acme", "globex"}, []string{"acme-secret-1a2b", "acme-secret-1a2b", "acme-secret-1a2b", "globex-secret-3c4d"})

	// The Secret is updated on disk: the next call carries the new value.
	writeTenantSecret(t, e.secrets, "acme", "..v2", "acme-secret-5e6f")
	time.Sleep(100 * time.Millisecond)
	events = append(events, credRun(ctx, t, e.m, alice)...)
	if got := e.cw.calls("crm_tool"); got[len(got)-1].ctx["x-api-key"] != "acme-secret-5e6f" {
		t.Errorf("after the Secret's update crm saw %q, want acme-secret-5e6f", got[len(got)-1].ctx["x-api-key"])
	}

	// The token endpoint refuses a new caller: the model reads why, the other calls go on.
	e.idp.FailNext(-1, 400, "invalid_grant", "the subject token was revoked")
	carol := e.caller(t, "carol", "acme")
	evs := credRun(ctx, t, e.m, carol)
	events = append(events, evs...)
	checkRefusalReadByModel(t, evs)

	secretsList := []string{alice, bob, carol, "idp-client-secret-4f1c", "acme-secret-1a2b", "acme-secret-5e6f", "globex-secret-3c4d"}
	for _, g := range e.idp.Granted() {
		secretsList = append(secretsList, g.Token)
	}
	e.m.stop()
	time.Sleep(300 * time.Millisecond) // the last span batches
	checkNoCredentialLeaks(t, e.m, e.rcv, e.journalDir, events, secretsList)
}

// TestResumedRunHasNoCallerToken: a run waits for the approval of its billing call when
// its orchestrator is SIGKILLed; the orchestrator restarted on the journal takes it over
// without the caller's token, which is never journaled. Approved, the call is not sent:
// the model reads that the user must sign in again. The call of crm (a tenant's secret)
// made before the crash stands.
func TestResumedRunHasNoCallerToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := startCredEnv(ctx, t, "tools: {billing_tool: {approval: {timeout: 2m}}}")
	alice := e.caller(t, "alice", "acme")
	var callID string
	crmDone := false
	for ev, err := range e.client(t, alice).Run(ctx, &toolpb.RunRequest{RunId: "resume-me", Prompt: "use them", Detached: true,
		ToolGroups: []string{"billing", "crm", "plain", "docs"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if ap := ev.GetApprovalRequested(); ap != nil {
			callID = ap.GetCallId()
		}
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "crm_tool" {
			crmDone = true // its outcome is in the journal: events are sent once committed
		}
		if callID != "" && crmDone {
			break
		}
	}
	addr := e.m.orch.Addr
	_ = e.m.orch.Kill()
	e.m.startOrchestrator(addr)
	c := e.client(t, alice)
	if err := c.ApproveToolCall(ctx, "resume-me", callID, "", true, "fine"); err != nil {
		e.m.dump()
		t.Fatalf("approving after the restart: %v", err)
	}
	var evs []*toolpb.RunResponse
	for ev, err := range c.Watch(ctx, "resume-me", 0) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	got := map[string]string{}
	for _, f := range finished(evs, 1) {
		got[f.GetTool()] = f.GetContent()
	}
	if !strings.Contains(got["billing_tool"], "tool 'billing_tool' was not called") || !strings.Contains(got["billing_tool"], "sign in and run the request again") {
		t.Errorf("the resumed billing call answered %q, want that it needs the user to sign in again", got["billing_tool"])
	}
	if n := len(e.cw.calls("billing_tool")); n != 0 || got["crm_tool"] != "ok" {
		t.Errorf("billing reached the worker %d times; crm answered %q", n, got["crm_tool"])
	}
}

// checkGroupsSaw checks what each group received in the runs of tenants, in order: crm
// wants[i], billing a token for billing-api, plain nothing of it, docs a token for
// docs-api in its header and nothing in _meta.
func checkGroupsSaw(t *testing.T, cw *credWorker, meta *metaServer, idp *credentialstest.Server, tenants, wants []string) {
	t.Helper()
	billing, crm, plain := cw.calls("billing_tool"), cw.calls("crm_tool"), cw.calls("plain_tool")
	if len(billing) != len(tenants) || len(crm) != len(tenants) || len(plain) != len(tenants) {
		t.Fatalf("calls: billing %d, crm %d, plain %d; want %d each", len(billing), len(crm), len(plain), len(tenants))
	}
	for i, tenant := range tenants {
		if tok := billing[i].ctx["user_token"]; audienceOf(tok) != "billing-api" || billing[i].tenant != tenant || billing[i].ctx["correlationId"] != "c-1" {
			t.Errorf("run %d: billing saw tenant %q, a token for %q, correlationId %q", i, billing[i].tenant, audienceOf(tok), billing[i].ctx["correlationId"])
		}
		if _, ok := billing[i].ctx["x-api-key"]; ok {
			t.Errorf("run %d: billing saw crm's key", i)
		}
		if got := crm[i].ctx["x-api-key"]; got != wants[i] || crm[i].tenant != tenant || crm[i].ctx["user_token"] != "" {
			t.Errorf("run %d: crm saw %v for tenant %q, want x-api-key %q", i, crm[i].ctx, crm[i].tenant, wants[i])
		}
		for _, k := range []string{"user_token", "x-api-key", "Authorization"} {
			if v, ok := plain[i].ctx[k]; ok {
				t.Errorf("run %d: plain saw %s = %q", i, k, v)
			}
		}
	}
	meta.mu.Lock()
	auths, metas := slices.Clone(meta.auths), slices.Clone(meta.metas)
	meta.mu.Unlock()
	if len(auths) != len(tenants) {
		t.Fatalf("the MCP server saw %d calls, want %d", len(auths), len(tenants))
	}
	for i, a := range auths {
		_, header, _ := strings.Cut(a, " ")
		if !strings.HasPrefix(header, "Bearer ") || audienceOf(header) != "docs-api" {
			t.Errorf("MCP call %d: Authorization %q, want a token for docs-api", i, header)
		}
		for k := range metas[i] {
			if k != "correlationId" && k != "io.toolmesh/tenant" && k != "traceparent" && k != "tracestate" {
				t.Errorf("MCP call %d: _meta has %q", i, k)
			}
		}
	}
	for _, g := range idp.Granted() {
		if g.Subject != "alice" && g.Subject != "bob" {
			t.Errorf("an exchange for subject %q", g.Subject)
		}
	}
}

// checkRefusalReadByModel: the calls of the groups with exchanged tokens end with an
// error quoting the token endpoint; the others succeed.
func checkRefusalReadByModel(t *testing.T, evs []*toolpb.RunResponse) {
	t.Helper()
	got := map[string]string{}
	for _, f := range finished(evs, 1) {
		got[f.GetTool()] = f.GetContent()
	}
	for _, name := range []string{"billing_tool", "echo"} {
		if !strings.Contains(got[name], "refused to exchange the caller's token: invalid_grant (the subject token was revoked)") {
			t.Errorf("%s answered %q, want the token endpoint's refusal", name, got[name])
		}
	}
	if got["crm_tool"] != "ok" || got["plain_tool"] != "ok" {
		t.Errorf("the other calls answered %v", got)
	}
}

// checkNoCredentialLeaks scans the orchestrator's log, the spans, the journal's files and
// the events for the secrets.
func checkNoCredentialLeaks(t *testing.T, m *mesh, rcv *otlpReceiver, journalDir string, events []*toolpb.RunResponse, secrets []string) {
	t.Helper()
	places := map[string]string{"orchestrator log": m.orch.Output()}
	spans, _ := rcv.snapshot()
	if len(spans) == 0 {
		t.Fatal("no spans were exported: the scan would prove nothing")
	}
	var sb strings.Builder
	for _, s := range spans {
		b, _ := protojson.Marshal(s)
		sb.Write(b)
	}
	places["spans"] = sb.String()
	sb.Reset()
	for _, ev := range events {
		b, _ := protojson.Marshal(ev)
		sb.Write(b)
	}
	places["events"] = sb.String()
	for _, f := range []string{"journal.db", "journal.db-wal", "journal.db-commits"} {
		if b, err := os.ReadFile(filepath.Join(journalDir, f)); err == nil {
			places[f] = string(b)
		}
	}
	if places["journal.db"] == "" || !strings.Contains(places["orchestrator log"], "token exchange refused") {
		t.Fatal("no journal file, or no log of the refusal: the scan would prove little")
	}
	for where, text := range places {
		for i, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("secret %d (%.12s…) is in the %s", i, s, where)
			}
		}
	}
}

// TestMCPEndpointCallerTokenExchanged: a call through the orchestrator's MCP endpoint
// acts for the caller that opened the session: the billing group gets a token exchanged
// for that caller's, and another caller's session gets its own.
func TestMCPEndpointCallerTokenExchanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := startCredEnv(ctx, t, "mcp_serve: {listen: "+addr+"}")
	for i, sub := range []string{"alice", "bob"} {
		session, err := connectMCPServe(ctx, "http://"+addr+"/", e.caller(t, sub, "acme"))
		if err != nil {
			e.m.dump()
			t.Fatal(err)
		}
		res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "billing_tool", Arguments: map[string]any{}})
		_ = session.Close()
		if err != nil || res.IsError || mcpServeText(res) != "ok" {
			t.Fatalf("%s: billing_tool over MCP: %v, %v", sub, res, err)
		}
		var billing []credentialstest.Exchange // the session's listing exchanged docs' too
		for _, g := range e.idp.Granted() {
			if g.Audience == "billing-api" {
				billing = append(billing, g)
			}
		}
		calls := e.cw.calls("billing_tool")
		if len(calls) != i+1 || len(billing) != i+1 || billing[i].Subject != sub || calls[i].ctx["user_token"] != billing[i].Token {
			t.Errorf("%s: the worker saw %d calls, billing-api tokens were granted %d times; want the last for %s, the one the worker saw", sub, len(calls), len(billing), sub)
		}
	}
	checkSessionActsWithTheLatestToken(ctx, t, e, addr)
}

// checkSessionActsWithTheLatestToken: a call in a session acts with the token its own
// request brought, not the one that opened the session (which expires while a session
// lives on, or is refreshed): a call with a refreshed token has it exchanged.
func checkSessionActsWithTheLatestToken(ctx context.Context, t *testing.T, e *credEnv, addr string) {
	t.Helper()
	session, err := connectMCPServe(ctx, "http://"+addr+"/", e.caller(t, "carol", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	if res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "billing_tool", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("billing_tool: %v, %v", res, err)
	}
	granted := len(e.idp.Granted())
	refreshed := e.sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": "carol", "tenant": "acme",
		"exp": time.Now().Add(2 * time.Hour).Unix()})
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"billing_tool","arguments":{}}}`
	if code, out := mcpPost(ctx, t, "http://"+addr+"/", refreshed, session.ID(), body); code != http.StatusOK || !strings.Contains(out, `"ok"`) {
		t.Fatalf("the call with the refreshed token: HTTP %d: %s", code, out)
	}
	if got := e.idp.Granted(); len(got) == granted || got[len(got)-1].Subject != "carol" {
		t.Errorf("the call with the refreshed token exchanged nothing (%d grants before, %d after): it acted with the opener's token", granted, len(got))
	}
}
