package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/jsontree"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// durationKeys are the keys under which toolmesh logs durations; they must be strings
// such as "1.5s", never raw nanoseconds.
var durationKeys = []string{"ttl", "grace", "timeout", "retry_in", "heartbeat", "for", "delay", "interval", "duration", "elapsed"}

// checkLogs decodes every line of a process's output as one JSON log record, refusing
// duplicate keys, and checks the durations. It returns the records.
func checkLogs(t *testing.T, name string, p *harness.Proc) []*jsontree.Object {
	t.Helper()
	var recs []*jsontree.Object
	for _, line := range p.Lines() {
		v, err := jsontree.Decode([]byte(line), jsontree.NoDepthLimit)
		if err != nil {
			t.Errorf("%s: not one JSON record without duplicate keys (%v): %s", name, err, line)
			continue
		}
		rec, ok := v.(*jsontree.Object)
		if !ok {
			t.Errorf("%s: not a JSON object: %s", name, line)
			continue
		}
		for _, k := range durationKeys {
			if v, ok := rec.Get(k); ok {
				if _, isString := v.(string); !isString {
					t.Errorf("%s: %q is logged as %v, not as a duration string: %s", name, k, v, line)
				}
			}
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestLogsAreWellFormed: over a run in which a tool panics on its worker, with tracing on,
// every line every process writes is one JSON record with each key once and durations as
// strings; the panic is logged once, by the worker, with its stack and the run, loop,
// call and trace ids.
func TestLogsAreWellFormed(t *testing.T) {
	startTraceCollector(t)
	m := startMesh(t, "panics.yaml")
	m.startWorker("math-1", "math")
	m.startWorker("faults-1", "faults")
	m.waitWorkers("math-1", "faults-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"math", "faults"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if text := finalText(t, evs); text != "done" {
		t.Errorf("final text %q", text)
	}
	runID := evs[0].GetRunId()
	var panicCall *toolpb.ToolCallFinished
	for _, f := range finished(evs, 1) {
		if f.GetTool() == "panic_now" {
			panicCall = f
		}
	}
	if panicCall == nil || !strings.Contains(panicCall.GetContent(), "tool 'panic_now' panicked: on purpose") {
		t.Fatalf("the model did not read the panic as an error: %v", panicCall)
	}
	m.stop() // shutdown logs too

	procs := map[string]*harness.Proc{"orchestrator": m.orch.Proc}
	for id, p := range m.workers {
		procs[id] = p
	}
	panics := map[string]int{}
	for name, p := range procs {
		recs := checkLogs(t, name, p)
		if len(recs) < 3 {
			t.Errorf("%s logged only %d records", name, len(recs))
		}
		for _, rec := range recs {
			if msg, _ := rec.Get("msg"); msg != "tool panicked" {
				continue
			}
			panics[name]++
			get := func(k string) string { v, _ := rec.Get(k); s, _ := v.(string); return s }
			if get("tool") != "panic_now" || get("panic") != "on purpose" || get("run_id") != runID ||
				get("loop_id") == "" || get("call_id") != panicCall.GetCallId() || len(get("trace_id")) != 32 ||
				!strings.Contains(get("stack"), "examplegroups.faultsGroup") {
				t.Errorf("%s: panic record lacks a field: tool %q panic %q run %q loop %q call %q trace %q stack %.80q",
					name, get("tool"), get("panic"), get("run_id"), get("loop_id"), get("call_id"), get("trace_id"), get("stack"))
			}
		}
	}
	if panics["faults-1"] != 1 || len(panics) != 1 {
		t.Errorf("panic records per process = %v, want one, from faults-1", panics)
	}
}
