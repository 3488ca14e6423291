package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const contextConfig = `
context:
  secrets: [authToken]
  default: {kind: pass-through}
groups:
  echo_alpha: {context: {kind: pass-through}}
  echo_beta: {context: {kind: allow-keys, keys: [tenantId, Authorization]}}
  echo_gamma: {context: {kind: none}}
`

// Canary values that the context test sends and that must never reach a worker they are
// not allowed to.
const (
	ctxCanarySecret = "s3cr3t-T0KEN-do-not-leak"
	ctxCanaryBearer = "Bearer canary-4uTh0r1zAt10n"
	ctxCanaryAPIKey = "canary-4p1-k3y"
)

// TestContextReachesExactlyTheAllowedWorkers: a client sets run- and interaction-level
// contexts; group alpha (pass-through), beta (allow-keys tenantId) and gamma (none) each
// have a worker whose tool echoes what it received. Each worker sees exactly its allowed
// entries, byte for byte, plus the loop id; the configured secret key and the well-known
// credentials (Authorization, api_key) never leave the orchestrator, which is checked on
// the worker side and on the wire by decoding the HTTP/2 frames, except to beta, whose
// allow-keys converter lists Authorization.
func TestContextReachesExactlyTheAllowedWorkers(t *testing.T) {
	m := startMesh(t, "context.yaml", contextConfig)
	sniffers := startContextSniffedWorkers(t, m)

	runCtx := map[string]string{
		"tenantId":      "acme",
		"Trace ID":      "x y\tz",
		"ünï.cödé":      "line1\r\nline2 — ✓",
		"authToken":     ctxCanarySecret,
		"Authorization": ctxCanaryBearer,
		"api_key":       ctxCanaryAPIKey,
	}
	interaction := map[string]string{"tenantId": "override", "correlationId": "c-42"}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{
		Prompt: "show me", ToolGroups: []string{"echo_alpha", "echo_beta", "echo_gamma"},
		Context: runCtx, InteractionContext: interaction,
	}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	var loopID string
	for _, ev := range evs {
		if s := ev.GetStarted(); s != nil {
			loopID = s.GetLoopId()
		}
	}
	if loopID == "" {
		t.Fatal("no loop id in the started event")
	}
	want := map[string]map[string]string{
		"alpha": {"tenantId": "override", "Trace ID": "x y\tz", "ünï.cödé": "line1\r\nline2 — ✓", "correlationId": "c-42", toolctx.LoopIDKey: loopID},
		"beta":  {"tenantId": "override", "Authorization": ctxCanaryBearer, toolctx.LoopIDKey: loopID},
		"gamma": {toolctx.LoopIDKey: loopID},
	}
	got := contextEchoes(t, evs)
	for name, w := range want {
		checkContextWorker(t, name, w, got[name], sniffers[name])
	}
	checkContextWireAndLogs(t, m, sniffers)
}

// startContextSniffedWorkers starts workers alpha, beta and gamma, each behind a sniffer
// that decodes what the orchestrator sends it, and waits for them to register.
func startContextSniffedWorkers(t *testing.T, m *mesh) map[string]*harness.Sniffer {
	t.Helper()
	sniffers := map[string]*harness.Sniffer{}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		listen, err := harness.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		s, err := harness.StartSniffer(listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		sniffers[name] = s
		m.startWorker(name, examplegroups.EchoPrefix+name, "--listen", listen, "--advertise", s.Addr())
	}
	m.waitWorkers("alpha", "beta", "gamma")
	return sniffers
}

// contextEchoes decodes what each worker's tool echoed in the first iteration, by worker
// name, and checks that each tool ran on its own worker.
func contextEchoes(t *testing.T, evs []*toolpb.RunResponse) map[string]examplegroups.Echo {
	t.Helper()
	got := map[string]examplegroups.Echo{}
	for _, f := range finished(evs, 1) {
		name := strings.TrimPrefix(f.GetTool(), "show_context_")
		var e examplegroups.Echo
		if err := json.Unmarshal([]byte(f.GetContent()), &e); err != nil {
			t.Fatalf("%s answered %q: %v", f.GetTool(), f.GetContent(), err)
		}
		got[name] = e
		if f.GetWorkerId() != name {
			t.Errorf("%s ran on %q", f.GetTool(), f.GetWorkerId())
		}
	}
	return got
}

// checkContextWorker checks that one worker received exactly the wanted context and
// that no secret reached it, neither in its metadata nor on the wire.
func checkContextWorker(t *testing.T, name string, w map[string]string, got examplegroups.Echo, s *harness.Sniffer) {
	t.Helper()
	if diff := cmp.Diff(w, got.Context); diff != "" {
		t.Errorf("worker %s received (-want +got):\n%s", name, diff)
	}
	// Worker side: no metadata entry of the request carried the secret.
	for k, vs := range got.Metadata {
		for _, v := range vs {
			if strings.Contains(k, "authtoken") || strings.Contains(v, ctxCanarySecret) {
				t.Errorf("worker %s received the secret in metadata %q", name, k)
			}
		}
	}
	// On the wire: no header and no byte the orchestrator sent this worker holds it.
	if s.Saw(ctxCanarySecret) || s.Saw(ctxCanaryAPIKey) {
		t.Errorf("a secret crossed the wire to worker %s", name)
	}
	if s.Saw(ctxCanaryBearer) != (name == "beta") {
		t.Errorf("the Authorization value on the wire to worker %s: %v; want it on beta's only", name, s.Saw(ctxCanaryBearer))
	}
	if errs := s.Errors(); len(errs) > 0 {
		t.Errorf("sniffer %s: %v", name, errs)
	}
}

// checkContextWireAndLogs checks that the sniffers do see the allowed entries, so that
// the wire checks prove something, and that the orchestrator never logged a secret.
func checkContextWireAndLogs(t *testing.T, m *mesh, sniffers map[string]*harness.Sniffer) {
	t.Helper()
	// The sniffers do see what is allowed: alpha's wire carries the override tenant and
	// the CR/LF value, gamma's carries no context header at all.
	if !sniffers["alpha"].Saw("line1\r\nline2 — ✓") || !sniffers["alpha"].Saw("override") {
		t.Error("the sniffer did not see alpha's allowed entries: the wire check proves nothing")
	}
	for _, h := range sniffers["gamma"].Headers() {
		if strings.HasPrefix(h.Name, ctxcodec.MetadataPrefix) {
			t.Errorf("gamma's wire carried context header %s", h.Name)
		}
	}
	for _, v := range []string{ctxCanarySecret, ctxCanaryBearer, ctxCanaryAPIKey} {
		if n := strings.Count(m.orch.Output(), v); n != 0 {
			t.Errorf("the orchestrator logged a secret %d times", n)
		}
	}
}

// TestOneShotToolAcrossReplicas: a tool configured one-shot runs once per loop, whichever
// replica serves it: the later calls of the loop get the exact ALREADY LOADED text; a new
// loop runs it again.
func TestOneShotToolAcrossReplicas(t *testing.T) {
	const advice = "Use the sum you already have."
	m := startMesh(t, "oneshot.yaml", "tools:\n  add: {one_shot: {advice: \""+advice+"\"}}\n")
	m.startWorker("math-1", "math")
	m.startWorker("math-2", "math")
	m.waitWorkers("math-1", "math-2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	already := "ALREADY LOADED. The body of 'add' was returned earlier in this turn — read it from your conversation history above. Do not call this tool again. " + advice
	for run := 1; run <= 2; run++ {
		before := workerCalls(t, m.c)
		evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "add", Tools: []string{"add"}}, nil)
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		var contents []string
		for _, f := range finished(evs, 0) {
			contents = append(contents, f.GetContent())
		}
		if diff := cmp.Diff([]string{"3", already, already}, contents); diff != "" {
			t.Errorf("run %d: results (-want +got):\n%s", run, diff)
		}
		after := workerCalls(t, m.c)
		if n := after["math-1"] + after["math-2"] - before["math-1"] - before["math-2"]; n != 1 {
			t.Errorf("run %d: the workers ran add %d times, want once", run, n)
		}
	}
}

// TestBadContextRefused: an oversized context or a reserved key fails the run with
// InvalidArgument naming the key.
func TestBadContextRefused(t *testing.T) {
	m := startMesh(t, "")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		name  string
		req   *toolpb.RunRequest
		field string
	}{
		{"oversized", &toolpb.RunRequest{Prompt: "hi", Context: map[string]string{"small": "x", "blob": strings.Repeat("b", 9000)}}, `context["blob"]`},
		{"oversized interaction", &toolpb.RunRequest{Prompt: "hi", InteractionContext: map[string]string{"huge": strings.Repeat("h", 9000)}}, `interaction_context["huge"]`},
		{"reserved key", &toolpb.RunRequest{Prompt: "hi", Context: map[string]string{toolctx.LoopIDKey: "forged"}}, `context["toolmesh.loop_id"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.run(ctx, tc.req, nil)
			var ce *client.Error
			if !errors.As(err, &ce) || !errors.Is(err, client.ErrInvalidRequest) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.field) {
				t.Errorf("err = %v (field %q), want InvalidArgument naming %s", err, fieldOf(ce), tc.field)
			}
		})
	}
}

func fieldOf(e *client.Error) string {
	if e == nil {
		return ""
	}
	return e.Field
}
