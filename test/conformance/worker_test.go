package conformance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestWorkers drives two replicas of each SDK's conformance worker through a real
// orchestrator: registration (the replicas merge into one group whose definitions are
// the Go SDK's), calls with the context, refusals of bad arguments, facades, state that
// crosses replicas, the blackboard, progress, error results and signals, the result
// bound, the idempotency ledger, drain on SIGTERM with a call in flight, and
// registering again after the orchestrator restarts.
func TestWorkers(t *testing.T) {
	want := goDefinitions(t)
	forEach(t, func(t *testing.T, l lang) {
		m := startMesh(t, l)
		addr1 := m.startWorker(l.name + "-1")
		m.startWorker(l.name + "-2")
		t.Run("registration", func(t *testing.T) { checkRegistration(t, m, want) })
		t.Run("calls", func(t *testing.T) { checkCalls(t, m) })
		t.Run("context", func(t *testing.T) { checkContext(t, m) })
		t.Run("bad arguments", func(t *testing.T) { checkBadArguments(t, m, addr1) })
		t.Run("facades and state", func(t *testing.T) { checkFacadesAndState(t, m) })
		t.Run("blackboard and progress", func(t *testing.T) { checkBlackboardAndProgress(t, m) })
		t.Run("signals", func(t *testing.T) { checkSignals(t, m) })
		t.Run("result bound", func(t *testing.T) { checkResultBound(t, m) })
		t.Run("idempotency ledger", func(t *testing.T) { checkLedger(t, m, addr1) })
		t.Run("drain", func(t *testing.T) { checkDrain(t, m) })
		t.Run("reconnect", func(t *testing.T) { checkReconnect(t, m) })
	})
}

// definitions are the conf group's tools as an orchestrator lists them, by name: their
// description and input schema (decoded, so that key order does not matter), and
// metadata.
type definition struct {
	Description string
	Schema      any
	Idempotent  bool
	Progress    bool
	Blackboard  []string
}

// goDefinitions are the definitions the Go SDK's worker registers: the reference.
func goDefinitions(t *testing.T) map[string]definition {
	t.Helper()
	m := startMesh(t, lang{name: "go", worker: []string{goBuilt.worker}})
	m.startWorker("reference-1")
	return listDefinitions(t, m)
}

func listDefinitions(t *testing.T, m *mesh) map[string]definition {
	t.Helper()
	tools, err := m.c.ListTools(testContext(t), "conf")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]definition{}
	for _, ti := range tools {
		d := ti.GetDefinition()
		var schema any
		if err := json.Unmarshal([]byte(d.GetInputSchemaJson()), &schema); err != nil {
			t.Fatalf("%s: schema %q: %v", d.GetName(), d.GetInputSchemaJson(), err)
		}
		out[d.GetName()] = definition{Description: d.GetDescription(), Schema: normalSchema(schema), Idempotent: d.GetIdempotent(),
			Progress: d.GetReportsProgress(), Blackboard: d.GetBlackboardTypes()}
	}
	return out
}

// normalSchema drops what does not change what a schema accepts: an empty required
// list, the order of required names, and additionalProperties that allow anything
// (true, or the empty schema).
func normalSchema(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalSchema(e)
		}
		if ap, ok := x["additionalProperties"]; ok {
			if m, isMap := ap.(map[string]any); ap == true || (isMap && len(m) == 0) {
				delete(x, "additionalProperties")
			}
		}
		if r, ok := x["required"].([]any); ok {
			if len(r) == 0 {
				delete(x, "required")
			} else {
				slices.SortFunc(r, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			}
		}
	case []any:
		for i, e := range x {
			x[i] = normalSchema(e)
		}
	}
	return v
}

// checkRegistration checks that both replicas serve the one group conf, with the Go
// SDK's definitions.
func checkRegistration(t *testing.T, m *mesh, want map[string]definition) {
	groups, err := m.c.ListToolGroups(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	var conf *toolpb.ToolGroupStatus
	for _, g := range groups {
		if g.GetGroup().GetRole() == "conf" {
			conf = g
		}
	}
	if conf == nil || len(conf.GetWorkerIds()) != 2 {
		t.Fatalf("the conf group: %v; want it served by both replicas", conf)
	}
	if g := conf.GetGroup(); g.GetDescription() != "Conformance tools" || g.GetProvider() != "toolmesh-conformance" || g.GetVersion() != "1.0.0" {
		t.Errorf("the group says %q, %q, %q", g.GetDescription(), g.GetProvider(), g.GetVersion())
	}
	if diff := cmp.Diff(want, listDefinitions(t, m)); diff != "" {
		t.Errorf("definitions (-go +%s):\n%s", m.l.name, diff)
	}
}

// runCalls runs a plan and returns its finished calls (tool, outcome, content, worker).
func runCalls(t *testing.T, m *mesh, turns ...[]call) ([]*toolpb.RunResponse, [][4]string) {
	t.Helper()
	evs, err := m.run(testContext(t), prompt(turns...))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return evs, finished(evs)
}

// contents are the tool and content of each finished call.
func contents(f [][4]string) [][2]string {
	out := make([][2]string, len(f))
	for i, c := range f {
		out[i] = [2]string{c[0], c[2]}
	}
	return out
}

func checkCalls(t *testing.T, m *mesh) {
	_, f := runCalls(t, m,
		[]call{{"echo", `{"text":"héllo <&>"}`}, {"add", `{"a":2,"b":3}`}},
		[]call{{"add", `{"a":0.25,"b":-3.5}`}},
		[]call{{"mul", `{"a":1234567,"b":1}`}, {"mul", `{"a":0.00001,"b":1}`}},
		[]call{{"fail", `{"message":"it broke"}`}})
	want := [][2]string{{"add", "5"}, {"echo", "echo: héllo <&>"}, {"add", "-3.25"}, {"mul", "1.234567e+06"}, {"mul", "1e-05"}, {"fail", "Error: it broke"}}
	got := contents(f)
	// The calls of one turn run side by side and may finish in either order.
	if len(got) >= 2 && got[0][0] == "echo" {
		got[0], got[1] = got[1], got[0]
	}
	if len(got) >= 5 && got[3][1] == "1e-05" {
		got[3], got[4] = got[4], got[3]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if len(f) == 6 && f[5][1] != "ERROR" {
		t.Errorf("fail's outcome %s, want ERROR", f[5][1])
	}
}

func checkContext(t *testing.T, m *mesh) {
	evs, f := runCalls(t, m, []call{{"whoami", `{}`}})
	if len(f) != 1 {
		t.Fatalf("calls %v", f)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(f[0][2]), &got); err != nil {
		t.Fatalf("whoami answered %q: %v", f[0][2], err)
	}
	runID, loopID := evs[0].GetRunId(), evs[0].GetStarted().GetLoopId()
	want := map[string]string{"user_id": "u-7", "x-request": "r 1", "tenant": "", "idempotency_key": runID + "/" + loopID + "/call_1_0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the context the worker saw (-want +got):\n%s", diff)
	}
}

// checkBadArguments calls the worker directly, as an orchestrator that did not validate
// the arguments would: the worker refuses them itself, naming the property.
func checkBadArguments(t *testing.T, m *mesh, addr string) {
	resp, err := dialWorker(t, addr).Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "add", ArgumentsJson: `{"a":"two","b":3}`})
	if err != nil {
		t.Fatal(err)
	}
	e := resp.GetError()
	if e.GetCode() != toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS || !strings.Contains(e.GetMessage(), "a") {
		t.Errorf("add with a string: %v; want INVALID_ARGUMENTS naming a", resp)
	}
	// Through the orchestrator the model reads the orchestrator's own refusal.
	_, f := runCalls(t, m, []call{{"add", `{"a":"two","b":3}`}})
	if len(f) != 1 || f[0][1] != "INVALID_ARGUMENTS" || f[0][3] != "" {
		t.Errorf("calls %v; want the orchestrator's refusal, no worker", f)
	}
}

func checkFacadesAndState(t *testing.T, m *mesh) {
	_, f := runCalls(t, m,
		[]call{{"calc", `{}`}},
		[]call{{"mul", `{"a":6,"b":7}`}},
		[]call{{"open", `{"name":"c"}`}},
		[]call{{"count", `{}`}}, []call{{"count", `{}`}}, []call{{"count", `{}`}})
	got := contents(f)
	if len(got) != 6 || !strings.HasPrefix(got[0][1], "Tools now available: add, mul") || got[1][1] != "42" ||
		!strings.HasPrefix(got[2][1], "Tools now available: count") {
		t.Fatalf("calls %v", got)
	}
	if diff := cmp.Diff([][2]string{{"count", "count 1"}, {"count", "count 2"}, {"count", "count 3"}}, got[3:]); diff != "" {
		t.Errorf("the state-bound counter (-want +got):\n%s", diff)
	}
	replicas := map[string]bool{}
	for _, c := range f[3:] {
		replicas[c[3]] = true
	}
	t.Logf("the counter's calls were served by %v", replicas)
}

func checkBlackboardAndProgress(t *testing.T, m *mesh) {
	evs, f := runCalls(t, m, []call{{"note", `{"text":"buy milk"}`}}, []call{{"read_note", `{}`}}, []call{{"steps", `{"n":3}`}})
	want := [][2]string{{"note", "noted"}, {"read_note", "buy milk"}, {"steps", "did 3 steps"}}
	if diff := cmp.Diff(want, contents(f)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	var progress []string
	var board []string
	for _, ev := range evs {
		if p := ev.GetProgress(); p != nil {
			progress = append(progress, p.GetStatus())
		}
		if b := ev.GetBlackboardChanged(); b != nil {
			board = append(board, b.GetObject().GetTypeName()+" "+b.GetObject().GetName()+" "+b.GetObject().GetJson())
		}
	}
	if diff := cmp.Diff([]string{"step 1 of 3", "step 2 of 3", "step 3 of 3"}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{`Note last {"text":"buy milk"}`}, board); diff != "" {
		t.Errorf("blackboard (-want +got):\n%s", diff)
	}
}

func checkSignals(t *testing.T, m *mesh) {
	for _, tc := range []struct{ tool, want string }{{"stop", "terminated"}, {"replan", "replan"}} {
		evs, err := m.run(testContext(t), prompt([]call{{tc.tool, `{"reason":"enough"}`}}))
		last := evs[len(evs)-1]
		var reason string
		switch {
		case last.GetTerminated() != nil:
			reason = "terminated " + last.GetTerminated().GetReason()
		case last.GetReplanRequested() != nil:
			reason = "replan " + last.GetReplanRequested().GetReason()
		}
		if reason != tc.want+" enough" {
			t.Errorf("%s: the run ended with %v (%v), want %s", tc.tool, protojson.Format(last), err, tc.want)
		}
	}
}

func checkResultBound(t *testing.T, m *mesh) {
	_, f := runCalls(t, m, []call{{"big", `{"bytes":100}`}}, []call{{"big", `{"bytes":5000000}`}})
	if len(f) != 2 || f[0][2] != strings.Repeat("x", 100) {
		t.Fatalf("calls %v", f)
	}
	if f[1][1] != "ERROR" || len(f[1][2]) > 4096 {
		t.Errorf("a 5 MB answer: %s, %.200q; want an error result", f[1][1], f[1][2])
	}
}

// checkLedger sends charge twice with one idempotency key, as the orchestrator re-sends a
// call after a crash: the effect happens once and both answers are the first.
func checkLedger(t *testing.T, m *mesh, addr string) {
	w := dialWorker(t, addr)
	key := fmt.Sprintf("ledger-%d/loop/call", time.Now().UnixNano())
	var answers []string
	for range 2 {
		resp, err := w.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{"account":"acct","cents":5}`,
			IdempotencyKey: key, RunId: strings.Split(key, "/")[0], LoopId: "loop", CallId: "call"})
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, resp.GetText())
	}
	resp, err := w.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "charges", ArgumentsJson: `{"account":"acct"}`})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"charged 5 to acct (1 charges)", "charged 5 to acct (1 charges)", "1"}, append(answers, resp.GetText())); diff != "" {
		t.Errorf("the ledger (-want +got):\n%s", diff)
	}
}

// checkDrain sends SIGTERM to the replica serving a slow call: the call finishes, the
// worker exits 0, and the next calls go to the other replica. The call outlasts the
// registry's lease (2s): a worker that stopped its heartbeats once it drained lost its
// lease, and the orchestrator, finding it NOT_SERVING, failed the call.
func checkDrain(t *testing.T, m *mesh) {
	id := m.l.name + "-3"
	m.startWorker(id)
	// Only the new replica and one other serve: stop the first so that the slow call may
	// land on either of the two left, then drain whichever it is.
	done := make(chan [][4]string, 1)
	go func() {
		evs, _ := m.run(testContext(t), prompt([]call{{"slow", `{"ms":3000}`}}, []call{{"echo", `{"text":"after"}`}}))
		done <- finished(evs)
	}()
	var serving string
	deadline := time.Now().Add(10 * time.Second)
	for serving == "" && time.Now().Before(deadline) {
		ws, _ := m.c.ListWorkers(testContext(t))
		for _, w := range ws {
			if w.GetInFlight() > 0 {
				serving = w.GetWorkerId()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if serving == "" {
		t.Fatal("the slow call reached no worker")
	}
	p := m.workers[serving]
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	f := <-done
	if diff := cmp.Diff([][2]string{{"slow", "waited 3000"}, {"echo", "echo: after"}}, contents(f)); diff != "" {
		t.Errorf("calls across the drain (-want +got):\n%s", diff)
	}
	if len(f) == 2 && (f[0][3] != serving || f[1][3] == serving) {
		t.Errorf("slow ran on %s, echo on %s; want slow on the draining %s and echo elsewhere", f[0][3], f[1][3], serving)
	}
	if err := p.Wait(15 * time.Second); err != nil {
		t.Errorf("the drained worker: %v, want exit 0", err)
	}
	// The orchestrator would keep the call of a draining worker whose lease expired all
	// the same (it answers NOT_SERVING): the lease itself must not expire.
	if n := m.orch.CountLogs("worker lease expired: no heartbeat", map[string]string{"worker_id": serving}); n != 0 {
		t.Errorf("the draining worker's lease expired (%d times) while it finished its call: it stopped its heartbeats", n)
	}
	delete(m.workers, serving)
}

// checkReconnect restarts the orchestrator on the same port: the workers register
// again by themselves and serve calls. A worker draining meanwhile (a call in flight)
// finishes its call and leaves without registering again (the orchestrator refuses a
// worker that answers NOT_SERVING, as a draining one does).
func checkReconnect(t *testing.T, m *mesh) {
	id := m.l.name + "-4"
	addr := m.startWorker(id)
	p := m.workers[id]
	delete(m.workers, id) // it leaves during the check
	slow := make(chan string, 1)
	go func() {
		resp, err := dialWorker(t, addr).Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{"ms":3000}`})
		slow <- fmt.Sprint(resp.GetText(), err)
	}()
	time.Sleep(200 * time.Millisecond) // the call reached the tool
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitWorker(t, m, id, func(w *toolpb.WorkerStatus) bool { return w.GetState() == toolpb.WorkerState_WORKER_STATE_DRAINING })
	if err := m.orch.Stop(10 * time.Second); err != nil {
		t.Logf("stopping the orchestrator: %v", err)
	}
	m.startOrchestrator()
	if err := harness.WaitWorkers(testContext(t), m.c, m.ids()...); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if got := <-slow; got != "waited 3000<nil>" {
		t.Errorf("the draining worker's call: %s, want waited 3000", got)
	}
	if err := p.Wait(15 * time.Second); err != nil {
		t.Errorf("the drained worker: %v, want exit 0", err)
	}
	if n := m.orch.CountLogs("registration refused", map[string]string{"worker_id": id}); n != 0 {
		t.Errorf("the draining worker tried to register again (refused %d times): it answers NOT_SERVING", n)
	}
	_, f := runCalls(t, m, []call{{"echo", `{"text":"again"}`}})
	if diff := cmp.Diff([][2]string{{"echo", "echo: again"}}, contents(f)); diff != "" {
		t.Errorf("after the restart (-want +got):\n%s", diff)
	}
}

// waitWorker waits until the orchestrator lists worker id in a state ok accepts.
func waitWorker(t *testing.T, m *mesh, id string, ok func(*toolpb.WorkerStatus) bool) {
	t.Helper()
	var last *toolpb.WorkerStatus
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ws, _ := m.c.ListWorkers(testContext(t))
		for _, w := range ws {
			if w.GetWorkerId() == id {
				if last = w; ok(w) {
					return
				}
			}
		}
	}
	t.Fatalf("worker %s never reached the state the check waits for; last listed as %v", id, last)
}
