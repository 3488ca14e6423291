// Package e2e runs toolmesh's binaries as real processes on loopback and checks the
// behaviours that only show across process boundaries: spreading calls over replicas,
// surviving a SIGKILLed replica, refusing conflicting registrations, re-registering after
// an orchestrator restart, refusing bad tool calls before any worker is contacted,
// draining on SIGTERM, precise errors for bad requests, one trace per run, and the
// command lines: help, and telemetry that never mixes with the CLI's output or holds it
// up.
//
// The binaries come from $TOOLMESH_BIN or bin/ (make build).
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"go.yaml.in/yaml/v3"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// testConfig keeps leases short so that tests see workers come and go quickly.
const testConfig = `
registry:
  heartbeat_interval: 500ms
  lease_ttl: 3s
  grace_period: 1s
  readiness_grace: 6s
router:
  eject_after_failures: 3
  eject_duration: 5s
`

// gracePeriod is registry.grace_period of testConfig.
const gracePeriod = time.Second

// mesh is an orchestrator and its workers, stopped when the test ends.
type mesh struct {
	t       *testing.T
	orch    *harness.Orchestrator
	c       *client.Client
	workers map[string]*harness.Proc
	cfgPath string
	script  string
}

// startMesh starts an orchestrator driven by the given script (a file in testdata, or
// "" for the built-in demo script) and no workers. extraConfig is YAML appended to
// testConfig.
func startMesh(t *testing.T, script string, extraConfig ...string) *mesh {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "orchestrator.yaml")
	extra := strings.Join(extraConfig, "\n")
	if !strings.Contains(extra, "provider:") {
		// Model credentials in the developer's environment must not change the tests.
		extra += "\nprovider: {name: scripted}\n"
	}
	if err := os.WriteFile(cfgPath, mergeYAML(t, testConfig, extra), 0o600); err != nil {
		t.Fatal(err)
	}
	if script != "" {
		abs, err := filepath.Abs(filepath.Join("testdata", script))
		if err != nil {
			t.Fatal(err)
		}
		script = abs
	}
	m := &mesh{t: t, workers: map[string]*harness.Proc{}, cfgPath: cfgPath, script: script}
	m.startOrchestrator("127.0.0.1:0")
	t.Cleanup(m.stop)
	return m
}

// mergeYAML merges YAML documents, the later's keys winning, maps merged key by key: a
// test's registry: section joins testConfig's instead of repeating the key.
func mergeYAML(t *testing.T, docs ...string) []byte {
	t.Helper()
	var merge func(dst, src map[string]any)
	merge = func(dst, src map[string]any) {
		for k, v := range src {
			if sm, ok := v.(map[string]any); ok {
				if dm, ok := dst[k].(map[string]any); ok {
					merge(dm, sm)
					continue
				}
			}
			dst[k] = v
		}
	}
	out := map[string]any{}
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("test config: %v\n%s", err, d)
		}
		merge(out, m)
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (m *mesh) startOrchestrator(listen string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := []string{"--config", m.cfgPath, "--metrics-listen", "127.0.0.1:0"}
	if m.script != "" {
		args = append(args, "--script", m.script)
	}
	orch, err := harness.StartOrchestrator(ctx, "orchestrator", listen, nil, args...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.orch = orch
	if m.c != nil {
		_ = m.c.Close()
	}
	m.c, err = client.Dial(orch.Addr, insecure.NewCredentials())
	if err != nil {
		m.t.Fatal(err)
	}
}

// startWorker starts a toolworker process serving groups and registering as id.
func (m *mesh) startWorker(id, groups string, extra ...string) *harness.Proc {
	m.t.Helper()
	p, err := harness.StartWorker(id, id, groups, m.orch.Addr, nil, extra...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.workers[id] = p
	return p
}

// waitWorkers waits until exactly ids are registered and ready.
func (m *mesh) waitWorkers(ids ...string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := harness.WaitWorkers(ctx, m.c, ids...); err != nil {
		m.dump()
		m.t.Fatal(err)
	}
}

// stop stops every process with SIGTERM and reports any that did not exit cleanly.
func (m *mesh) stop() {
	for id, p := range m.workers {
		if err := p.Stop(30 * time.Second); err != nil && !p.Exited() {
			m.t.Errorf("worker %s: %v", id, err)
		}
	}
	if m.c != nil {
		_ = m.c.Close()
	}
	if err := m.orch.Stop(30 * time.Second); err != nil {
		m.t.Errorf("orchestrator: %v\n%s", err, m.orch.Output())
	}
}

func (m *mesh) dump() {
	m.t.Logf("---- orchestrator ----\n%s", m.orch.Output())
	for id, p := range m.workers {
		m.t.Logf("---- %s ----\n%s", id, p.Output())
	}
}

// run runs req to its end and returns every event and the stream's error.
func (m *mesh) run(ctx context.Context, req *toolpb.RunRequest, onEvent func(*toolpb.RunResponse)) ([]*toolpb.RunResponse, error) {
	var evs []*toolpb.RunResponse
	for ev, err := range m.c.Run(ctx, req) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	return evs, nil
}

// finished returns the tool_call_finished events of one iteration (0: all), using the
// started events to learn each call's iteration.
func finished(evs []*toolpb.RunResponse, iteration int32) []*toolpb.ToolCallFinished {
	iter := map[string]int32{}
	var out []*toolpb.ToolCallFinished
	for _, ev := range evs {
		if s := ev.GetToolCallStarted(); s != nil {
			iter[s.GetCallId()] = s.GetIteration()
		}
		if f := ev.GetToolCallFinished(); f != nil && (iteration == 0 || iter[f.GetCallId()] == iteration) {
			out = append(out, f)
		}
	}
	return out
}

func finalText(t *testing.T, evs []*toolpb.RunResponse) string {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].GetFinalResult() == nil {
		t.Fatalf("the run did not end with a final result: %v", evs)
	}
	return evs[len(evs)-1].GetFinalResult().GetText()
}

func workerCalls(t *testing.T, c *client.Client) map[string]int64 {
	t.Helper()
	ws, err := c.ListWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, w := range ws {
		out[w.GetWorkerId()] = w.GetCalls()
	}
	return out
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// mathOperations are the ten tools behind the math facade; runs that call them directly
// ask for them by name.
var mathOperations = []string{"add", "ceiling", "divide", "floor", "max", "mean", "min", "multiply", "round", "subtract"}
