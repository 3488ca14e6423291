package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestRunSurvivesOrchestratorKills: a detached run on the SQLite journal is SIGKILLed
// with its orchestrator twice, each time while a tool call is in flight, and continues
// on the restarted orchestrator. The idempotent credit is sent again with the same
// idempotency key and the worker's ledger answers it (one effect); the charge, not
// idempotent, is not sent again: the model is told its outcome is unknown (one effect).
// A client that watches the run from the start sees every event once, in order.
func TestRunSurvivesOrchestratorKills(t *testing.T) {
	m, w := journaledMesh(t, "payments.yaml", "")
	addr := m.orch.Addr

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var seen []*toolpb.RunResponse
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		for ev, err := range m.c.Run(runCtx, &toolpb.RunRequest{RunId: "pay-run", Prompt: "pay", ToolGroups: []string{"payments"}, Detached: true}) {
			if err != nil {
				return
			}
			seen = append(seen, ev)
		}
	}()
	killDuringDurableCalls(ctx, t, m, w, addr, stopRun)

	<-firstDone
	evs := m.watch(ctx, "pay-run")
	text := finalText(t, evs)
	if !strings.Contains(text, "charge: Error: the outcome of tool 'charge' is unknown") {
		t.Errorf("final text %q: the charge's outcome should be unknown", text)
	}
	for _, tool := range []string{"credit", "charge"} {
		if n := countLines(w.Lines(), examplegroups.EffectLog, tool); n != 1 {
			t.Errorf("%s took effect %d times, want once", tool, n)
		}
	}
	if n := countLines(w.Lines(), "call answered from the idempotency ledger", "credit"); n != 1 {
		t.Errorf("the credit was answered from the ledger %d times, want once (it was sent again after the first kill)", n)
	}

	checkDurableEventsOnce(t, evs, seen)
	checkDurableWatchAfter(ctx, t, m, evs)
	runs, _, err := m.c.ListRuns(ctx, toolpb.RunState_RUN_STATE_SUCCEEDED, 10, "")
	if err != nil || len(runs) != 1 || runs[0].GetRunId() != "pay-run" {
		t.Errorf("ListRuns(succeeded) = %v, %v", runs, err)
	}
	snap, err := m.c.GetRun(ctx, "pay-run")
	if err != nil || snap.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || snap.GetFinalText() != text {
		t.Errorf("GetRun = %v, %v", snap, err)
	}
}

// killDuringDurableCalls SIGKILLs the orchestrator once the credit, then the charge, has
// taken effect, restarts it on addr each time and waits until it resumes the run; the
// first stream's client goes away after the first kill.
func killDuringDurableCalls(ctx context.Context, t *testing.T, m *mesh, w *harness.Proc, addr string, stopRun context.CancelFunc) {
	t.Helper()
	for i, tool := range []string{"credit", "charge"} {
		effect := func(l string) bool { return strings.Contains(l, examplegroups.EffectLog) && hasTool(l, tool) }
		if _, err := w.WaitLine(ctx, effect); err != nil {
			m.dump()
			t.Fatalf("no %s effect: %v", tool, err)
		}
		if i == 0 {
			stopRun() // the client goes away too: the run is detached
		}
		_ = m.orch.Kill()
		m.startOrchestrator(addr)
		if _, err := m.orch.WaitLog(ctx, "resuming a run"); err != nil {
			m.dump()
			t.Fatalf("the run was not resumed after killing the orchestrator during %s: %v", tool, err)
		}
	}
}

// checkDurableEventsOnce checks that the watch saw every event once, in order, and that
// the first stream's events are the journal's first ones.
func checkDurableEventsOnce(t *testing.T, evs, seen []*toolpb.RunResponse) {
	t.Helper()
	// Every event once, in order: increasing sequence numbers, one start, one end, and
	// one finished event per call.
	var last int64
	finishedCalls := map[string]int{}
	starts, ends := 0, 0
	for _, ev := range evs {
		if ev.GetSequence() <= last {
			t.Errorf("sequence %d after %d", ev.GetSequence(), last)
		}
		last = ev.GetSequence()
		switch {
		case ev.GetStarted() != nil:
			starts++
		case ev.GetFinalResult() != nil, ev.GetError() != nil:
			ends++
		case ev.GetToolCallFinished() != nil:
			f := ev.GetToolCallFinished()
			finishedCalls[f.GetTool()]++
			if f.GetTool() == "credit" && f.GetContent() != "credited 100 cents to alice" {
				t.Errorf("the credit answered %q", f.GetContent())
			}
		}
	}
	if starts != 1 || ends != 1 || finishedCalls["credit"] != 1 || finishedCalls["charge"] != 1 {
		t.Errorf("events: %d starts, %d ends, finished calls %v; want one of each", starts, ends, finishedCalls)
	}
	// The events the first stream got before the kill are the journal's first ones.
	for i, ev := range seen {
		if i >= len(evs) || ev.GetSequence() != evs[i].GetSequence() {
			t.Errorf("event %d of the first stream (sequence %d) is not the watch's", i, ev.GetSequence())
			break
		}
	}
}

// checkDurableWatchAfter checks that a watch resumed after a sequence number in the
// middle of evs sees exactly the rest.
func checkDurableWatchAfter(ctx context.Context, t *testing.T, m *mesh, evs []*toolpb.RunResponse) {
	t.Helper()
	// A watch resumed after any sequence number sees exactly the rest.
	if len(evs) > 2 {
		mid := evs[len(evs)/2].GetSequence()
		n := 0
		for ev, err := range m.c.Watch(ctx, "pay-run", mid) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetSequence() <= mid {
				t.Errorf("watch after %d sent %d", mid, ev.GetSequence())
			}
			n++
		}
		if want := len(evs) - len(evs)/2 - 1; n != want {
			t.Errorf("watch after %d sent %d events, want %d", mid, n, want)
		}
	}
}

// journaledMesh starts an orchestrator journaling in SQLite (a 2 s lease, then
// extraConfig) driven by script, and one payments worker.
func journaledMesh(t *testing.T, script, extraConfig string) (*mesh, *harness.Proc) {
	t.Helper()
	m := startMesh(t, script, fmt.Sprintf("journal: {data_dir: %q, lease_ttl: 2s}\n", filepath.Join(t.TempDir(), "data"))+extraConfig)
	w := m.startWorker("pay-1", "payments", "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	m.waitWorkers("pay-1")
	return m, w
}

// runDetached starts a detached payments run in the background; its events are dropped.
func (m *mesh) runDetached(ctx context.Context, id string) {
	go func() {
		for _, err := range m.c.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: "pay", ToolGroups: []string{"payments"}, Detached: true}) {
			if err != nil {
				return
			}
		}
	}()
}

// watch returns the events of run id, from the journal's first to the run's end.
func (m *mesh) watch(ctx context.Context, id string) []*toolpb.RunResponse {
	m.t.Helper()
	var evs []*toolpb.RunResponse
	for ev, err := range m.c.Watch(ctx, id, 0) {
		if err != nil {
			m.dump()
			m.t.Fatalf("WatchRun(%s): %v", id, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// hasTool reports whether a log line (JSON or text) names tool.
func hasTool(line, tool string) bool {
	return strings.Contains(line, `"tool":"`+tool+`"`) || strings.Contains(line, "tool="+tool+" ")
}

// countLines counts the log lines with msg that name tool.
func countLines(lines []string, msg, tool string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, msg) && hasTool(l, tool) {
			n++
		}
	}
	return n
}

// TestOutcomeReceivedNotRecorded (catalogue D01): the orchestrator dies, by a failpoint,
// between receiving a call's outcome and recording it, twice. After each restart the
// call is handled as dispatched without an outcome: the idempotent credit is sent again
// with the same key (the worker answers it from its ledger: one effect), the charge is
// marked outcome_unknown and not sent again (one effect). Nothing is silently lost.
func TestOutcomeReceivedNotRecorded(t *testing.T) {
	t.Setenv("TOOLMESH_FAILPOINT", "outcome-received@1")
	m, w := journaledMesh(t, "payments.yaml", "")
	addr := m.orch.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m.runDetached(ctx, "d01")
	// The credit's outcome kills it; then, restarted, the charge's (its second outcome:
	// the credit sent again is the first).
	for _, next := range []string{"outcome-received@2", ""} {
		if err := m.orch.Wait(60 * time.Second); err == nil || !m.orch.Exited() {
			m.dump()
			t.Fatalf("the orchestrator did not die at the failpoint: %v", err)
		}
		t.Setenv("TOOLMESH_FAILPOINT", next)
		m.startOrchestrator(addr)
	}
	text := finalText(t, m.watch(ctx, "d01"))
	if !strings.Contains(text, "charge: Error: the outcome of tool 'charge' is unknown") {
		t.Errorf("final text %q: the charge's outcome should be unknown", text)
	}
	for _, tool := range []string{"credit", "charge"} {
		if n := countLines(w.Lines(), examplegroups.EffectLog, tool); n != 1 {
			t.Errorf("%s took effect %d times, want once", tool, n)
		}
	}
	if n := countLines(w.Lines(), "call answered from the idempotency ledger", "credit"); n != 1 {
		t.Errorf("the credit was answered from the ledger %d times, want once", n)
	}
}

// TestWorkerKilledAfterEffect (catalogue R04 and R05): three payments workers share an
// effects file; the one running a call is SIGKILLed after the call took effect. The
// charge, not idempotent, is not sent again: the model reads that its outcome is
// unknown and may have taken effect, and it took effect once. The credit, idempotent,
// is sent again with the same idempotency key to another replica, which credits nothing
// more: its outcome is a success, with one effect.
func TestWorkerKilledAfterEffect(t *testing.T) {
	effects := filepath.Join(t.TempDir(), "effects.db")
	m := startMesh(t, "afteref.yaml")
	for _, id := range []string{"pay-1", "pay-2", "pay-3"} {
		m.startWorker(id, "payments", "--payments-db", effects)
	}
	m.waitWorkers("pay-1", "pay-2", "pay-3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan []*toolpb.RunResponse, 1)
	go func() {
		evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "pay", ToolGroups: []string{"payments"}}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- evs
	}()
	for _, tool := range []string{"charge", "credit"} {
		var holder string
		for holder == "" && ctx.Err() == nil {
			for id, p := range m.workers {
				if countLines(p.Lines(), examplegroups.EffectLog, tool) > 0 && !p.Exited() {
					holder = id
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = m.workers[holder].Kill() // mid-hold: the effect happened, the answer did not leave
		delete(m.workers, holder)
	}
	evs := <-done
	byTool := map[string]*toolpb.ToolCallFinished{}
	for _, f := range finished(evs, 0) {
		byTool[f.GetTool()] = f
	}
	if c := byTool["charge"]; c == nil || !strings.Contains(c.GetContent(), "the outcome of tool 'charge' is unknown") || !strings.Contains(c.GetContent(), "may or may not have taken effect") || c.GetAttempts() != 1 {
		t.Errorf("charge: %v; want an unknown outcome after one attempt", c)
	}
	if c := byTool["credit"]; c == nil || c.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK || c.GetAttempts() != 2 {
		t.Errorf("credit: %v; want a success on the second attempt", c)
	}
	db := openEffects(t, effects)
	for _, tool := range []string{"charge", "credit"} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM effects WHERE tool = ?`, tool).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s took effect %d times (%v), want once", tool, n, err)
		}
	}
}

// openEffects opens the payments workers' effects file to count what they did.
func openEffects(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestOneShotSurvivesRestart (catalogue R17): a tool configured one-shot runs once per
// loop even when the loop's orchestrator is SIGKILLed between the two calls: the run,
// resumed, replays the first call and answers the second with ALREADY LOADED.
func TestOneShotSurvivesRestart(t *testing.T) {
	m, w := journaledMesh(t, "oneshot-restart.yaml", "tools:\n  credit:\n    one_shot: {advice: Use the credit you made.}\n")
	addr := m.orch.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m.runDetached(ctx, "r17")
	if _, err := w.WaitLine(ctx, func(l string) bool { return strings.Contains(l, examplegroups.EffectLog) && hasTool(l, "charge") }); err != nil {
		t.Fatal(err)
	}
	_ = m.orch.Kill()
	m.startOrchestrator(addr)
	if text := finalText(t, m.watch(ctx, "r17")); !strings.Contains(text, "again: ALREADY LOADED") || !strings.Contains(text, "Use the credit you made.") {
		t.Errorf("final text %q: the second credit should be answered ALREADY LOADED", text)
	}
	if n := countLines(w.Lines(), examplegroups.EffectLog, "credit"); n != 1 {
		t.Errorf("the one-shot credit took effect %d times, want once", n)
	}
}

// An orchestrator whose journal cannot be opened refuses to start and says why: a
// PostgreSQL that is down, a file that is not a journal.
func TestJournalUnavailableAtStart(t *testing.T) {
	bin, err := harness.Bin("orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	notJournal := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(notJournal, []byte(strings.Repeat("not a database\n", 300)), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyJournal := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(emptyJournal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"postgres down", []string{"--journal", "postgres", "--journal-dsn", "postgres://toolmesh@127.0.0.1:1/toolmesh?connect_timeout=2"}, "PostgreSQL is not reachable"},
		{"not a journal", []string{"--data-dir", filepath.Dir(notJournal)}, "cannot be read"},
		{"an empty journal file", []string{"--data-dir", filepath.Dir(emptyJournal)}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := harness.Start("orchestrator", bin, nil, append([]string{"--listen", "127.0.0.1:0"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Wait(30 * time.Second); err == nil || !p.Exited() {
				_ = p.Kill()
				t.Fatalf("the orchestrator did not refuse to start: %v\n%s", err, p.Output())
			}
			if out := p.Output(); !strings.Contains(out, tc.want) || strings.Contains(out, "orchestrator serving") {
				t.Errorf("output %q, want the reason %q and no serving", out, tc.want)
			}
		})
	}
}
