package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// replica is an orchestrator process sharing the PostgreSQL journal, and a client of it.
type replica struct {
	*harness.Orchestrator
	c *client.Client
}

func startReplica(t *testing.T, owner, cfgPath, script string) *replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := harness.StartOrchestrator(ctx, owner, "127.0.0.1:0", nil, "--config", cfgPath, "--script", script, "--owner", owner)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(o.Addr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{Orchestrator: o, c: c}
	t.Cleanup(func() {
		_ = c.Close()
		if !o.Exited() {
			_ = o.Stop(30 * time.Second)
		}
	})
	return r
}

// pgMesh is orchestrator replicas sharing a private PostgreSQL journal and one payments
// worker registered with each.
type pgMesh struct {
	pg              *harness.Postgres
	cfgPath, script string
	replicas        []*replica
	worker          *harness.Proc
}

// startPGMesh starts PostgreSQL, the named replicas on it (testConfig, the journal with a
// 2 s lease, then extraConfig; the scripted model reading script from testdata) and the
// worker.
func startPGMesh(t *testing.T, ctx context.Context, script, extraConfig string, names ...string) *pgMesh {
	t.Helper()
	pg, err := harness.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	m := &pgMesh{pg: pg, cfgPath: filepath.Join(t.TempDir(), "orchestrator.yaml")}
	cfg := testConfig + fmt.Sprintf("provider: {name: scripted}\njournal: {driver: postgres, dsn: %q, lease_ttl: 2s}\n", pg.DSN) + extraConfig
	if err := os.WriteFile(m.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	m.script, _ = filepath.Abs(filepath.Join("testdata", script))
	var addrs []string
	for _, name := range names {
		r := startReplica(t, name, m.cfgPath, m.script)
		m.replicas = append(m.replicas, r)
		addrs = append(addrs, r.Addr)
	}
	if m.worker, err = harness.StartWorker("pay-1", "pay-1", "payments", strings.Join(addrs, ","), nil, "--reconnect-min", "50ms", "--reconnect-max", "200ms"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.worker.Stop(30 * time.Second) })
	for _, r := range m.replicas {
		if err := harness.WaitWorkers(ctx, r.c, "pay-1"); err != nil {
			t.Fatalf("the worker did not register with %s: %v", r.Name, err)
		}
	}
	return m
}

// TestReplicasTakeOverRuns: two orchestrator replicas share a PostgreSQL journal and one
// payments worker registers with both. Eight detached runs are in flight, four on each;
// one replica is SIGKILLed while its runs' credits are in flight. The other takes its
// runs over once their leases expire: every run finishes, every call has one finished
// event, the idempotent credit took effect once per run and the charge at most once,
// and a client watching any run through the surviving replica sees its events once, in
// order.
func TestReplicasTakeOverRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m := startPGMesh(t, ctx, "payments.yaml", "", "replica-a", "replica-b")
	a, b, w := m.replicas[0], m.replicas[1], m.worker

	const runs = 8
	killed := runTakeoverRunsAndKill(ctx, t, a, b, w, runs)
	checkTakeoverEvents(ctx, t, b, runs)
	checkTakeoverEffects(t, w, runs)
	checkTakeoverResumes(t, a, b, runs)
	t.Logf("the killed replica's runs finished on the other within %s", time.Since(killed).Round(time.Millisecond))
	list, _, err := b.c.ListRuns(ctx, toolpb.RunState_RUN_STATE_SUCCEEDED, 100, "")
	if err != nil || len(list) != runs {
		t.Errorf("ListRuns(succeeded) on the survivor = %d runs, %v; want %d", len(list), err, runs)
	}
}

// runTakeoverRunsAndKill starts the detached runs, alternately on a and b, SIGKILLs a
// once every run's credit took effect, waits for the runs' streams to end and returns
// the time of the kill.
func runTakeoverRunsAndKill(ctx context.Context, t *testing.T, a, b *replica, w *harness.Proc, runs int) time.Time {
	t.Helper()
	var wg sync.WaitGroup
	for i := range runs {
		r := a
		if i%2 == 1 {
			r = b
		}
		id := fmt.Sprintf("run-%d", i)
		wg.Go(func() {
			for _, err := range r.c.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: "pay", ToolGroups: []string{"payments"}, Detached: true}) {
				if err != nil {
					return // the replica was killed
				}
			}
		})
	}
	// Kill a once every run's credit took effect: a's four credits are in flight.
	for countLines(w.Lines(), examplegroups.EffectLog, "credit") < runs {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d credits took effect:\n%s", countLines(w.Lines(), examplegroups.EffectLog, "credit"), w.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	killed := time.Now()
	_ = a.Kill()
	wg.Wait()
	return killed
}

// checkTakeoverEvents watches every run through the surviving replica b and checks that
// it ended with a final result, its events in order, and each of its two calls finished
// once.
func checkTakeoverEvents(ctx context.Context, t *testing.T, b *replica, runs int) {
	t.Helper()
	for i := range runs {
		id := fmt.Sprintf("run-%d", i)
		var evs []*toolpb.RunResponse
		for ev, err := range b.c.Watch(ctx, id, 0) {
			if err != nil {
				t.Fatalf("WatchRun(%s) on the surviving replica: %v\n%s", id, err, b.Output())
			}
			evs = append(evs, ev)
		}
		if len(evs) == 0 || evs[len(evs)-1].GetFinalResult() == nil {
			t.Errorf("%s did not end with a final result: %v", id, evs[len(evs)-1])
			continue
		}
		var last int64
		calls := map[string]int{}
		for _, ev := range evs {
			if ev.GetSequence() <= last {
				t.Errorf("%s: sequence %d after %d", id, ev.GetSequence(), last)
			}
			last = ev.GetSequence()
			if f := ev.GetToolCallFinished(); f != nil {
				calls[f.GetCallId()]++
			}
		}
		if len(calls) != 2 {
			t.Errorf("%s: finished calls %v, want two", id, calls)
		}
		for c, n := range calls {
			if n != 1 {
				t.Errorf("%s: call %s finished %d times", id, c, n)
			}
		}
	}
}

// checkTakeoverEffects counts the worker's effects per run and checks that each run's
// credit took effect once and its charge at most once.
func checkTakeoverEffects(t *testing.T, w *harness.Proc, runs int) {
	t.Helper()
	keyRun := regexp.MustCompile(`idempotency_key[=":]+(run-\d+)/`)
	effects := map[string]map[string]int{"credit": {}, "charge": {}}
	for _, l := range w.Lines() {
		if !strings.Contains(l, examplegroups.EffectLog) {
			continue
		}
		m := keyRun.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("effect line without a run: %s", l)
		}
		for tool := range effects {
			if hasTool(l, tool) {
				effects[tool][m[1]]++
			}
		}
	}
	for i := range runs {
		id := fmt.Sprintf("run-%d", i)
		if n := effects["credit"][id]; n != 1 {
			t.Errorf("%s: the credit took effect %d times, want once", id, n)
		}
		if n := effects["charge"][id]; n > 1 {
			t.Errorf("%s: the charge, not idempotent, took effect %d times", id, n)
		}
	}
}

// checkTakeoverResumes checks from the replicas' logs that the survivor b resumed each
// run as often as it was left to it.
func checkTakeoverResumes(t *testing.T, a, b *replica, runs int) {
	t.Helper()
	// The surviving replica resumed the killed one's runs, and its own only after it
	// stopped driving them itself (a lease it could not renew in time on a loaded
	// machine, or that the other replica took meanwhile): every time it holds a run
	// begins with its start there or a resume, and all but the last end with a stop
	// it logs.
	const stopped = "this orchestrator stopped driving the run; its next owner resumes it"
	for i := range runs {
		id := fmt.Sprintf("run-%d", i)
		byA := a.CountLogs("resuming a run", map[string]string{"run_id": id})
		byB := b.CountLogs("resuming a run", map[string]string{"run_id": id})
		stops := b.CountLogs(stopped, map[string]string{"run_id": id})
		want := stops + 1
		if i%2 == 1 {
			want-- // b's from its start
		}
		endedOnA := byA > 0 && byB == want-1 // it went to a and ended there before the kill
		if byB != want && !endedOnA {
			t.Errorf("%s, started on replica-%c: the surviving replica resumed it %d times and stopped driving it %d times (the killed one resumed it %d times); want %d resumes by the survivor",
				id, "ab"[i%2], byB, stops, byA, want)
		}
	}
}

// TestApprovalSurvivesRestart: a run pauses on a charge that requires approval; its
// orchestrator is SIGKILLed and restarted; the client approves through the other
// replica; the charge runs exactly once and the run finishes. A denied charge never
// reaches the worker.
func TestApprovalSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m := startPGMesh(t, ctx, "approval.yaml", "tools:\n  charge:\n    approval: {timeout: 2m}\n", "replica-a", "replica-b")
	a, b, w := m.replicas[0], m.replicas[1], m.worker
	cfgPath, script := m.cfgPath, m.script
	waitApproval := func(r *replica, id string) *toolpb.ApprovalRequested {
		t.Helper()
		for ev, err := range r.c.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: "pay carol", ToolGroups: []string{"payments"}, Detached: true}) {
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if ap := ev.GetApprovalRequested(); ap != nil {
				return ap
			}
		}
		t.Fatalf("%s ended without asking for approval", id)
		return nil
	}
	final := func(r *replica, id string) string {
		t.Helper()
		var last *toolpb.RunResponse
		for ev, err := range r.c.Watch(ctx, id, 0) {
			if err != nil {
				t.Fatalf("watch %s: %v", id, err)
			}
			last = ev
		}
		return last.GetFinalResult().GetText()
	}

	ap := waitApproval(a, "approve-me")
	addr := a.Addr
	_ = a.Kill()
	// The run is paused: nothing reached the worker.
	if n := countLines(w.Lines(), examplegroups.EffectLog, "charge"); n != 0 {
		t.Fatalf("the charge ran %d times before it was approved", n)
	}
	restarted, err := harness.StartOrchestrator(ctx, "replica-a", addr, nil, "--config", cfgPath, "--script", script, "--owner", "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop(30 * time.Second) })
	if err := b.c.ApproveToolCall(ctx, "approve-me", ap.GetCallId(), "", true, "ok by finance"); err != nil {
		t.Fatalf("approving through the other replica: %v", err)
	}
	if text := final(b, "approve-me"); text != "charge: charged 300 cents to carol" {
		t.Errorf("final text %q", text)
	}
	if n := countLines(w.Lines(), examplegroups.EffectLog, "charge"); n != 1 {
		t.Errorf("the approved charge ran %d times, want once", n)
	}

	ap = waitApproval(b, "deny-me")
	if err := b.c.ApproveToolCall(ctx, "deny-me", ap.GetCallId(), "", false, "not this month"); err != nil {
		t.Fatal(err)
	}
	if text := final(b, "deny-me"); !strings.Contains(text, "The user denied the call of tool 'charge'") || !strings.Contains(text, "not this month") {
		t.Errorf("denied: final text %q", text)
	}
	if n := countLines(w.Lines(), examplegroups.EffectLog, "charge"); n != 1 {
		t.Errorf("the charges ran %d times in all, want once (the denied one never reached the worker)", n)
	}
}

// TestPostgresGoesAway: the journal's PostgreSQL dies while a run waits for a call. The
// run stops once its lease runs out: its client's stream ends with UNAVAILABLE
// (JOURNAL_UNAVAILABLE), saying that the run goes on wherever the journal is reachable;
// the orchestrator keeps serving, and refuses new runs with the same clear reason.
func TestPostgresGoesAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := startPGMesh(t, ctx, "afteref.yaml", "", "replica-a")
	a, w := m.replicas[0], m.worker
	ended := make(chan error, 1)
	go func() {
		var last error
		for _, err := range a.c.Run(ctx, &toolpb.RunRequest{RunId: "pg-gone", Prompt: "pay", ToolGroups: []string{"payments"}}) {
			if err != nil {
				last = err
			}
		}
		ended <- last
	}()
	if _, err := w.WaitLine(ctx, func(l string) bool { return strings.Contains(l, examplegroups.EffectLog) }); err != nil {
		t.Fatal(err)
	}
	m.pg.Kill()
	killed := time.Now()
	select {
	case err := <-ended:
		if !errors.Is(err, client.ErrJournalUnavailable) || !strings.Contains(err.Error(), "WatchRun") {
			t.Errorf("the run's stream ended with %v; want JOURNAL_UNAVAILABLE, saying to watch the run", err)
		}
		t.Logf("the run stopped %s after PostgreSQL died", time.Since(killed).Round(10*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the run's stream did not end within 30 s of PostgreSQL dying")
	}
	if _, err := a.c.ListWorkers(ctx); err != nil {
		t.Errorf("the orchestrator stopped serving: %v", err)
	}
	// It reports that it cannot serve runs while its journal is gone (it reported
	// SERVING, and failed every run).
	waitHealth(ctx, t, a.Addr, "", healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)
	waitHealth(ctx, t, a.Addr, toolpb.OrchestratorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)
	for _, err := range a.c.Run(ctx, &toolpb.RunRequest{RunId: "pg-gone-2", Prompt: "pay", ToolGroups: []string{"payments"}}) {
		if !errors.Is(err, client.ErrJournalUnavailable) {
			t.Errorf("a new run without the journal: %v, want JOURNAL_UNAVAILABLE", err)
		}
		break
	}
}
