// Package conformance drives the conformance worker and client of each SDK (README.md)
// through a real orchestrator and checks that they behave as the Go SDK does.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// lang is one SDK's conformance programs: the command lines that start its worker and
// its client (the program's own flags follow).
type lang struct {
	name           string
	worker, client []string
	env            []string
}

// root is the repository's root directory.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// goBuilt are the Go conformance programs, built once by TestMain.
var goBuilt struct{ worker, client string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolmesh-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goBuilt.worker, goBuilt.client = filepath.Join(dir, "goworker"), filepath.Join(dir, "goclient")
	for out, pkg := range map[string]string{goBuilt.worker: "./test/conformance/goworker", goBuilt.client: "./test/conformance/goclient"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, b)
			os.Exit(2)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// langs are the SDKs under test: Go always; TypeScript and Python when
// TOOLMESH_CONFORMANCE names them (make test does: it builds them first), else they are
// skipped, saying so.
func langs(t *testing.T) []lang {
	t.Helper()
	all := []lang{
		{name: "go", worker: []string{goBuilt.worker}, client: []string{goBuilt.client}},
		{name: "typescript",
			worker: []string{"node", filepath.Join(root, "sdk/typescript/dist/conformance/worker.js")},
			client: []string{"node", filepath.Join(root, "sdk/typescript/dist/conformance/client.js")}},
		{name: "python",
			worker: []string{"python3", filepath.Join(root, "sdk/python/conformance/worker.py")},
			client: []string{"python3", filepath.Join(root, "sdk/python/conformance/client.py")},
			env:    []string{"PYTHONPATH=" + filepath.Join(root, "sdk/python/src")}},
	}
	want := strings.Split(os.Getenv("TOOLMESH_CONFORMANCE"), ",")
	var out []lang
	for _, l := range all {
		if l.name == "go" || slices.Contains(want, l.name) {
			out = append(out, l)
			continue
		}
		t.Logf("%s: not under test (TOOLMESH_CONFORMANCE=%q; make test sets it)", l.name, os.Getenv("TOOLMESH_CONFORMANCE"))
	}
	return out
}

// forEach runs f as a subtest for each SDK, in parallel with the other SDKs.
func forEach(t *testing.T, f func(t *testing.T, l lang)) {
	for _, l := range langs(t) {
		t.Run(l.name, func(t *testing.T) { f(t, l) })
	}
}

// testContext is a context that ends with the test, or after two minutes.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mesh is an orchestrator (its scripted model plays the scenarios' prompts) with the
// workers of one SDK.
type mesh struct {
	t       *testing.T
	l       lang
	addr    string
	dataDir string
	config  string
	orch    *harness.Orchestrator
	c       *client.Client
	workers map[string]*harness.Proc
}

// startMesh starts an orchestrator on a free port, journaling in SQLite so that it can
// be restarted on the same port and data.
func startMesh(t *testing.T, l lang) *mesh {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := &mesh{t: t, l: l, addr: addr, dataDir: t.TempDir(), workers: map[string]*harness.Proc{}}
	model := httptest.NewServer(planModel{})
	t.Cleanup(model.Close)
	m.config = filepath.Join(m.dataDir, "orchestrator.yaml")
	conf := fmt.Sprintf("provider:\n  name: openai\n  openai: {base_url: %q, api_key: test-key, default_model: plan}\nregistry: {grace_period: 10s, heartbeat_interval: 500ms, lease_ttl: 2s}\n", model.URL+"/v1")
	if err := os.WriteFile(m.config, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.startOrchestrator()
	t.Cleanup(func() {
		for _, w := range m.workers {
			_ = w.Kill()
		}
		if m.orch != nil {
			_ = m.orch.Kill()
		}
		if t.Failed() {
			m.dump()
		}
	})
	return m
}

func (m *mesh) startOrchestrator() {
	m.t.Helper()
	orch, err := harness.StartOrchestrator(testContext(m.t), "orchestrator", m.addr, nil,
		"--data-dir", m.dataDir, "--config", m.config)
	if err != nil {
		m.t.Fatal(err)
	}
	m.orch = orch
	if m.c == nil {
		if m.c, err = client.Dial(m.addr, insecure.NewCredentials()); err != nil {
			m.t.Fatal(err)
		}
		m.t.Cleanup(func() { _ = m.c.Close() })
	}
}

// dump logs the processes' output.
func (m *mesh) dump() {
	if m.orch != nil {
		m.t.Logf("orchestrator:\n%s", tail(m.orch.Output()))
	}
	for id, w := range m.workers {
		m.t.Logf("worker %s:\n%s", id, tail(w.Output()))
	}
}

// tail is the last 60 lines of out.
func tail(out string) string {
	lines := strings.Split(out, "\n")
	return strings.Join(lines[max(0, len(lines)-60):], "\n")
}

// startWorker starts a worker of the mesh's SDK and waits until it says it is ready,
// returning the address it serves on.
func (m *mesh) startWorker(id string) string {
	m.t.Helper()
	args := append(slices.Clone(m.l.worker[1:]), "--orchestrator", m.addr, "--id", id)
	env := append(os.Environ(), m.l.env...)
	p, err := harness.StartWith(id, m.l.worker[0], harness.Options{Env: env}, args...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.workers[id] = p
	line, err := p.WaitLine(testContext(m.t), func(s string) bool { return strings.HasPrefix(s, "ready ") })
	if err != nil {
		m.t.Fatalf("worker %s never said it was ready: %v", id, err)
	}
	if err := harness.WaitWorkers(testContext(m.t), m.c, m.ids()...); err != nil {
		m.t.Fatal(err)
	}
	return strings.TrimPrefix(line, "ready ")
}

// planModel is an OpenAI-compatible chat model that follows the plan in its prompt
// ("calls <JSON>", see prompt): at turn n it calls the tools of the plan's n-th turn,
// after the last it answers "done". It streams its answers as the API does.
type planModel struct{}

func (planModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	var plan [][][2]string
	turn := 1
	for _, msg := range body.Messages {
		switch msg.Role {
		case "assistant":
			turn++
		case "user":
			if s, ok := msg.Content.(string); ok && strings.HasPrefix(s, "calls ") {
				_ = json.Unmarshal([]byte(strings.TrimPrefix(s, "calls ")), &plan)
			}
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-plan", "object": "chat.completion.chunk", "created": 1700000000, "model": "plan",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if turn > len(plan) {
		send(map[string]any{"role": "assistant", "content": "done"}, nil)
		send(map[string]any{}, "stop")
	} else {
		for i, c := range plan[turn-1] {
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": c[0], "arguments": c[1]}}}}, nil)
		}
		send(map[string]any{}, "tool_calls")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// ids are the ids of the mesh's workers.
func (m *mesh) ids() []string {
	ids := make([]string, 0, len(m.workers))
	for id := range m.workers {
		ids = append(ids, id)
	}
	return ids
}

// call is a tool call a scenario's model makes: a tool and its arguments.
type call struct{ tool, args string }

// prompt is the prompt whose model makes the calls, a turn each, then answers "done".
func prompt(turns ...[]call) string {
	b, _ := json.Marshal(turnsJSON(turns))
	return "calls " + string(b)
}

func turnsJSON(turns [][]call) [][][2]string {
	out := make([][][2]string, len(turns))
	for i, t := range turns {
		for _, c := range t {
			out[i] = append(out[i], [2]string{c.tool, c.args})
		}
	}
	return out
}

// run runs a prompt offering the conf group and returns its events.
func (m *mesh) run(ctx context.Context, p string) ([]*toolpb.RunResponse, error) {
	var evs []*toolpb.RunResponse
	for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{Prompt: p, ToolGroups: []string{"conf"}, Context: map[string]string{"user_id": "u-7", "x-request": "r 1"}}) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// finished are the tool calls a run's events report, in order: tool, outcome, content,
// worker.
func finished(evs []*toolpb.RunResponse) [][4]string {
	var out [][4]string
	for _, ev := range evs {
		if f := ev.GetToolCallFinished(); f != nil {
			out = append(out, [4]string{f.GetTool(), strings.TrimPrefix(f.GetOutcome().String(), "TOOL_CALL_OUTCOME_"), f.GetContent(), f.GetWorkerId()})
		}
	}
	return out
}

// dialWorker is a ToolWorkerService client of the worker at addr, as the orchestrator
// is one.
func dialWorker(t *testing.T, addr string) toolpb.ToolWorkerServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return toolpb.NewToolWorkerServiceClient(conn)
}
