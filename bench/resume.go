package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// resumeSteps is how many tool calls each run of the resume measurement makes before the
// crash: its journal then holds the request, resumeSteps model answers, dispatches and
// outcomes, and their events, as a run some way into its work does.
const resumeSteps = 8

// resumeRound is one measurement of a crash and the resume of its runs on one store.
type resumeRound struct {
	Store string `json:"store"`
	Runs  int    `json:"runs"`
	// EventsPerRun is the sequence number of a run's last event the client saw before
	// the crash (the journal holds more records: model answers, dispatches, outcomes).
	EventsPerRun float64 `json:"events_per_run"`
	// OpenSeconds is the time to start the runs and see each reach the model call it
	// waits in.
	OpenSeconds float64 `json:"open_seconds"`
	// ServingSeconds is from the restart (the new process started) to its gRPC server
	// serving; ResumedSeconds to every run ended, each resumed from the journal (its
	// steps replayed, not asked again) and driven to its end by one more model call.
	ServingSeconds float64 `json:"serving_seconds"`
	ResumedSeconds float64 `json:"resumed_seconds"`
}

// resumeScript is the scripted model of the resume measurement: resumeSteps turns of
// one add call, then the last turn. Before the crash the last turn answers after an hour
// (the runs wait in it); after, at once.
func resumeScript(last string) string {
	var b strings.Builder
	b.WriteString("name: resume\nrules:\n")
	for k := 1; k <= resumeSteps; k++ {
		fmt.Fprintf(&b, "  - when: {turn: %d}\n    reply:\n      tool_calls: [{name: add, arguments: {a: %d, b: 1}}]\n", k, k)
	}
	b.WriteString("  - reply:\n" + last)
	return b.String()
}

// measureResume opens n detached runs on a fresh bin/orchestrator journaling in store
// ("sqlite": a data directory; "postgres": dsn), each making resumeSteps tool calls
// (bin/toolworker, math) and then waiting in a model call; once every run waits, it
// kills the orchestrator with SIGKILL, starts another on the same journal and address,
// and times until every run has ended.
func measureResume(ctx context.Context, cfg Config, store, dsn string, n int) (resumeRound, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r := resumeRound{Store: store, Runs: n}
	dir, err := os.MkdirTemp("", "toolmesh-bench-resume-*")
	if err != nil {
		return r, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	files, err := writeResumeFiles(dir, store, dsn, n)
	if err != nil {
		return r, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return r, err
	}
	o := &resumeOrchestrator{bin: cfg.Bins.Orchestrator, addr: addr, conf: files.conf}
	if err := o.start(files.before); err != nil {
		return r, err
	}
	defer func() { o.p.stop(10 * time.Second) }()
	c, err := client.Dial(addr, insecure.NewCredentials())
	if err != nil {
		return r, err
	}
	defer func() { _ = c.Close() }()
	w, err := startProc("toolworker", cfg.Bins.Toolworker, childEnv("OTEL_SDK_DISABLED=true"),
		"--id", "resume-worker", "--groups", "math", "--orchestrator", addr, "--reconnect-min", "20ms", "--reconnect-max", "100ms")
	if err != nil {
		return r, err
	}
	defer w.stop(10 * time.Second)
	if err := harness.WaitWorkers(ctx, c, "resume-worker"); err != nil {
		return r, fmt.Errorf("the worker did not register: %w\n%s", err, o.p.tail())
	}

	t0 := time.Now()
	records, err := openResumeRuns(ctx, c, n)
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, o.p.tail())
	}
	r.OpenSeconds = time.Since(t0).Seconds()
	if err := o.crashAndResume(ctx, c, files.after, n, &r); err != nil {
		return r, err
	}
	r.EventsPerRun = float64(records) / float64(n)
	return r, nil
}

// resumeFiles are the files of a resume measurement: the orchestrator's configuration
// and its model's scripts before and after the crash.
type resumeFiles struct {
	conf, before, after string
}

// writeResumeFiles writes the orchestrator's configuration, journaling in store, and the
// two scripts into dir.
func writeResumeFiles(dir, store, dsn string, n int) (resumeFiles, error) {
	journal := fmt.Sprintf("journal: {data_dir: %q, resume_grace: 1m}\n", filepath.Join(dir, "data"))
	if store == "postgres" {
		journal = fmt.Sprintf("journal: {driver: postgres, dsn: %q, resume_grace: 1m}\n", dsn)
	}
	f := resumeFiles{conf: filepath.Join(dir, "orchestrator.yaml")}
	yaml := fmt.Sprintf("loop:\n  max_concurrent_runs: %d\n  run_timeout: 2h\nregistry: {heartbeat_interval: 500ms, lease_ttl: 3s, grace_period: 1s, readiness_grace: 5s}\n%s", n+100, journal)
	if err := os.WriteFile(f.conf, []byte(yaml), 0o600); err != nil {
		return f, err
	}
	f.before, f.after = filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")
	if err := os.WriteFile(f.before, []byte(resumeScript("      delay: 1h\n      text: late\n")), 0o600); err != nil {
		return f, err
	}
	if err := os.WriteFile(f.after, []byte(resumeScript("      text: done\n")), 0o600); err != nil {
		return f, err
	}
	return f, nil
}

// resumeOrchestrator is the bin/orchestrator of a resume measurement, started again on
// the same journal and address after the crash.
type resumeOrchestrator struct {
	bin, addr, conf string
	p               *proc // the process running now
}

// start starts the orchestrator with its model following script.
func (o *resumeOrchestrator) start(script string) error {
	var err error
	o.p, err = startProc("orchestrator", o.bin, childEnv("OTEL_SDK_DISABLED=true"),
		"--listen", o.addr, "--config", o.conf, "--script", script, "--log-format", "json", "--owner", "bench")
	return err
}

// openResumeRuns opens n detached runs, 64 at a time; each is left once its last tool
// call finished (it then waits in the model call that answers after an hour). It returns
// the sum of the sequence numbers of each run's last event seen.
func openResumeRuns(ctx context.Context, c *client.Client, n int) (int64, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failure error
		records int64
	)
	slots := make(chan struct{}, 64)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			last, err := openResumeRun(ctx, c, i)
			mu.Lock()
			records += last
			if err != nil && failure == nil {
				failure = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return records, failure
}

// openResumeRun opens the i-th detached run and follows it until its last tool call
// finished; it returns the sequence number of the last event seen.
func openResumeRun(ctx context.Context, c *client.Client, i int) (int64, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	req := &toolpb.RunRequest{RunId: fmt.Sprintf("resume-%04d", i), Prompt: "Add, then wait.", Tools: []string{"add"}, Detached: true}
	finished := 0
	var last int64
	var err error
	for ev, e := range c.Run(runCtx, req) {
		if e != nil {
			err = e
			break
		}
		last = ev.GetSequence()
		if ev.GetToolCallFinished() != nil {
			finished++
		}
		if ev.GetFinalResult() != nil || ev.GetError() != nil {
			err = fmt.Errorf("run %s ended before the crash: %v", req.RunId, ev)
			break
		}
		if finished == resumeSteps {
			break
		}
	}
	if err == nil && finished < resumeSteps {
		err = fmt.Errorf("run %s: the stream ended after %d tool calls", req.RunId, finished)
	}
	return last, err
}

// crashAndResume checks that the n runs wait, kills the orchestrator with SIGKILL,
// starts another with the script after, and records in r how long it took to serve and
// to see every run end, each having succeeded.
func (o *resumeOrchestrator) crashAndResume(ctx context.Context, c *client.Client, after string, n int, r *resumeRound) error {
	// Every run's last outcome and its events are committed (a client sees an event only
	// once it is); the model call after it is waiting.
	time.Sleep(200 * time.Millisecond)
	if runs, err := runsIn(ctx, c, toolpb.RunState_RUN_STATE_RUNNING); err != nil || runs != n {
		return fmt.Errorf("before the crash: %d runs running, want %d (%v)", runs, n, err)
	}
	if err := o.p.Kill(); err != nil {
		return err
	}
	_ = o.p.Wait(10 * time.Second)

	t1 := time.Now()
	if err := o.start(after); err != nil {
		return err
	}
	if _, err := o.p.waitJSON(ctx, "orchestrator serving"); err != nil {
		return err
	}
	r.ServingSeconds = time.Since(t1).Seconds()
	for {
		running, err := runsIn(ctx, c, toolpb.RunState_RUN_STATE_RUNNING)
		if err == nil && running == 0 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d runs still running after %s: %w\n%s", running, time.Since(t1).Round(time.Millisecond), ctx.Err(), o.p.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.ResumedSeconds = time.Since(t1).Seconds()
	done, err := runsIn(ctx, c, toolpb.RunState_RUN_STATE_SUCCEEDED)
	if err != nil {
		return err
	}
	if done != n {
		return fmt.Errorf("after the resume %d of %d runs succeeded\n%s", done, n, o.p.tail())
	}
	return nil
}

// runsIn counts the runs ListRuns lists in state.
func runsIn(ctx context.Context, c *client.Client, state toolpb.RunState) (int, error) {
	n := 0
	for token := ""; ; {
		runs, next, err := c.ListRuns(ctx, state, 1000, token)
		if err != nil {
			return n, err
		}
		n += len(runs)
		if next == "" {
			return n, nil
		}
		token = next
	}
}

// measureResumes measures the resume on SQLite and, where it is installed, on a private
// PostgreSQL with its durability defaults (fsync on), a fresh server each time. A failure
// is recorded in rep and its store left out of the round.
func measureResumes(ctx context.Context, cfg Config, rep *Report) []resumeRound {
	var out []resumeRound
	if r, err := measureResume(ctx, cfg, "sqlite", "", cfg.ResumeRuns); err != nil {
		rep.fail("resume on sqlite", err)
	} else {
		out = append(out, r)
	}
	if _, err := harness.PostgresBin(); err != nil {
		return out
	}
	pg, err := harness.StartPostgresWith(ctx, harness.PostgresOptions{Durable: true})
	if err != nil {
		rep.fail("resume on postgres", err)
		return out
	}
	defer pg.Stop()
	if r, err := measureResume(ctx, cfg, "postgres", pg.DSN, cfg.ResumeRuns); err != nil {
		rep.fail("resume on postgres", err)
	} else {
		out = append(out, r)
	}
	return out
}
