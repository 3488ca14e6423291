package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
)

// rvModel answers "done" at once, or blocks while block is set.
type rvModel struct {
	block chan struct{}
	calls atomic.Int32
}

func (m *rvModel) Name() string { return "rv" }
func (m *rvModel) Stream(ctx context.Context, _ *llm.Request) iter.Seq2[llm.Chunk, error] {
	m.calls.Add(1)
	return func(yield func(llm.Chunk, error) bool) {
		if m.block != nil {
			select {
			case <-m.block:
			case <-ctx.Done():
				yield(llm.Chunk{}, ctx.Err())
				return
			}
		}
		yield(llm.Chunk{Done: &llm.Response{Text: "done"}}, nil)
	}
}

// rvCodec turns any journaled request into a prompt, asking for groups.
type rvCodec struct{ groups []string }

func (rvCodec) AppendEvent(dst []byte, _ Event) ([]byte, bool) { return append(dst, `{}`...), true }
func (c rvCodec) Request(json.RawMessage) (Request, error) {
	return Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}, Groups: c.groups}, nil
}

func rvService(t *testing.T, store runlog.Store, model llm.Provider, codec Codec, configure func(*config.Config)) *Service {
	t.Helper()
	cfg := config.Default()
	if configure != nil {
		configure(&cfg)
	}
	rt := router.New(router.Options{GracePeriod: time.Second})
	t.Cleanup(rt.Close)
	s, err := New(Options{Router: rt, Providers: map[string]llm.Provider{"rv": model}, DefaultProvider: "rv", Config: cfg,
		Journal: store, Codec: codec, Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// orphan puts a run in the journal that owner drove and stopped renewing.
func orphan(t *testing.T, store runlog.Store, id, owner string) {
	t.Helper()
	ctx := context.Background()
	l, err := store.Create(ctx, id, owner, -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(requestRecord{RunID: id, LoopID: "loop_" + id, Started: time.Now(), Wire: json.RawMessage(`{}`)})
	if err := store.Append(ctx, l, []runlog.Record{{Seq: 1, Kind: runlog.KindRequest, Data: data}}); err != nil {
		t.Fatal(err)
	}
}

func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// A run taken over while this orchestrator runs its maximum of runs: launch refuses it
// (ErrFull) before the journal starts, and resume's j.close() waits for a renewal
// goroutine that was never started. The test runs in a synctest bubble: once every
// goroutine in it is blocked, the busy run waits for its model, and later whatever the
// resume started has gone as far as it can go, so a goroutine still in journal.close is
// blocked there for good.
func TestResumeWhenFullLeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		model := &rvModel{block: make(chan struct{})}
		s := rvService(t, store, model, rvCodec{}, func(c *config.Config) { c.Loop.MaxConcurrentRuns = 1 })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		busy := make(chan struct{})
		go func() {
			defer close(busy)
			_, _ = s.Run(ctx, Request{ID: "busy", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil)
		}()
		synctest.Wait()
		if model.calls.Load() == 0 {
			t.Fatal("the busy run is blocked before it asked its model")
		}
		orphan(t, store, "orphan", "other")
		n, err := s.Resume(context.Background())
		if n != 0 || err != nil {
			t.Errorf("Resume with no room for another run: %d, %v; want 0 runs taken, no error", n, err)
		}
		synctest.Wait()
		if g := goroutinesIn("(*journal).close"); g > 0 {
			t.Errorf("%d goroutine(s) blocked for good in journal.close (resume of a run refused with ErrFull)", g)
		}
		// Refused for want of room, the orphan stays as it was, for another to take.
		if r, err := store.Get(context.Background(), "orphan"); err != nil || r.State != runlog.StateRunning || r.Owner != "other" || r.Epoch != 1 {
			t.Errorf("the orphan in the journal: %s, owner %s, epoch %d, %v; want running, other's, epoch 1", r.State, r.Owner, r.Epoch, err)
		}
		close(model.block)
		<-busy
	})
}

// A run taken over waits up to resume_grace for its groups; meanwhile its lease is not
// renewed and Maintain takes it again (same owner) every half lease: each resume is
// fenced by the next, and the run never goes on. The test runs in a synctest bubble:
// the lease, the grace, Maintain's ticks and the test's checks of the run every 50 ms
// are on the bubble's fake clock.
func TestResumeLivelock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		model := &rvModel{}
		s := rvService(t, store, model, rvCodec{groups: []string{"nobody-serves-this"}}, func(c *config.Config) {
			c.Journal.LeaseTTL = config.Duration(400 * time.Millisecond)
			c.Journal.ResumeGrace = config.Duration(1500 * time.Millisecond)
		})
		orphan(t, store, "r-grace", "me") // this orchestrator restarted
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := s.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		go s.Maintain(ctx)
		deadline := time.Now().Add(8 * time.Second)
		var r runlog.Run
		for time.Now().Before(deadline) {
			r, _ = store.Get(ctx, "r-grace")
			if r.State.Terminal() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !r.State.Terminal() {
			t.Errorf("a run that needs 1.5s of grace and one model call is still %s after 8s, at epoch %d (%d model calls, %d resumes waiting in prepare)",
				r.State, r.Epoch, model.calls.Load(), goroutinesIn("prepareResumed"))
		}

		cancel()
		s.Shutdown(context.Background())
		// On a failure, resumes may still wait for the run's groups: they give up at the
		// end of their grace, refused by the service that shut down, and the bubble ends
		// once they have.
		for end := time.Now().Add(time.Minute); goroutinesIn("(*Service).resume(") > 0 && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// flush fails (a record over the limit) while close waits for it: flush clears flushing
// without a Broadcast after fail's, and close can wait for good. The tries run in a
// synctest bubble: in each, close is waiting for the flush before the store's append
// fails, and once every goroutine in the bubble is blocked after that, a close that has
// not returned waits for good.
func TestCloseAfterFlushFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, lease := memJournal(t)
		// The window for the hang is narrow: many tries (each is cheap in the bubble).
		const tries = 3000
		hung := 0
		for range tries {
			bs := &blockingStore{Store: store, release: make(chan struct{}), entered: make(chan struct{}, 1)}
			j := newJournal(bs, newRenewer(time.Hour), lease, time.Hour, nil, 1)
			closed := make(chan struct{})
			j.stop = func(error) {}
			j.deliver = nil
			j.start()
			_, _ = j.add(runlog.KindEvent, json.RawMessage(`{}`), nil, false)
			<-bs.entered
			go func() { _ = j.close(); close(closed) }()
			synctest.Wait() // close waits for flushing
			close(bs.release)
			synctest.Wait()
			select {
			case <-closed:
			default:
				hung++
				// Wake it, so that the try leaves no goroutine behind.
				j.mu.Lock()
				j.cond.Broadcast()
				j.mu.Unlock()
				<-closed
			}
		}
		if hung > 0 {
			t.Errorf("journal.close hung in %d of %d tries after the flush failed", hung, tries)
		}
	})
}

type blockingStore struct {
	runlog.Store
	release chan struct{}
	entered chan struct{}
}

func (b *blockingStore) Append(ctx context.Context, l runlog.Lease, recs []runlog.Record) error {
	b.entered <- struct{}{}
	<-b.release
	return errors.Join(runlog.ErrInvalid, errors.New("too big"))
}

// passStore tells when Maintain has made a pass over the journal: it prunes at the end
// of each, after it took over what it would.
type passStore struct {
	runlog.Store
	passes atomic.Int64
	pruned chan struct{} // a token after each prune, for the test to count them
}

func (p *passStore) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := p.Store.Prune(ctx, before, limit)
	p.passes.Add(1)
	select {
	case p.pruned <- struct{}{}:
	default: // a token is waiting already: Maintain never waits for the test
	}
	return n, err
}

// Volatile is the wrapped store's: the service treats the journal as it would without
// the wrapper.
func (p *passStore) Volatile() bool {
	v, ok := p.Store.(interface{ Volatile() bool })
	return ok && v.Volatile()
}

// waitPasses waits until Maintain has made n passes over the journal from start on.
func (p *passStore) waitPasses(t *testing.T, start, n int64) {
	t.Helper()
	for p.passes.Load() < start+n {
		select {
		case <-p.pruned:
		case <-time.After(10 * time.Second):
			t.Fatalf("Maintain made %d passes over the journal in 10s, want %d", p.passes.Load()-start, n)
		}
	}
}

// Runs that end while Maintain looks for runs to take over: a run whose record says it
// ended, but which is still finishing its journal, is taken over by its own orchestrator.
// Once the runs have ended, the test lets Maintain make four more passes (three of them
// begun after the last run ended) before it looks at the journal.
func TestMaintainTakesFinishingRuns(t *testing.T) {
	mem, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &passStore{Store: mem, pruned: make(chan struct{}, 1)}
	model := &rvModel{}
	s := rvService(t, store, model, rvCodec{}, func(c *config.Config) {
		c.Journal.LeaseTTL = config.Duration(150 * time.Millisecond)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Maintain(ctx)
	const n = 200
	for i := range n {
		id := "fin-" + string(rune('a'+i/26/26%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26))
		if _, err := s.Run(ctx, Request{ID: id, Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	store.waitPasses(t, store.passes.Load(), 4)
	taken, ends := 0, 0
	runs, _ := store.List(ctx, runlog.Filter{})
	for _, r := range runs {
		if r.Epoch > 1 {
			taken++
			recs, _ := store.Read(ctx, r.ID, 0, 0)
			for _, rec := range recs {
				if rec.Kind == runlog.KindEnd {
					ends++
				}
			}
			t.Errorf("%s, which ended here, was taken over by its own orchestrator: %s, epoch %d, %d records", r.ID, r.State, r.Epoch, r.Records)
		}
	}
	if taken > 0 || model.calls.Load() != int32(n) {
		t.Errorf("%d finished runs taken over (%d end records among them), %d model calls for %d runs, %d goroutines in journal.close",
			taken, ends, model.calls.Load(), n, goroutinesIn("(*journal).close"))
	}
	cancel()
}

// slowStore commits the first append after its caller gave up, as the store's contract
// allows ("the append may still commit").
type slowStore struct {
	runlog.Store
	n atomic.Int32
}

func (s *slowStore) Append(ctx context.Context, l runlog.Lease, recs []runlog.Record) error {
	if s.n.Add(1) == 1 {
		<-ctx.Done()
		_ = s.Store.Append(context.Background(), l, recs) // it committed after all
		return ctx.Err()
	}
	return s.Store.Append(ctx, l, recs)
}

// A commit slower than the journal's per-attempt timeout: the retry finds its own
// records and the journal fails with ErrConflict, stopping a healthy run.
func TestAppendRetryAfterUnknownCommit(t *testing.T) {
	store, lease := memJournal(t)
	ss := &slowStore{Store: store}
	j := newJournal(ss, newRenewer(300*time.Millisecond), lease, 300*time.Millisecond, nil, 1)
	var stopped error
	j.stop = func(err error) { stopped = err }
	j.start()
	_, err := j.add(runlog.KindEvent, json.RawMessage(`{}`), nil, true)
	_ = j.close()
	recs, _ := store.Read(context.Background(), "r1", 0, 0)
	if err != nil || len(recs) != 1 {
		t.Errorf("an append whose first commit's answer was lost: %v, %d records in the store (the run stopped with %v); want it committed once, without error", err, len(recs), stopped)
	}
}

// Maintain prunes the journal's finished runs past journal.retain, and keeps the ones
// still within it and the ones running. The test runs in a synctest bubble: the
// retention, Maintain's ticks and the test's waits are on the bubble's fake clock.
func TestMaintainPrunesPastRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		model := &rvModel{}
		retain := time.Second
		s := rvService(t, store, model, rvCodec{}, func(c *config.Config) {
			c.Journal.LeaseTTL = config.Duration(200 * time.Millisecond)
			c.Journal.Retain = config.Duration(retain)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := s.Run(ctx, Request{ID: "old", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil); err != nil {
			t.Fatal(err)
		}
		live, err := store.Create(ctx, "live", "someone-else", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		_ = live
		time.Sleep(retain)
		if _, err := s.Run(ctx, Request{ID: "new", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil); err != nil {
			t.Fatal(err)
		}
		go s.Maintain(ctx)
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := store.Get(ctx, "old")
			if errors.Is(err, runlog.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run past retention is still in the journal: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, id := range []string{"new", "live"} {
			if _, err := store.Get(ctx, id); err != nil {
				t.Errorf("%s was pruned: %v", id, err)
			}
		}
	})
}

// Pruning keeps up with runs that end faster than a page of them a tick: one tick of
// Maintain prunes every finished run past journal.retain, here over two pages. Before,
// a tick pruned one page (1,000 runs), so at the default lease (a tick every 5 s) a
// journal whose runs ended faster than 200 a second grew without bound. The test runs
// in a synctest bubble: Maintain's tick and the prune's time budget are on its clock,
// which stands still while the prune works, however slow the machine.
func TestPruneKeepsUpWithManyRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := runlog.OpenMemory(context.Background(), runlog.MemoryLimits{FinishedRuns: 10000})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		const runs = runlog.MaxList*2 + 100
		ctx := context.Background()
		for i := range runs {
			l, err := store.Create(ctx, fmt.Sprintf("old-%04d", i), "me", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte(`{}`)})
			if err == nil {
				err = store.Finish(ctx, l, runlog.StateSucceeded)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		s := rvService(t, store, &rvModel{}, rvCodec{}, func(c *config.Config) {
			c.Journal.LeaseTTL = config.Duration(8 * time.Second) // a tick every 4 s
			c.Journal.Retain = config.Duration(time.Millisecond)
		})
		mctx, mcancel := context.WithCancel(ctx)
		go s.Maintain(mctx)
		time.Sleep(5 * time.Second) // one tick, not two
		synctest.Wait()
		left := 0
		for after := ""; ; {
			page, err := store.List(ctx, runlog.Filter{After: after})
			if err != nil {
				t.Fatal(err)
			}
			left += len(page)
			if len(page) < runlog.MaxList {
				break
			}
			after = page[len(page)-1].ID
		}
		if left != 0 {
			t.Errorf("after one tick of Maintain, %d of %d finished runs past journal.retain are left", left, runs)
		}
		mcancel()
		s.Shutdown(context.Background())
	})
}

// A run asked to cancel (CancelRun on a replica that does not drive it) while nobody
// drove it ends cancelled at its first live step when it is taken over: the model is not
// asked again. Before, the request waited for the first renewal of the new lease (a third
// of journal.lease_ttl), and the run went on meanwhile, here to its end.
func TestCancelAskedWhileOrphaned(t *testing.T) {
	for _, name := range []string{"memory", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			store := openStore(t, name)
			model := &rvModel{}
			s := rvService(t, store, model, rvCodec{}, func(c *config.Config) {
				c.Journal.LeaseTTL = config.Duration(3 * time.Second)
			})
			orphan(t, store, "r-c", "other")
			ctx := context.Background()
			// What cancelElsewhere records.
			if err := store.Decide(ctx, "r-c", cancelKey, runlog.Decision{Reason: "stop it", By: "x"}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Resume(ctx); err != nil || n != 1 {
				t.Fatalf("Resume: %d, %v", n, err)
			}
			var r runlog.Run
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if r, _ = store.Get(ctx, "r-c"); r.State.Terminal() {
					break
				}
			}
			if model.calls.Load() != 0 || r.State != runlog.StateCancelled {
				t.Fatalf("the model was asked %d times after the take-over, the run is %s; want 0, cancelled", model.calls.Load(), r.State)
			}
			snap, err := s.Get("r-c")
			if err != nil || snap.Err == nil || !strings.Contains(snap.Err.Error(), "stop it") {
				t.Errorf("Get: %+v, %v; want the cancel's reason", snap, err)
			}
		})
	}
}

// slowCreates is a store whose creations commit slow: the run is in the store once
// delay has passed, whether its caller waited for it or not, as a store may commit a
// write whose caller gave up.
type slowCreates struct {
	runlog.Store
	delay time.Duration
}

func (s slowCreates) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...runlog.Record) (runlog.Lease, error) {
	time.Sleep(s.delay)
	l, err := s.Store.Create(context.WithoutCancel(ctx), runID, owner, ttl, first...)
	if ctx.Err() != nil {
		return runlog.Lease{}, ctx.Err()
	}
	return l, err
}

// A run whose client went away while the store created it is not driven later for
// nobody: the creation's outcome is waited for, and the run, created, ends at once, as
// a run whose client's deadline passed. Before, the client was told the run was refused (the journal unavailable),
// and the run, in the store all the same, was taken over once its lease ran out and
// driven to its end: the model asked, its calls sent.
func TestRunCreatedAfterItsClientLeftIsNotDriven(t *testing.T) {
	mem, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mem.Close() }()
	store := slowCreates{Store: mem, delay: 300 * time.Millisecond}
	model := &rvModel{}
	s := rvService(t, store, model, rvCodec{}, func(c *config.Config) {
		c.Journal.LeaseTTL = config.Duration(time.Second)
	})
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = s.Run(cctx, Request{ID: "left", Messages: []llm.Message{{Role: llm.RoleUser, Text: "pay"}}}, nil)
	ccancel()
	if err == nil {
		t.Fatal("the run succeeded for a client that went away")
	}
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	go s.Maintain(mctx)
	time.Sleep(3 * time.Second) // three lease times: a run left running is taken over
	r, err := mem.Get(context.Background(), "left")
	// It ends as a run whose client's deadline passed does.
	if model.calls.Load() != 0 || (err == nil && (!r.State.Terminal() || r.State == runlog.StateSucceeded)) {
		t.Errorf("a run whose client left while it was created: %d model calls, in the journal %s (%v); want none, and ended unfinished or absent",
			model.calls.Load(), r.State, err)
	}
	mcancel()
	s.Shutdown(context.Background())
}

// lostCreate is a store whose Create commits and then fails, as a connection broken
// after its commit does: the run created, and its creator does not know.
type lostCreate struct{ runlog.Store }

func (s lostCreate) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...runlog.Record) (runlog.Lease, error) {
	if _, err := s.Store.Create(ctx, runID, owner, ttl, first...); err != nil {
		return runlog.Lease{}, err
	}
	return runlog.Lease{}, io.ErrUnexpectedEOF
}

// A run whose creation committed although the store answered with an error, its client
// still there, is not driven later for nobody: the client is told the journal is
// unavailable, and the run ends. Before, only a client that went away had its run ended:
// this one was taken over once its lease ran out and driven to its end, the model asked.
func TestCreationCommittedButRefusedIsNotDriven(t *testing.T) {
	for _, name := range []string{"memory", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			inner := openStore(t, name)
			model := &rvModel{}
			s := rvService(t, lostCreate{inner}, model, rvCodec{}, func(c *config.Config) {
				c.Journal.LeaseTTL = config.Duration(time.Second)
			})
			_, err := s.Run(context.Background(), Request{ID: "refused", Messages: []llm.Message{{Role: llm.RoleUser, Text: "pay"}}}, nil)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Run: %v; want the journal unavailable", err)
			}
			mctx, mcancel := context.WithCancel(context.Background())
			defer mcancel()
			go s.Maintain(mctx)
			time.Sleep(3 * time.Second) // three lease times: a run left running is taken over
			r, err := inner.Get(context.Background(), "refused")
			if model.calls.Load() != 0 || err != nil || r.State != runlog.StateCancelled {
				t.Errorf("a run refused to its client but created: %d model calls, in the journal %s (%v); want none, and cancelled",
					model.calls.Load(), r.State, err)
			}
			mcancel()
			s.Shutdown(context.Background())
		})
	}
}

// lostFinish is a store whose first Finish commits and then answers as a store whose
// caller gave up does: the run ended, and its writer does not know.
type lostFinish struct {
	runlog.Store
	n atomic.Int32
}

func (s *lostFinish) Finish(ctx context.Context, l runlog.Lease, st runlog.State, recs ...runlog.Record) error {
	if s.n.Add(1) == 1 {
		if err := s.Store.Finish(context.WithoutCancel(ctx), l, st, recs...); err != nil {
			return err
		}
		return context.DeadlineExceeded
	}
	return s.Store.Finish(ctx, l, st, recs...)
}

// A run's end that committed although its writer lost the answer is the run's end: the
// retry, which the store refuses (the run has ended), finds it there. Before, the run's
// client was told the orchestrator stopped driving a run, which another would go on
// with, for a run that had succeeded, and never got its end.
func TestFinishWhoseAnswerWasLost(t *testing.T) {
	for _, name := range []string{"memory", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			inner := openStore(t, name)
			store := &lostFinish{Store: inner}
			s := rvService(t, store, &rvModel{}, rvCodec{}, nil)
			res, err := s.Run(context.Background(), Request{ID: "lost-finish", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil)
			if err != nil || res == nil || res.Result == nil || res.Text != "done" {
				t.Fatalf("Run: %+v, %v; want the run's end (the store holds it)", res, err)
			}
			if r, err := inner.Get(context.Background(), "lost-finish"); err != nil || r.State != runlog.StateSucceeded || store.n.Load() != 2 {
				t.Errorf("in the store: %+v, %v, after %d finishes; want succeeded, after 2", r, err, store.n.Load())
			}
		})
	}
}

// openStore opens a journal of the kind name says, memory or sqlite (in a temporary
// directory), closed when the test ends.
func openStore(t *testing.T, name string) runlog.Store {
	t.Helper()
	var store runlog.Store
	var err error
	if name == "memory" {
		store, err = runlog.OpenMemory(context.Background())
	} else {
		store, err = runlog.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// hangingCreates is a store whose creations hang until their caller gives up.
type hangingCreates struct {
	runlog.Store
	entered chan struct{}
}

func (s hangingCreates) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...runlog.Record) (runlog.Lease, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return runlog.Lease{}, ctx.Err()
}

// A creation the store hangs on ends with its client, frees the run's slot, and does
// not hold a shutdown: a creation waited for whatever its client did (an earlier fix of
// runs created after their client left) held all three for two minutes.
func TestHangingCreationEndsWithItsClient(t *testing.T) {
	store := hangingCreates{Store: openStore(t, "memory"), entered: make(chan struct{}, 1)}
	s := rvService(t, store, &rvModel{}, rvCodec{}, func(c *config.Config) { c.Loop.MaxConcurrentRuns = 1 })
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	out := make(chan error, 1)
	go func() {
		_, err := s.Run(cctx, Request{ID: "r1", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil)
		out <- err
	}()
	<-store.entered
	select {
	case err := <-out:
		if err == nil {
			t.Fatal("a run the store never created succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client whose deadline (200 ms) passed still waits for the run's creation 5 s later")
	}
	// Its slot is free: the next run reaches the store.
	go func() {
		_, _ = s.Run(context.Background(), Request{ID: "r2", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}, nil)
	}()
	select {
	case <-store.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the next run did not reach the store: the first's slot is held")
	}
	done := make(chan struct{})
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		s.Shutdown(sctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a shutdown with a 200 ms timeout still waits for a run's creation 10 s later")
	}
}
