package e2e

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/credentials/credentialstest"
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

// TestGroupCredentials: each group gets its own credentials and no other's. billing (a
// worker group) gets a token exchanged for the caller's with its audience, docs (an MCP
// group) one with its own as its session's Authorization header, crm its tenant's secret
// from a Kubernetes-style Secret volume (read again when it is swapped), plain none of
// them; a client's own values under those keys never reach a group. Many calls exchange
// once per caller and group; a token endpoint that refuses becomes a tool error the model
// reads. No token, secret or client secret is in the orchestrator's log, a span, the
// journal's files or the run's events.
func TestGroupCredentials(t *testing.T) {
	rcv, _ := startTraceCollector(t)
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"billing_tool", `{}`}, {"crm_tool", `{}`}, {"plain_tool", `{}`}, {"echo", `{"text":"hi"}`}}},
		{text: "done"},
	}}
	useModel(t, model)
	idp := credentialstest.Start("toolmesh", "idp-client-secret-4f1c", "billing-api", "docs-api")
	t.Cleanup(idp.Close)
	sign := newSigner(t, "k1")
	dir := t.TempDir()
	clientSecret := filepath.Join(dir, "client-secret")
	key := filepath.Join(dir, "journal.key")
	for path, v := range map[string]string{clientSecret: "idp-client-secret-4f1c\n", key: strings.Repeat("cd", 32)} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secrets := filepath.Join(dir, "tenants")
	writeTenantSecret(t, secrets, "acme", "..v1", "acme-secret-1a2b")
	writeTenantSecret(t, secrets, "globex", "..v1", "globex-secret-3c4d")
	meta := startMetaServer(t)
	journalDir := filepath.Join(dir, "data")
	m := startMesh(t, "", credConfig(sign, idp, clientSecret, secrets, meta.url, journalDir, key))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cw := startCredWorker(ctx, t, m.orch.Addr)
	alice := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": "alice", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	lister, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(alice, true))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkerCount(ctx, t, lister, 1)
	_ = lister.Close()
	bob := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": "bob", "tenant": "globex", "exp": time.Now().Add(time.Hour).Unix()})
	var events []*toolpb.RunResponse
	for _, tok := range []string{alice, alice, alice, bob} {
		evs := credRun(ctx, t, m, tok)
		events = append(events, evs...)
		if got := finalText(t, evs); got != "done" {
			t.Fatalf("final %q", got)
		}
	}
	if n := idp.Calls.Load(); n != 4 {
		t.Errorf("4 runs of 2 callers calling 2 groups with exchanged tokens: the token endpoint was called %d times, want 4 (once per caller and group)", n)
	}
	checkGroupsSaw(t, cw, meta, idp, []string{"acme", "acme", "acme", "globex"}, []string{"acme-secret-1a2b", "acme-secret-1a2b", "acme-secret-1a2b", "globex-secret-3c4d"})

	// The Secret is updated on disk: the next call carries the new value.
	writeTenantSecret(t, secrets, "acme", "..v2", "acme-secret-5e6f")
	time.Sleep(100 * time.Millisecond)
	events = append(events, credRun(ctx, t, m, alice)...)
	if got := cw.calls("crm_tool"); got[len(got)-1].ctx["x-api-key"] != "acme-secret-5e6f" {
		t.Errorf("after the Secret's update crm saw %q, want acme-secret-5e6f", got[len(got)-1].ctx["x-api-key"])
	}

	// The token endpoint refuses a new caller: the model reads why, the other calls go on.
	idp.FailNext(-1, 400, "invalid_grant", "the subject token was revoked")
	carol := sign.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": "carol", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	evs := credRun(ctx, t, m, carol)
	events = append(events, evs...)
	checkRefusalReadByModel(t, evs)

	secretsList := []string{alice, bob, carol, "idp-client-secret-4f1c", "acme-secret-1a2b", "acme-secret-5e6f", "globex-secret-3c4d"}
	for _, g := range idp.Granted() {
		secretsList = append(secretsList, g.Token)
	}
	m.stop()
	time.Sleep(300 * time.Millisecond) // the last span batches
	checkNoCredentialLeaks(t, m, rcv, journalDir, events, secretsList)
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
