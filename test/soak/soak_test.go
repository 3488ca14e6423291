// Package soak is the chaos soak: the mesh as real processes (two orchestrator replicas
// on a private PostgreSQL journal, three payments workers sharing an effects file) under
// 32 concurrent loops while a schedule SIGKILLs workers and orchestrators, SIGSTOPs an
// orchestrator and a worker, and blackholes a worker. A history of every run, event and fault is
// written as JSON lines; at the end the catalogue's invariants are checked over the
// history, the journal and the workers' effects.
//
// TOOLMESH_SOAK_DURATION sets how long the load runs (default 2m; make soak: 10m);
// TOOLMESH_SOAK_REPORT, a directory, receives soak-latest.md and soak-latest.json.
package soak

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	_ "modernc.org/sqlite"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const (
	loops       = 32
	leaseTTL    = 3 * time.Second
	workerCount = 3
)

const orchestratorConfig = `
registry:
  heartbeat_interval: 500ms
  lease_ttl: 3s
  grace_period: 1s
router:
  default_tool_timeout: 5s
  eject_after_failures: 2
  eject_duration: 2s
provider: {name: scripted}
journal: {driver: postgres, dsn: %q, lease_ttl: 3s, resume_grace: 10s}
`

// history writes one JSON line per thing that happened.
type history struct {
	mu    sync.Mutex
	f     *os.File
	start time.Time
}

func (h *history) add(kind string, fields map[string]any) {
	fields["kind"], fields["t_ms"] = kind, time.Since(h.start).Milliseconds()
	b, _ := json.Marshal(fields)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.f.Write(append(b, '\n'))
}

type orch struct {
	name, addr string
	proc       *harness.Orchestrator
}

type mesh struct {
	t       *testing.T
	cfgPath string
	script  string
	effects string
	orchs   []*orch
	workers map[string]*harness.Proc
	listen  map[string]string
	advert  map[string]string
	proxy   *faultProxy
	hist    *history
	mu      sync.Mutex
	down    map[string]bool // workers killed and not yet restarted
	holed   bool            // pay-3 is blackholed
	// faultedAt is when each worker last had a fault (killed, stopped, blackholed).
	faultedAt map[string]time.Time
	reregs    []time.Duration
	faults    map[string]int
	failures  []string
}

func (m *mesh) orchArg() string {
	var as []string
	for _, o := range m.orchs {
		as = append(as, o.addr)
	}
	return strings.Join(as, ",")
}

func (m *mesh) startOrch(o *orch) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := harness.StartOrchestrator(ctx, o.name, o.addr, nil, "--config", m.cfgPath, "--script", m.script, "--owner", o.name)
	if err != nil {
		return err
	}
	o.proc = p
	if o.addr == "127.0.0.1:0" || o.addr == "" {
		o.addr = p.Addr
	}
	return nil
}

func (m *mesh) startWorker(id string) error {
	args := []string{"--payments-db", m.effects, "--reconnect-min", "50ms", "--reconnect-max", "1s", "--log-level", "warn", "--listen", m.listen[id], "--advertise", m.advert[id]}
	p, err := harness.StartWorker(id, id, "payments", m.orchArg(), nil, args...)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.workers[id] = p
	delete(m.down, id)
	m.mu.Unlock()
	return nil
}

func (m *mesh) fault(kind, target string) {
	m.mu.Lock()
	m.faults[kind]++
	if strings.HasPrefix(kind, "worker_") {
		if m.faultedAt == nil {
			m.faultedAt = map[string]time.Time{}
		}
		m.faultedAt[target] = time.Now()
	}
	m.mu.Unlock()
	m.hist.add("fault", map[string]any{"fault": kind, "target": target})
}

func (m *mesh) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures = append(m.failures, fmt.Sprintf(format, args...))
}

// reregistered waits until every worker that can register (not killed a moment ago,
// not partitioned) is READY on o and records how long it took.
func (m *mesh) reregistered(o *orch, since time.Time) {
	ids := make([]string, 0, workerCount)
	m.mu.Lock()
	for i := range workerCount {
		id := fmt.Sprintf("pay-%d", i+1)
		if !m.down[id] && (id != "pay-3" || !m.holed) {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(o.addr, insecure.NewCredentials())
	if err != nil {
		m.fail("dial %s: %v", o.name, err)
		return
	}
	defer func() { _ = c.Close() }()
	for ctx.Err() == nil {
		// A worker that has a fault of its own while this orchestrator restarts (the
		// schedule blackholes or kills one at the same moment) is not waited for.
		m.mu.Lock()
		ids = slices.DeleteFunc(ids, func(id string) bool { return m.faultedAt[id].After(since) })
		m.mu.Unlock()
		ws, err := c.ListWorkers(ctx)
		ready := 0
		if err == nil {
			for _, w := range ws {
				if w.GetState() == toolpb.WorkerState_WORKER_STATE_READY && slices.Contains(ids, w.GetWorkerId()) {
					ready++
				}
			}
		}
		if ready == len(ids) {
			m.mu.Lock()
			m.reregs = append(m.reregs, time.Since(since))
			m.mu.Unlock()
			m.hist.add("reregistered", map[string]any{"orchestrator": o.name, "ms": time.Since(since).Milliseconds()})
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.fail("the workers did not all re-register with %s within 30 s", o.name)
}

// chaos runs the fault schedule until ctx ends.
func (m *mesh) chaos(ctx context.Context, d time.Duration) {
	orchEvery := min(2*time.Minute, d/2)
	stopEvery := min(210*time.Second, d*3/4)
	holeEvery := min(3*time.Minute, d/4)
	wstopEvery := min(150*time.Second, d*5/8)
	start := time.Now()
	nextWorker, nextOrch, nextStop, nextHole, nextWStop := 10*time.Second, orchEvery, stopEvery, holeEvery, wstopEvery
	wi, oi := 0, 0
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		el := time.Since(start)
		if el >= nextWorker {
			nextWorker += 10 * time.Second
			id := fmt.Sprintf("pay-%d", wi%workerCount+1)
			wi++
			m.mu.Lock()
			p := m.workers[id]
			m.mu.Unlock()
			m.fault("worker_sigkill", id)
			m.mu.Lock()
			m.down[id] = true
			m.mu.Unlock()
			_ = p.Kill()
			wg.Go(func() {
				time.Sleep(2 * time.Second)
				if err := m.startWorker(id); err != nil {
					m.fail("restart %s: %v", id, err)
				}
			})
		}
		if el >= nextOrch {
			nextOrch += orchEvery
			o := m.orchs[oi%len(m.orchs)]
			oi++
			m.fault("orchestrator_sigkill", o.name)
			_ = o.proc.Kill()
			time.Sleep(2 * time.Second)
			if err := m.startOrch(o); err != nil {
				m.fail("restart %s: %v", o.name, err)
				continue
			}
			restarted := time.Now()
			wg.Go(func() { m.reregistered(o, restarted) })
		}
		if el >= nextStop {
			nextStop += stopEvery
			o := m.orchs[oi%len(m.orchs)]
			m.fault("orchestrator_sigstop", o.name)
			_ = o.proc.Signal(syscall.SIGSTOP)
			wg.Go(func() {
				time.Sleep(8 * time.Second)
				_ = o.proc.Signal(syscall.SIGCONT)
				m.fault("orchestrator_sigcont", o.name)
			})
		}
		if el >= nextWStop {
			// A paused worker (catalogue R18): its lease expires and its tools leave the
			// table, its calls time out, and after SIGCONT it registers again.
			nextWStop += wstopEvery
			m.mu.Lock()
			p := m.workers["pay-2"]
			m.mu.Unlock()
			m.fault("worker_sigstop", "pay-2")
			_ = p.Signal(syscall.SIGSTOP)
			wg.Go(func() {
				time.Sleep(20 * time.Second)
				_ = p.Signal(syscall.SIGCONT)
				m.fault("worker_sigcont", "pay-2")
			})
		}
		if el >= nextHole {
			nextHole += holeEvery
			m.fault("worker_blackhole", "pay-3")
			m.setHole(true)
			wg.Go(func() {
				time.Sleep(20 * time.Second)
				m.setHole(false)
				m.fault("worker_heal", "pay-3")
			})
		}
	}
}

func (m *mesh) setHole(on bool) {
	m.mu.Lock()
	m.holed = on
	m.mu.Unlock()
	m.proxy.blackhole(on)
}

// runRecord is what the client saw of one run.
type runRecord struct {
	id        string
	seqs      []int64
	final     string
	errEnd    string
	reattach  int
	refused   int
	startedAt time.Time
	lastErr   string
}

// drive runs one run to its end as a client would: Run detached on a replica, and when
// the stream breaks, WatchRun on the next replica after the last sequence seen.
func (m *mesh) drive(ctx context.Context, id string, first int) *runRecord {
	rr := &runRecord{id: id, startedAt: time.Now()}
	req := &toolpb.RunRequest{RunId: id, Prompt: "pay", ToolGroups: []string{"payments"}, Detached: true}
	var last int64
	started := false
	for attempt := 0; ctx.Err() == nil && attempt < 200; attempt++ {
		o := m.orchs[(first+attempt)%len(m.orchs)]
		c, err := client.Dial(o.addr, insecure.NewCredentials())
		if err != nil {
			continue
		}
		var seq func(func(*toolpb.RunResponse, error) bool)
		if started {
			seq = c.Watch(ctx, id, last)
			rr.reattach++
		} else {
			seq = c.Run(ctx, req)
		}
		for ev, err := range seq {
			if err != nil {
				rr.lastErr = err.Error()
				if errors.Is(err, client.ErrRunExists) {
					started = true // an earlier attempt started it
				}
				if errors.Is(err, client.ErrRunNotFound) && !started {
					rr.refused++
				}
				break
			}
			started = true
			if ev.GetSequence() <= last {
				m.fail("%s: sequence %d after %d", id, ev.GetSequence(), last)
			}
			last = ev.GetSequence()
			rr.seqs = append(rr.seqs, last)
			if f := ev.GetFinalResult(); f != nil {
				rr.final = f.GetText()
			}
			if e := ev.GetError(); e != nil {
				rr.errEnd = e.GetMessage()
			}
		}
		_ = c.Close()
		if rr.final != "" || rr.errEnd != "" {
			return rr
		}
		time.Sleep(100 * time.Millisecond)
	}
	return rr
}

func duration(t *testing.T) time.Duration {
	if s := os.Getenv("TOOLMESH_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TOOLMESH_SOAK_DURATION: %v", err)
		}
		return d
	}
	return 2 * time.Minute
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos soak takes minutes")
	}
	d := duration(t)
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	pg, err := harness.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	dir := t.TempDir()
	m := newSoakMesh(t, dir, pg.DSN)
	hf := openHistory(t, dir)
	defer func() { _ = hf.Close() }()
	m.hist = &history{f: hf, start: time.Now()}
	t.Logf("history: %s", hf.Name())

	m.startOrchs(t)
	defer func() {
		for _, o := range m.orchs {
			_ = o.proc.Signal(syscall.SIGCONT)
			_ = o.proc.Stop(30 * time.Second)
		}
	}()
	defer func() {
		if m.proxy != nil {
			m.proxy.close()
		}
	}()
	m.startWorkers(t)
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range m.workers {
			_ = p.Signal(syscall.SIGCONT)
			_ = p.Stop(30 * time.Second)
		}
	}()
	m.waitReady(t)

	// The load: 32 loops, each running runs one after another until the time is up.
	loadCtx, stopLoad := context.WithTimeout(ctx, d)
	defer stopLoad()
	// A run started before the load ends gets two more minutes to end.
	drainCtx, stopDrain := context.WithTimeout(ctx, d+2*time.Minute)
	defer stopDrain()
	records := m.loadUnderChaos(loadCtx, drainCtx, d)
	m.healAll()

	checkCtx, stopCheck := context.WithTimeout(context.Background(), 5*time.Minute)
	defer stopCheck()
	rep := m.check(checkCtx, pg.DSN, records)
	rep.DurationSeconds = d.Seconds()
	reportSoak(t, m, rep)
}

// newSoakMesh makes the mesh's state in dir and writes the orchestrators' configuration,
// journaling to the PostgreSQL database at dsn.
func newSoakMesh(t *testing.T, dir, dsn string) *mesh {
	t.Helper()
	m := &mesh{t: t, cfgPath: filepath.Join(dir, "orchestrator.yaml"), effects: filepath.Join(dir, "effects.db"),
		workers: map[string]*harness.Proc{}, down: map[string]bool{}, listen: map[string]string{}, advert: map[string]string{}, faults: map[string]int{}}
	if err := os.WriteFile(m.cfgPath, []byte(fmt.Sprintf(orchestratorConfig, dsn)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.script, _ = filepath.Abs(filepath.Join("testdata", "soak.yaml"))
	return m
}

// openHistory creates the history file, in TOOLMESH_SOAK_REPORT if it is set, else in
// dir.
func openHistory(t *testing.T, dir string) *os.File {
	t.Helper()
	histDir := dir
	if out := os.Getenv("TOOLMESH_SOAK_REPORT"); out != "" {
		histDir = out
	}
	hf, err := os.Create(filepath.Join(histDir, "soak-history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return hf
}

// startOrchs starts the two orchestrator replicas, each on a free address.
func (m *mesh) startOrchs(t *testing.T) {
	t.Helper()
	for _, name := range []string{"orch-a", "orch-b"} {
		addr, err := harness.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		o := &orch{name: name, addr: addr}
		if err := m.startOrch(o); err != nil {
			t.Fatal(err)
		}
		m.orchs = append(m.orchs, o)
	}
}

// startWorkers starts the payments workers; the last is reached through the fault
// proxy, which can blackhole it.
func (m *mesh) startWorkers(t *testing.T) {
	t.Helper()
	for i := range workerCount {
		id := fmt.Sprintf("pay-%d", i+1)
		addr, err := harness.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		m.listen[id], m.advert[id] = addr, addr
		if i == workerCount-1 { // the one that gets blackholed: the orchestrators reach it through the proxy
			if m.proxy, err = startProxy(addr); err != nil {
				t.Fatal(err)
			}
			m.advert[id] = m.proxy.addr()
		}
		if err := m.startWorker(id); err != nil {
			t.Fatal(err)
		}
	}
}

// waitReady waits until every worker is READY on every orchestrator, and fails the test
// if one is not.
func (m *mesh) waitReady(t *testing.T) {
	t.Helper()
	for _, o := range m.orchs {
		m.reregistered(o, time.Now())
	}
	if len(m.failures) > 0 {
		for name, p := range m.workers {
			t.Logf("---- %s ----\n%s", name, p.Output())
		}
		t.Fatal(m.failures)
	}
	m.reregs = nil
}

// loadUnderChaos runs the loops' runs until loadCtx ends, each run driven until
// drainCtx ends, while the fault schedule runs, and returns what the clients saw.
func (m *mesh) loadUnderChaos(loadCtx, drainCtx context.Context, d time.Duration) []*runRecord {
	var records []*runRecord
	var recMu sync.Mutex
	var wg sync.WaitGroup
	var n atomic.Int64
	for g := range loops {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				id := fmt.Sprintf("soak-%03d-%05d", g, n.Add(1))
				m.hist.add("run_start", map[string]any{"run": id})
				rr := m.drive(drainCtx, id, g)
				m.hist.add("run_end", map[string]any{"run": id, "final": rr.final, "error": rr.errEnd, "events": len(rr.seqs), "reattached": rr.reattach})
				recMu.Lock()
				records = append(records, rr)
				recMu.Unlock()
			}
		})
	}
	chaosCtx, stopChaos := context.WithCancel(loadCtx)
	chaosDone := make(chan struct{})
	go func() { defer close(chaosDone); m.chaos(chaosCtx, d) }()
	wg.Wait()
	stopChaos()
	<-chaosDone
	return records
}

// healAll ends the partition and resumes every stopped process.
func (m *mesh) healAll() {
	m.proxy.blackhole(false)
	for _, o := range m.orchs {
		_ = o.proc.Signal(syscall.SIGCONT)
	}
	m.mu.Lock()
	for _, p := range m.workers {
		_ = p.Signal(syscall.SIGCONT)
	}
	m.mu.Unlock()
}

// reportSoak logs the soak's outcome, writes its report to TOOLMESH_SOAK_REPORT if it is
// set, and fails the test on every failure and broken invariant.
func reportSoak(t *testing.T, m *mesh, rep *report) {
	t.Helper()
	t.Logf("soak: %s", rep.summary())
	if out := os.Getenv("TOOLMESH_SOAK_REPORT"); out != "" {
		if err := rep.write(out); err != nil {
			t.Error(err)
		}
	}
	for _, f := range m.failures {
		t.Error(f)
	}
	for _, v := range rep.violations() {
		t.Error(v)
	}
}

// report is the soak's outcome.
type report struct {
	DurationSeconds     float64        `json:"duration_seconds"`
	Loops               int            `json:"concurrent_loops"`
	Runs                int            `json:"runs"`
	Terminal            int            `json:"runs_terminal"`
	Succeeded           int            `json:"runs_succeeded"`
	Reattached          int            `json:"runs_reattached"`
	ToolCalls           int            `json:"tool_calls"`
	LostOutcomes        int            `json:"lost_outcomes"`
	DuplicateOutcomes   int            `json:"duplicate_outcomes"`
	UnknownOutcomes     int            `json:"outcome_unknown"`
	DuplicateEffects    int            `json:"duplicate_effects"`
	NonIdempotentResent int            `json:"non_idempotent_resent"`
	EventMismatches     int            `json:"event_mismatches"`
	Faults              map[string]int `json:"faults"`
	ReregistrationMs    []int64        `json:"reregistration_ms"`
	Problems            []string       `json:"problems,omitempty"`
}

func (r *report) succeededShare() float64 {
	if r.Runs == 0 {
		return 0
	}
	return float64(r.Succeeded) / float64(r.Runs)
}

func (r *report) summary() string {
	return fmt.Sprintf("%d runs (%d terminal, %d succeeded = %.2f%%, %d re-attached), %d tool calls, %d lost outcomes, %d duplicate outcomes, %d outcome_unknown, %d duplicate effects, %d non-idempotent re-sends, %d event mismatches, faults %v, re-registration %v ms",
		r.Runs, r.Terminal, r.Succeeded, 100*r.succeededShare(), r.Reattached, r.ToolCalls, r.LostOutcomes, r.DuplicateOutcomes, r.UnknownOutcomes, r.DuplicateEffects, r.NonIdempotentResent, r.EventMismatches, r.Faults, r.ReregistrationMs)
}

// violations are the invariants the soak broke.
func (r *report) violations() []string {
	var out []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	check(r.Runs > 0, "no run was made")
	check(r.Terminal == r.Runs, "%d of %d runs are not terminal", r.Runs-r.Terminal, r.Runs)
	check(r.succeededShare() >= 0.99, "%.2f%% of runs succeeded, want ≥ 99%%", 100*r.succeededShare())
	check(r.LostOutcomes == 0, "%d tool outcomes lost", r.LostOutcomes)
	check(r.DuplicateOutcomes == 0, "%d tool calls with more than one outcome", r.DuplicateOutcomes)
	check(r.DuplicateEffects == 0, "%d duplicate effects", r.DuplicateEffects)
	check(r.NonIdempotentResent == 0, "%d non-idempotent calls re-sent", r.NonIdempotentResent)
	check(r.EventMismatches == 0, "%d runs whose client saw other events than the journal holds", r.EventMismatches)
	for _, ms := range r.ReregistrationMs {
		check(ms <= 5000, "re-registration after an orchestrator restart took %d ms, goal ≤ 5000", ms)
	}
	return append(out, r.Problems...)
}

// check waits for every run to be terminal, then checks the invariants over the
// journal, the effects and what the clients saw.
func (m *mesh) check(ctx context.Context, dsn string, records []*runRecord) *report {
	rep := &report{Loops: loops, Runs: len(records), Faults: m.faults}
	for _, d := range m.reregs {
		rep.ReregistrationMs = append(rep.ReregistrationMs, d.Milliseconds())
	}
	store, err := runlog.OpenPostgres(ctx, dsn)
	if err != nil {
		rep.Problems = append(rep.Problems, "the journal: "+err.Error())
		return rep
	}
	defer func() { _ = store.Close() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		running, err := store.List(ctx, runlog.Filter{State: runlog.StateRunning, Limit: 10})
		if err == nil && len(running) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	m.countEffects(ctx, rep)
	c, err := client.Dial(m.orchs[0].addr, insecure.NewCredentials())
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		return rep
	}
	defer func() { _ = c.Close() }()
	sort.Slice(records, func(i, j int) bool { return records[i].id < records[j].id })
	for i, rr := range records {
		rep.checkRun(ctx, store, i, rr)
	}
	return rep
}

// countEffects counts, from the effects file, the calls that took effect more than
// once.
func (m *mesh) countEffects(ctx context.Context, rep *report) {
	// What the effects file says each call did.
	effects := map[string]int{}
	db, err := sql.Open("sqlite", "file:"+m.effects+"?_pragma=busy_timeout(10000)")
	if err == nil {
		rows, err := db.QueryContext(ctx, `SELECT tool, key, COUNT(*) FROM effects GROUP BY tool, key`)
		if err == nil {
			for rows.Next() {
				var tool, key string
				var n int
				if rows.Scan(&tool, &key, &n) == nil {
					effects[tool+" "+key] = n
					if n > 1 {
						rep.DuplicateEffects++
						if tool == "charge" {
							rep.NonIdempotentResent++
						}
					}
				}
			}
			_ = rows.Close()
		} else {
			rep.Problems = append(rep.Problems, "the effects file: "+err.Error())
		}
		_ = db.Close()
	}
}

// checkRun checks the run of record rr, the ith by id, against the journal.
func (r *report) checkRun(ctx context.Context, store runlog.Store, i int, rr *runRecord) {
	run, err := store.Get(ctx, rr.id)
	if errors.Is(err, runlog.ErrNotFound) && rr.final == "" && rr.errEnd == "" {
		r.Terminal++ // never started: the load stopped while it was being refused
		r.Succeeded++
		return
	}
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: %v", rr.id, err))
		return
	}
	if run.State.Terminal() {
		r.Terminal++
	} else if len(r.Problems) < 20 {
		recs, _ := store.Read(ctx, rr.id, max(0, run.Records-6), 0)
		var kinds []string
		for _, rec := range recs {
			kinds = append(kinds, fmt.Sprintf("%d:%s %s", rec.Seq, rec.Kind, truncate(string(rec.Data), 160)))
		}
		r.Problems = append(r.Problems, fmt.Sprintf("%s is not terminal: owner %s epoch %d lease until %s, %d records, the client saw %d events (last error %q); last records: %s",
			rr.id, run.Owner, run.Epoch, run.Until.Format(time.TimeOnly), run.Records, len(rr.seqs), rr.lastErr, strings.Join(kinds, " | ")))
	}
	if run.State == runlog.StateSucceeded {
		r.Succeeded++
	}
	if rr.reattach > 0 {
		r.Reattached++
	}
	recs, err := store.Read(ctx, rr.id, 0, 0)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: %v", rr.id, err))
		return
	}
	r.checkJournal(run, recs, i, rr)
}

// checkJournal checks the records of run: every dispatched call of a terminal run has
// one outcome, and what the client saw of it is the journal's events.
func (r *report) checkJournal(run runlog.Run, recs []runlog.Record, i int, rr *runRecord) {
	dispatched, outcomes := map[string]bool{}, map[string]int{}
	var events []int64
	for _, rec := range recs {
		switch rec.Kind {
		case runlog.KindDispatch:
			var d struct{ Key string }
			_ = json.Unmarshal(rec.Data, &d)
			dispatched[d.Key] = true
		case runlog.KindOutcome:
			var o struct{ Key, Outcome string }
			_ = json.Unmarshal(rec.Data, &o)
			outcomes[o.Key]++
			if o.Outcome == "outcome_unknown" {
				r.UnknownOutcomes++
			}
		case runlog.KindEvent, runlog.KindDelta:
			events = append(events, rec.Seq)
		}
	}
	r.ToolCalls += len(dispatched)
	for k := range dispatched {
		if run.State.Terminal() && outcomes[k] == 0 {
			r.LostOutcomes++
		}
	}
	for _, n := range outcomes {
		if n > 1 {
			r.DuplicateOutcomes++
		}
	}
	// What the client saw is exactly the journal's events (the first stream and
	// every re-attach together), once each, in order; checked for re-attached runs
	// and every tenth run.
	if (rr.reattach > 0 || i%10 == 0) && run.State.Terminal() && !slices.Equal(rr.seqs, events) {
		r.EventMismatches++
		if r.EventMismatches <= 3 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: the client saw sequences %v, the journal holds %v", rr.id, rr.seqs, events))
		}
	}
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "soak-latest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# Chaos soak\n\n%s of load: %d concurrent loops on two orchestrator replicas sharing a private PostgreSQL journal, three payments workers sharing an effects file. Faults: %v.\n\n", time.Duration(r.DurationSeconds*float64(time.Second)), r.Loops, r.Faults)
	fmt.Fprintf(&md, "| figure | value | goal |\n|---|---:|---|\n")
	row := func(name string, v any, goal string) { fmt.Fprintf(&md, "| %s | %v | %s |\n", name, v, goal) }
	row("runs", r.Runs, "")
	row("runs terminal", r.Terminal, "100 %")
	row("runs succeeded", fmt.Sprintf("%d (%.2f %%)", r.Succeeded, 100*r.succeededShare()), "≥ 99 %")
	row("runs whose client re-attached", r.Reattached, "")
	row("tool calls", r.ToolCalls, "")
	row("lost tool outcomes", r.LostOutcomes, "0")
	row("calls with more than one outcome", r.DuplicateOutcomes, "0")
	row("outcome_unknown", r.UnknownOutcomes, "by design")
	row("duplicate effects", r.DuplicateEffects, "0")
	row("non-idempotent re-sends", r.NonIdempotentResent, "0")
	row("runs whose events differ from the journal's", r.EventMismatches, "0")
	row("re-registration after each orchestrator restart (ms)", fmt.Sprint(r.ReregistrationMs), "≤ 5000 each")
	if v := r.violations(); len(v) > 0 {
		fmt.Fprintf(&md, "\nViolations:\n\n* %s\n", strings.Join(v, "\n* "))
	} else {
		md.WriteString("\nEvery invariant held.\n")
	}
	return os.WriteFile(filepath.Join(dir, "soak-latest.md"), []byte(md.String()), 0o644)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
