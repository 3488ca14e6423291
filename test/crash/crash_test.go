// Package crash kills the orchestrator process at every point where it writes or reads
// a run's journal (internal/failpoint.Points), restarts it on the same journal, and
// checks that the run it was driving ends as if nothing had happened, but for what the
// kill must change: a call that is not idempotent and was in flight is not sent again,
// and the model reads that its outcome is unknown.
//
// Every case runs the same conversation (journey) with a model this test serves over
// OpenAI's wire format, a toolworker process serving payments (charge, not idempotent;
// credit, idempotent) and math (add), with its idempotency ledger and its effects in a
// file, for SQLite and for PostgreSQL. After the run ends it checks:
//
//   - the run ended, and GetRun agrees with its last event;
//   - every event the client saw before a kill is in the journal with the same sequence
//     number and content;
//   - no model step the journal recorded was asked again, and every request for a step
//     is the one the uninterrupted run sent, byte for byte (but after an unknown outcome,
//     which the uninterrupted run did not see);
//   - every idempotent call's real result reached the model; a call that is not
//     idempotent was sent once at most, and its result or its unknown outcome reached
//     the model;
//   - no effect took place twice, and every effect took place under the idempotency key
//     of a dispatch in the journal (a call leaves only once its dispatch is on disk).
//
// make test runs each point once per store, at its third time (at the charge); make soak
// (TOOLMESH_CRASH_SOAK=1) each at its first, second and third time.
package crash

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, "pgx"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	_ "modernc.org/sqlite"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/failpoint"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// kill is where a case kills the orchestrator: a failpoint and the time it is reached;
// or, with point duringCall, a SIGKILL while the calls of step nth are in flight (the
// worker delays every call); or, with point afterEffect, a SIGKILL as soon as the worker
// applied the run's nth payment (the worker delays no call).
type kill struct {
	point string
	nth   int
}

// duringCall is a kill with a signal while a step's calls run, not at a failpoint;
// duringResume one while the calls a resumed run sends again run; afterEffect one the
// moment the worker logs a payment's effect, milliseconds after the model's answer
// that asked for it: what the orchestrator had not committed by then is lost.
const (
	duringCall   = "during-calls"
	duringResume = "during-resent-calls"
	afterEffect  = "after-effect"
)

func (k kill) env() string {
	if k.point == duringCall || k.point == duringResume || k.point == afterEffect {
		return ""
	}
	return fmt.Sprintf("%s@%d", k.point, k.nth)
}

func (k kill) String() string { return fmt.Sprintf("%s@%d", k.point, k.nth) }

// crashCase is a list of kills, one after another: the orchestrator restarted after a
// kill dies at the next one.
type crashCase []kill

func (c crashCase) String() string {
	var parts []string
	for _, k := range c {
		parts = append(parts, k.String())
	}
	return strings.Join(parts, "+")
}

// cases are the kills: each point of a first run at its nth time (a point reached once
// a run, at its first); each point of a resume after a kill in the middle of the run;
// and kills in a row, one during a replay.
func cases(timings []int, sqlite bool) []crashCase {
	var out []crashCase
	// The fourth call's outcome (credit carol's): the run is half done, the charge of bob
	// recorded, credit carol dispatched without an outcome.
	mid := kill{failpoint.OutcomeReceived, 4}
	for i, n := range timings {
		for _, p := range failpoint.Points {
			switch p {
			case failpoint.RunCreated, failpoint.ResumeAcquired:
				if i > 0 {
					continue // reached once a run (a resume)
				}
				if p == failpoint.RunCreated {
					out = append(out, crashCase{{p, 1}})
				} else {
					out = append(out, crashCase{mid, {p, 1}})
				}
			case failpoint.ReplayModel, failpoint.ReplayOutcome:
				out = append(out, crashCase{mid, {p, n}})
			case failpoint.StoreBeforeApply:
				if sqlite {
					out = append(out, crashCase{{p, n}}) // PostgreSQL commits in place
				}
			default:
				out = append(out, crashCase{{p, n}})
			}
		}
	}
	// Several kills in one run: mid-run; during the replay; then as the model answers the
	// first step the replay could not answer (credit carol, sent again, answered by the
	// worker's ledger, then the model asked its fourth step).
	out = append(out, crashCase{mid, {failpoint.ReplayOutcome, 2}, {failpoint.ModelAnswered, 1}})
	// The charge's outcome lost: the resumed run records it unknown; killed again, the
	// run resumed once more replays that record.
	out = append(out, crashCase{{failpoint.OutcomeReceived, 3}, {failpoint.ModelAnswered, 1}})
	// Signals while calls run: the worker's calls are cut short (an idempotent add and a
	// charge of the fourth step; then the slow credit of the third, twice).
	out = append(out, crashCase{{duringCall, 4}}, crashCase{{duringCall, 3}, {duringResume, 1}})
	// Signals right after an idempotent credit took effect, the worker answering at once:
	// alice's (the first step's, beside an add) and carol's (the third step's, alone). A
	// call leaves only once the answer that asked for it is on disk, so the resumed run
	// sends it again with the same idempotency key; were the answer lost, the model would
	// be asked the step again, give its calls new ids, and credit twice.
	out = append(out, crashCase{{afterEffect, 1}}, crashCase{{afterEffect, 3}})
	return out
}

// fast reports whether the worker answers the case's calls at once (no delay).
func (c crashCase) fast() bool {
	return slices.ContainsFunc(c, func(k kill) bool { return k.point == afterEffect })
}

// store is a journal the cases run on.
type store struct {
	name string
	// config is the orchestrator's journal section for a case; open opens the journal
	// itself, to read what it holds.
	config func(t *testing.T) (string, func() (runlog.Store, error))
}

func TestCrashAtEveryFailpoint(t *testing.T) {
	if _, err := harness.Bin("orchestrator"); err != nil {
		t.Skip(err)
	}
	// The third time of each point is at the call that is not idempotent (the charge of
	// the second step): its dispatch, its outcome, the step after it.
	timings := []int{3}
	if os.Getenv("TOOLMESH_CRASH_SOAK") != "" {
		timings = []int{1, 2, 3}
	}
	stores := []store{{name: "sqlite", config: func(t *testing.T) (string, func() (runlog.Store, error)) {
		dir := filepath.Join(t.TempDir(), "data")
		return fmt.Sprintf("journal: {data_dir: %q, lease_ttl: 2s, resume_grace: 10s, snapshot_every: 4}\n", dir), func() (runlog.Store, error) {
			return runlog.OpenSQLite(context.Background(), filepath.Join(dir, "journal.db"))
		}
	}}}
	if _, err := harness.PostgresBin(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		pg, err := harness.StartPostgres(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Stop)
		admin, err := sql.Open("pgx", pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Close() })
		n := 0
		stores = append(stores, store{name: "postgres", config: func(t *testing.T) (string, func() (runlog.Store, error)) {
			n++
			db := fmt.Sprintf("crash%d", n)
			if _, err := admin.Exec("CREATE DATABASE " + db); err != nil {
				t.Fatal(err)
			}
			cut := strings.LastIndex(pg.DSN, "/toolmesh")
			dsn := pg.DSN[:cut] + "/" + db + pg.DSN[cut+len("/toolmesh"):]
			return fmt.Sprintf("journal: {driver: postgres, dsn: %q, lease_ttl: 2s, resume_grace: 10s, snapshot_every: 4}\n", dsn), func() (runlog.Store, error) {
				return runlog.OpenPostgres(context.Background(), dsn)
			}
		}})
	} else {
		t.Logf("PostgreSQL is not installed: SQLite only (%v)", err)
	}

	// The uninterrupted run: the requests every crashed run must repeat.
	base := runCase(t, stores[0], nil, nil)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases(timings, st.name == "sqlite") {
				t.Run(c.String(), func(t *testing.T) { runCase(t, st, c, base) })
			}
		})
	}
}

// outcome is what a case saw, for the checks and for the cases after the first.
type outcome struct {
	asks []ask
}

// runCase runs journey on st, killing the orchestrator at each of kills, and checks the
// invariants; with base nil it runs without kills and returns what the model saw.
func runCase(t *testing.T, st store, kills crashCase, base *outcome) *outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	md := startModel(t)
	journalCfg, openJournal := st.config(t)
	cfg := writeCaseConfig(t, dir, md, journalCfg)
	addr := freeAddr(t)
	o := &orchestrator{t: t, cfg: cfg, addr: addr}
	next := ""
	if len(kills) > 0 {
		next = kills[0].env()
	}
	o.start(next)
	defer o.stop()
	effects := filepath.Join(dir, "effects.db")
	delay := callDelay
	if kills.fast() {
		delay = 0
	}
	w, err := harness.StartWorker("worker", "worker-1", "payments,math", addr, nil,
		"--payments-db", effects, "--reconnect-min", "20ms", "--reconnect-max", "200ms", "--delay", delay.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(10 * time.Second) }()
	if err := harness.WaitWorkers(ctx, o.client(), "worker-1"); err != nil {
		t.Fatalf("the worker did not register: %v\n%s", err, o.output())
	}

	run := startCaseRun(ctx, o)
	killAtEach(ctx, t, o, w, md, kills, run)
	evs := watchToEnd(ctx, t, o, run)
	out := &outcome{asks: md.requests()}
	c := checker{t: t, o: o}
	c.ended(ctx, caseRunID, evs)
	c.sameEvents(run.seen, evs)
	rec := c.journal(openJournal, caseRunID)
	if base == nil && rec.snapshots == 0 {
		t.Error("the uninterrupted run's journal holds no snapshot: no resume would read from one")
	}
	c.model(out.asks, rec, base)
	c.calls(evs, w.Lines(), effects)
	c.dispatchedFirst(effects, rec)
	if t.Failed() {
		t.Logf("---- orchestrator ----\n%s\n---- worker ----\n%s", o.output(), w.Output())
	}
	return out
}

// caseRunID is the id of the run every case drives.
const caseRunID = "crash-run"

// writeCaseConfig writes the orchestrator's configuration for a case, with the model md
// and the journal section journalCfg, in dir and returns its path.
func writeCaseConfig(t *testing.T, dir string, md *model, journalCfg string) string {
	t.Helper()
	cfg := filepath.Join(dir, "orchestrator.yaml")
	if err := os.WriteFile(cfg, []byte(`
provider: {name: openai, openai: {base_url: `+strconv.Quote(md.url())+`, api_key: crash-key, default_model: gpt-crash, max_retries: 0}}
registry: {heartbeat_interval: 500ms, lease_ttl: 3s, grace_period: 1s, readiness_grace: 5s}
`+journalCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// caseRun is the client's first stream of a case's run: the events it saw, and its end
// (nil, or the error that broke it) once it ends.
type caseRun struct {
	seen []*toolpb.RunResponse
	done chan error
}

// startCaseRun starts the detached run on o in the background, collecting the events
// its stream sees.
func startCaseRun(ctx context.Context, o *orchestrator) *caseRun {
	run := &caseRun{done: make(chan error, 1)}
	go func() {
		req := &toolpb.RunRequest{RunId: caseRunID, Prompt: "Pay and add.", ToolGroups: []string{"payments"}, Tools: []string{"add"}, Detached: true}
		var err error
		for ev, e := range o.client().Run(ctx, req) {
			if e != nil {
				err = e
				break
			}
			run.seen = append(run.seen, ev)
		}
		run.done <- err
	}()
	return run
}

// killAtEach waits for the orchestrator to die at each of kills (sending the signal
// itself for the kills during calls) and starts it again, armed with the next; with no
// kills it waits for the run's stream to end without an error.
func killAtEach(ctx context.Context, t *testing.T, o *orchestrator, w *harness.Proc, md *model, kills crashCase, run *caseRun) {
	t.Helper()
	for i := range kills {
		switch kills[i].point {
		case afterEffect:
			seen := 0
			if _, err := w.WaitLine(ctx, func(line string) bool {
				if strings.Contains(line, examplegroups.EffectLog) {
					seen++
				}
				return seen == kills[i].nth
			}); err != nil {
				t.Fatalf("the worker did not apply payment %d: %v", kills[i].nth, err)
			}
			_ = o.p.Kill()
		case duringCall:
			md.waitTurn(ctx, kills[i].nth, 0)
			time.Sleep(callDelay / 3) // the calls wait at the worker
			_ = o.p.Kill()
		case duringResume:
			if _, err := o.p.WaitLog(ctx, "resuming a run"); err != nil {
				t.Fatalf("the run was not resumed: %v\n%s", err, o.output())
			}
			time.Sleep(callDelay / 2)
			_ = o.p.Kill()
		}
		if err := o.p.Wait(60 * time.Second); err == nil || !o.p.Exited() {
			t.Fatalf("the orchestrator did not die at %s (%v)\n%s", kills[i].env(), err, o.output())
		}
		if i == 0 {
			<-run.done // the client's stream broke with the process
		}
		next := ""
		if i+1 < len(kills) {
			next = kills[i+1].env()
		}
		o.start(next)
	}
	if len(kills) == 0 {
		if err := <-run.done; err != nil {
			t.Fatalf("the run: %v\n%s", err, o.output())
		}
	}
}

// watchToEnd watches the run from its first event to its end and returns its events.
func watchToEnd(ctx context.Context, t *testing.T, o *orchestrator, run *caseRun) []*toolpb.RunResponse {
	t.Helper()
	// The run ends: watch it from its first event. A run the orchestrator died creating
	// before anything of it was acknowledged (the client saw no event) is not in the
	// journal: the client starts it again.
	var evs []*toolpb.RunResponse
	retried := false
	for {
		evs = evs[:0]
		var err error
		for ev, e := range o.client().Watch(ctx, caseRunID, 0) {
			if e != nil {
				err = e
				break
			}
			evs = append(evs, ev)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("watching the run: %v\n%s", err, o.output())
		}
		if status.Code(err) == codes.NotFound && len(run.seen) == 0 && !retried {
			retried = true
			if err := harness.WaitWorkers(ctx, o.client(), "worker-1"); err != nil {
				t.Fatalf("the worker did not register again: %v\n%s", err, o.output())
			}
			req := &toolpb.RunRequest{RunId: caseRunID, Prompt: "Pay and add.", ToolGroups: []string{"payments"}, Tools: []string{"add"}, Detached: true}
			for _, e := range o.client().Run(ctx, req) {
				if e != nil {
					t.Fatalf("starting the run again: %v\n%s", e, o.output())
				}
			}
			continue
		}
		time.Sleep(200 * time.Millisecond) // not resumed yet
	}
	return evs
}

// callDelay is what the worker adds to every call.
const callDelay = 60 * time.Millisecond

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// orchestrator is the orchestrator process of a case, started again after each kill on
// the same address.
type orchestrator struct {
	t       *testing.T
	cfg     string
	addr    string
	p       *harness.Proc
	c       *client.Client
	outputs []string
}

func (o *orchestrator) start(failpointSpec string) {
	o.t.Helper()
	if o.p != nil {
		o.outputs = append(o.outputs, o.p.Output())
	}
	bin, err := harness.Bin("orchestrator")
	if err != nil {
		o.t.Fatal(err)
	}
	env := append(os.Environ(), "TOOLMESH_FAILPOINT="+failpointSpec, "OPENAI_API_KEY=", "ANTHROPIC_API_KEY=")
	o.p, err = harness.StartWith("orchestrator", bin, harness.Options{Env: env},
		"--listen", o.addr, "--log-format", "json", "--config", o.cfg)
	if err != nil {
		o.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = o.p.WaitLog(ctx, "orchestrator serving")
	cancel()
	if err != nil {
		if !o.p.Exited() {
			o.t.Fatalf("the orchestrator did not start: %v\n%s", err, o.p.Output())
		}
		// The failpoint may kill it while it resumes, before it serves: the caller starts
		// it again with the next kill (its exit is the kill).
		if !strings.Contains(failpointSpec, "resume") && !strings.Contains(failpointSpec, "replay") && !strings.Contains(failpointSpec, "commit") {
			o.t.Fatalf("the orchestrator died at start: %v\n%s", err, o.p.Output())
		}
		return
	}
	if o.c != nil {
		_ = o.c.Close()
	}
	o.c, err = client.Dial(o.addr, insecure.NewCredentials())
	if err != nil {
		o.t.Fatal(err)
	}
}

func (o *orchestrator) client() *client.Client { return o.c }

func (o *orchestrator) output() string {
	return strings.Join(append(slices.Clone(o.outputs), o.p.Output()), "\n---- restarted ----\n")
}

func (o *orchestrator) stop() {
	if o.c != nil {
		_ = o.c.Close()
	}
	_ = o.p.Stop(20 * time.Second)
}

// checker checks a case's invariants.
type checker struct {
	t *testing.T
	o *orchestrator
}

// ended: the run ended, and GetRun says what its last event says.
func (c checker) ended(ctx context.Context, runID string, evs []*toolpb.RunResponse) {
	c.t.Helper()
	if len(evs) == 0 {
		c.t.Fatal("the run has no events")
	}
	last := evs[len(evs)-1]
	final := last.GetFinalResult()
	if final == nil {
		c.t.Fatalf("the run's last event is %v, not its answer", last)
	}
	snap, err := c.o.client().GetRun(ctx, runID)
	if err != nil {
		c.t.Fatalf("GetRun: %v", err)
	}
	if snap.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || snap.GetFinalText() != final.GetText() {
		c.t.Errorf("GetRun: %s %q; the last event: %q", snap.GetState(), snap.GetFinalText(), final.GetText())
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].GetSequence() <= evs[i-1].GetSequence() {
			c.t.Errorf("event %d has sequence %d after %d", i, evs[i].GetSequence(), evs[i-1].GetSequence())
		}
	}
}

// sameEvents: every event the client saw before a kill is in the journal, the same.
func (c checker) sameEvents(seen, evs []*toolpb.RunResponse) {
	c.t.Helper()
	bySeq := map[int64]*toolpb.RunResponse{}
	for _, ev := range evs {
		bySeq[ev.GetSequence()] = ev
	}
	for _, ev := range seen {
		got, ok := bySeq[ev.GetSequence()]
		switch {
		case !ok:
			c.t.Errorf("the client saw event %d before the kill (%v); the journal does not have it", ev.GetSequence(), ev)
		case !proto.Equal(got, ev):
			c.t.Errorf("event %d: the client saw %v before the kill, the journal has %v", ev.GetSequence(), ev, got)
		}
	}
}

// journaled is what the journal recorded of the run's model steps: by turn, the model
// that answered (unique to a request).
type journaled struct {
	answeredBy map[int]string
	// keys are the idempotency keys of the journal's dispatches.
	keys map[string]bool
	// snapshots counts the snapshot records (journal.snapshot_every is 4 here, so that
	// resumes read from one at most points).
	snapshots int
}

func (c checker) journal(open func() (runlog.Store, error), runID string) journaled {
	c.t.Helper()
	s, err := open()
	if err != nil {
		c.t.Fatalf("opening the journal: %v", err)
	}
	defer func() { _ = s.Close() }()
	recs, err := s.Read(context.Background(), runID, 0, 0, runlog.KindModel)
	if err != nil {
		c.t.Fatalf("reading the journal: %v", err)
	}
	j := journaled{answeredBy: map[int]string{}}
	snaps, err := s.Read(context.Background(), runID, 0, 0, runlog.KindSnapshot)
	if err != nil {
		c.t.Fatalf("reading the journal: %v", err)
	}
	j.snapshots = len(snaps)
	dispatches, err := s.Read(context.Background(), runID, 0, 0, runlog.KindDispatch)
	if err != nil {
		c.t.Fatalf("reading the journal: %v", err)
	}
	j.keys = map[string]bool{}
	for _, r := range dispatches {
		var d struct {
			Key string `json:"idempotency_key"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil || d.Key == "" {
			c.t.Errorf("dispatch record %d has no idempotency key (%v): %s", r.Seq, err, r.Data)
		}
		j.keys[d.Key] = true
	}
	for i, r := range recs {
		// A model record: {"key":"<loop>/<n>","response":{...,"Model":"openai/gpt-crash-<k>"}}.
		s := string(r.Data)
		at := strings.Index(s, "gpt-crash-")
		if at < 0 {
			c.t.Errorf("model record %d names no answer: %s", r.Seq, s)
			continue
		}
		end := at + len("gpt-crash-")
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		j.answeredBy[i+1] = s[at:end]
	}
	return j
}

// dispatchedFirst: every payment took effect under the idempotency key of a dispatch in
// the journal. A call leaves only once its dispatch is committed, and with it the model's
// answer that asked for it: a call whose dispatch a crash lost took effect for a step the
// resumed run asks the model again, whose new call ids make new keys.
func (c checker) dispatchedFirst(effects string, j journaled) {
	c.t.Helper()
	db, err := sql.Open("sqlite", effects)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.Query(`SELECT tool, key FROM effects`)
	if err != nil {
		c.t.Fatalf("reading the effects: %v", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var tool, key string
		if err := rows.Scan(&tool, &key); err != nil {
			c.t.Fatal(err)
		}
		if !j.keys[key] {
			c.t.Errorf("%s took effect under key %s, which no dispatch in the journal has", tool, key)
		}
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
}

// model: no recorded step asked again; every request the one the uninterrupted run sent.
func (c checker) model(asks []ask, j journaled, base *outcome) {
	c.t.Helper()
	byTurn := map[int][]ask{}
	for _, a := range asks {
		byTurn[a.turn] = append(byTurn[a.turn], a)
	}
	for turn, as := range byTurn {
		rec, ok := j.answeredBy[turn]
		if !ok {
			c.t.Errorf("turn %d was asked %d times; the journal has no answer to it", turn, len(as))
			continue
		}
		recorded := false
		for _, a := range as {
			if recorded {
				c.t.Errorf("turn %d was asked again (%s) after its answer %s was recorded", turn, a.model, rec)
			}
			if a.model == rec {
				recorded = true
			}
		}
		if !recorded {
			c.t.Errorf("turn %d: the journal's answer %s is none the model gave", turn, rec)
		}
		for _, a := range as[1:] {
			if a.digest != as[0].digest {
				c.t.Errorf("turn %d was asked twice with different requests:\n%s\n%s", turn, as[0].body, a.body)
			}
		}
		if base == nil {
			continue
		}
		for _, b := range base.asks {
			if b.turn == turn && b.digest != as[0].digest && !strings.Contains(string(as[0].body), "is unknown") {
				c.t.Errorf("turn %d was asked otherwise than in the uninterrupted run:\n%s\n%s", turn, b.body, as[0].body)
			}
		}
	}
}

// calls: idempotent calls' real results reached the model; no call that is not
// idempotent was sent twice; no effect took place twice.
func (c checker) calls(evs []*toolpb.RunResponse, workerLog []string, effects string) {
	c.t.Helper()
	answer := evs[len(evs)-1].GetFinalResult().GetText()
	for _, want := range []string{"credited 100 cents to alice", "5", "credited 300 cents to carol", "9"} {
		if !strings.Contains(answer, want) {
			c.t.Errorf("the answer %q lacks the idempotent result %q", answer, want)
		}
	}
	for _, who := range []string{"bob", "dave"} {
		real := fmt.Sprintf("charged %d cents to %s", map[string]int{"bob": 200, "dave": 400}[who], who)
		if !strings.Contains(answer, real) && strings.Count(answer, "the outcome of tool 'charge' is unknown") == 0 {
			c.t.Errorf("the answer %q has neither the charge of %s nor its unknown outcome", answer, who)
		}
	}
	for _, l := range workerLog {
		if strings.Contains(l, "answered from the idempotency ledger") && strings.Contains(l, `"tool":"charge"`) {
			c.t.Errorf("a charge was sent again: %s", l)
		}
	}
	db, err := sql.Open("sqlite", effects)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.Query(`SELECT tool, key, COUNT(*) FROM effects GROUP BY tool, key`)
	if err != nil {
		c.t.Fatalf("reading the effects: %v", err)
	}
	defer func() { _ = rows.Close() }()
	n := 0
	for rows.Next() {
		var tool, key string
		var count int
		if err := rows.Scan(&tool, &key, &count); err != nil {
			c.t.Fatal(err)
		}
		n++
		if count != 1 {
			c.t.Errorf("%s took effect %d times under key %s", tool, count, key)
		}
	}
	if n > 4 {
		c.t.Errorf("%d effects; the run makes 4 payments", n)
	}
}
