package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestRenewerKeepsEveryLease: one renewer keeps the leases of many journals alive past
// their time to live, stops renewing a journal once it is closed (its lease then runs
// out), and ends its goroutine when it holds none. It runs in a synctest bubble: the
// renewer's ticks and the test's waits are on the bubble's fake clock.
func TestRenewerKeepsEveryLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() }) // after the journals' (renewedJournals)
		const ttl = 300 * time.Millisecond
		r := newRenewer(ttl)
		js := renewedJournals(t, store, r, ttl, 20)
		time.Sleep(3 * ttl)
		leasesHeld(t, js)
		closed := js[0]
		if err := closed.close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl)
		if run, _ := store.Get(context.Background(), "r0"); run.Until.After(time.Now()) {
			t.Errorf("a closed journal's lease was renewed: until %s", run.Until)
		}
		for _, j := range js[1:] {
			_ = j.close()
		}
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		if running {
			t.Error("the renewer goes on with no journal to renew")
		}
	})
}

// renewedJournals starts n journals of runs r0… in store, whose leases of ttl r renews,
// and closes them when the test ends (a synctest bubble ends once the renewer's goroutine
// has, which it does once it holds no journal).
func renewedJournals(t *testing.T, store runlog.Store, r *renewer, ttl time.Duration, n int) []*journal {
	t.Helper()
	var js []*journal
	t.Cleanup(func() {
		for _, j := range js {
			_ = j.close()
		}
	})
	for i := range n {
		l, err := store.Create(context.Background(), fmt.Sprintf("r%d", i), "me", ttl)
		if err != nil {
			t.Fatal(err)
		}
		j := newJournal(store, r, l, ttl, nil, 1)
		j.start()
		js = append(js, j)
	}
	return js
}

// leasesHeld fails t unless every journal of js holds its lease now, without a failure.
func leasesHeld(t *testing.T, js []*journal) {
	t.Helper()
	for i, j := range js {
		j.mu.Lock()
		until, failed := j.lease.Until, j.failed
		j.mu.Unlock()
		if failed != nil || !until.After(time.Now()) {
			t.Fatalf("journal %d: lease until %s (now %s), failed %v", i, until.Format(time.StampMilli), time.Now().Format(time.StampMilli), failed)
		}
	}
}

// hangingRenewals is a store whose renewals alone hang until release is closed (or
// their context ends), counting those under way; it renews none together (RenewAll).
type hangingRenewals struct {
	runlog.Store
	release chan struct{}
	mu      sync.Mutex
	hanging int
}

func (h *hangingRenewals) RenewAll(_ context.Context, leases []runlog.Lease, _ time.Duration, _ string) []runlog.Renewal {
	return alone(leases)
}

// alone is RenewAll's answer for leases when it renews none of them together: each is
// left to Renew.
func alone(leases []runlog.Lease) []runlog.Renewal {
	out := make([]runlog.Renewal, len(leases))
	for i := range out {
		out[i].Err = runlog.ErrRenewAlone
	}
	return out
}

func (h *hangingRenewals) Renew(ctx context.Context, l runlog.Lease, ttl time.Duration) (runlog.Lease, error) {
	h.mu.Lock()
	h.hanging++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.hanging--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return h.Store.Renew(ctx, l, ttl)
	case <-ctx.Done():
		return runlog.Lease{}, ctx.Err()
	}
}

// TestRenewerGoroutinesAreBounded: a tick renews many leases with at most renewParallel
// goroutines, however many runs are open, even while the store hangs on each renewed
// alone: not one goroutine per run waiting for its turn, whose stacks a process keeps
// once they are gone.
func TestRenewerGoroutinesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mem.Close() }) // after the journals' (renewedJournals)
		store := &hangingRenewals{Store: mem, release: make(chan struct{})}
		const ttl = 3 * time.Second
		const runs = 4 * renewParallel
		r := newRenewer(ttl)
		js := renewedJournals(t, store, r, ttl, runs)
		time.Sleep(ttl/3 + time.Millisecond) // the first tick, and its renewals hang
		synctest.Wait()
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		renewing := 0 // goroutines running the renewer's code, its loop aside
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, line := range strings.Split(g, "\n") {
				if strings.Contains(line, "run.(*renewer).") && !strings.HasPrefix(line, "created by") && !strings.Contains(line, "run.(*renewer).loop(") {
					renewing++
					break
				}
			}
		}
		store.mu.Lock()
		hanging := store.hanging
		store.mu.Unlock()
		if renewing > renewParallel || hanging != renewParallel {
			t.Errorf("%d runs: %d goroutines of the renewer besides its loop, %d renewals under way; want at most %d and %d", runs, renewing, hanging, renewParallel, renewParallel)
		}
		close(store.release)
		// Past the leases' first time to live: only renewals after the first tick (the
		// queue drained, the next ticks) keep them.
		time.Sleep(ttl)
		leasesHeld(t, js)
	})
}

// TestOfferedRoles: the groups a journaled run records the versions of are its required
// groups, its own and the config's defaults — a run offered only required groups is held
// to their versions too when another orchestrator takes it over.
func TestOfferedRoles(t *testing.T) {
	got := offeredRoles(Request{Required: []Requirement{{Role: "payments"}}, Groups: []string{"math"}}, []string{"text"})
	if fmt.Sprint(got) != "[payments math text]" {
		t.Errorf("offeredRoles = %v", got)
	}
}

// hangingStore is a store whose renewals of the runs in hang block until they time out,
// or until release is closed. It renews the others together, and leaves those to Renew
// (as PostgreSQL's store leaves the runs whose rows another transaction holds).
type hangingStore struct {
	runlog.Store
	hang    map[string]bool
	release chan struct{}
}

func (s hangingStore) RenewAll(ctx context.Context, leases []runlog.Lease, ttl time.Duration, key string) []runlog.Renewal {
	var healthy []runlog.Lease
	var at []int
	for i, l := range leases {
		if !s.hang[l.RunID] {
			healthy = append(healthy, l)
			at = append(at, i)
		}
	}
	out := alone(leases)
	for k, r := range s.Store.RenewAll(ctx, healthy, ttl, key) {
		out[at[k]] = r
	}
	return out
}

func (s hangingStore) Renew(ctx context.Context, l runlog.Lease, ttl time.Duration) (runlog.Lease, error) {
	if s.hang[l.RunID] {
		select {
		case <-ctx.Done():
			return runlog.Lease{}, ctx.Err()
		case <-s.release:
			return runlog.Lease{}, errors.New("released")
		}
	}
	return s.Store.Renew(ctx, l, ttl)
}

// TestRenewerOutlivesHangingRenewals: many renewals that hang until they time out do not
// hold the others back: the healthy journals' leases never run out. It runs in a synctest
// bubble: the hanging renewals' timeouts, the renewer's ticks and the test's checks of
// the leases every 50 ms are on the bubble's fake clock.
func TestRenewerOutlivesHangingRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = mem.Close() }()
		const ttl = time.Second
		store := hangingStore{Store: mem, hang: map[string]bool{}, release: make(chan struct{})}
		r := newRenewer(ttl)
		var healthy, all []*journal
		defer func() {
			// A close waits for its journal's renewal under way, on a mutex, which does not
			// let the bubble's clock advance to the renewal's timeout: the hanging renewals
			// end at once from here on.
			close(store.release)
			var wg sync.WaitGroup
			for _, j := range all {
				wg.Go(func() { _ = j.close() }) // each waits for its renewal under way
			}
			wg.Wait()
		}()
		for i := range 4 * renewParallel {
			id := fmt.Sprintf("r%d", i)
			l, err := mem.Create(context.Background(), id, "me", time.Hour) // the hanging ones' leases never run out
			if err != nil {
				t.Fatal(err)
			}
			hung := i < 3*renewParallel
			if hung {
				store.hang[id] = true
			} else if l, err = mem.Renew(context.Background(), l, ttl); err != nil {
				t.Fatal(err)
			}
			j := newJournal(store, r, l, ttl, nil, 1)
			j.start()
			all = append(all, j)
			if !hung {
				healthy = append(healthy, j)
			}
		}
		for deadline := time.Now().Add(3 * ttl); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for i, j := range healthy {
				j.mu.Lock()
				until, failed := j.lease.Until, j.failed
				j.mu.Unlock()
				if failed != nil || time.Now().After(until) {
					t.Fatalf("healthy journal %d: its lease ran out (until %s), failed %v", i, until.Format(time.StampMilli), failed)
				}
			}
		}
	})
}

type groupedTool struct {
	tool.Tool
	group string
}

func (g groupedTool) Group() string { return g.group }

// TestGroupOfSeesThroughWrappers: a worker's or an MCP server's tool is known by its
// group through any wrappers (so a tenant's tool grant applies to an MCP tool a facade
// adds, as to a worker's); the orchestrator's own tools have none.
func TestGroupOfSeesThroughWrappers(t *testing.T) {
	base := tool.New("docs_read", "Read", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("x"), nil })
	wrapped := tool.WithDescription(groupedTool{Tool: base, group: "docs"}, "Read the docs")
	if g, ok := groupOf(wrapped); !ok || g != "docs" {
		t.Errorf("groupOf(a wrapped MCP tool) = %q, %v", g, ok)
	}
	if _, ok := groupOf(base); ok {
		t.Error("an orchestrator's own tool has a group")
	}
}

// countingRenewals counts a store's renewals: calls of RenewAll and the leases in each,
// and of Renew and Decision.
type countingRenewals struct {
	runlog.Store
	mu                      sync.Mutex
	batches                 []int
	renewals, decisionsRead int
}

func (c *countingRenewals) RenewAll(ctx context.Context, leases []runlog.Lease, ttl time.Duration, key string) []runlog.Renewal {
	c.mu.Lock()
	c.batches = append(c.batches, len(leases))
	c.mu.Unlock()
	return c.Store.RenewAll(ctx, leases, ttl, key)
}

func (c *countingRenewals) Renew(ctx context.Context, l runlog.Lease, ttl time.Duration) (runlog.Lease, error) {
	c.mu.Lock()
	c.renewals++
	c.mu.Unlock()
	return c.Store.Renew(ctx, l, ttl)
}

func (c *countingRenewals) Decision(ctx context.Context, runID, key string) (runlog.Decision, bool, error) {
	c.mu.Lock()
	c.decisionsRead++
	c.mu.Unlock()
	return c.Store.Decision(ctx, runID, key)
}

// TestRenewerRenewsTogether: a tick renews the leases of many runs a batch of
// renewBatch at a time, with the requests to cancel them read in the same calls — a few
// store calls where each run used to cost two — and a run asked to cancel hears of it.
func TestRenewerRenewsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mem.Close() }) // after the journals' (renewedJournals)
		store := &countingRenewals{Store: mem}
		const ttl = 3 * time.Second
		const runs = 2*renewBatch + 88
		r := newRenewer(ttl)
		js := renewedJournals(t, store, r, ttl, runs)
		cancelled := make(chan string, 1)
		js[7].setOnCancel(func(reason string) {
			select {
			case cancelled <- reason: // heard at every tick: the first is kept
			default:
			}
		})
		if err := mem.Decide(context.Background(), "r7", cancelKey, runlog.Decision{Reason: "asked on another replica", By: "o2"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl/3 + time.Millisecond) // the first tick
		synctest.Wait()
		store.mu.Lock()
		batches, renewals, decisions := slices.Clone(store.batches), store.renewals, store.decisionsRead
		store.mu.Unlock()
		slices.Sort(batches)
		if fmt.Sprint(batches) != fmt.Sprint([]int{88, renewBatch, renewBatch}) || renewals != 0 || decisions != 0 {
			t.Errorf("a tick of %d runs: RenewAll of %v leases, %d renewals alone, %d decisions read; want [88 %d %d], 0, 0", runs, batches, renewals, decisions, renewBatch, renewBatch)
		}
		select {
		case reason := <-cancelled:
			if reason != "asked on another replica" {
				t.Errorf("the cancel's reason: %q", reason)
			}
		default:
			t.Error("the run asked to cancel did not hear of it")
		}
		time.Sleep(ttl) // past the leases' first time to live
		leasesHeld(t, js)
	})
}

// TestCallBound: the journals' store calls share one bounding context, replaced once
// less than the bound is left of it: each call has between the bound and an eighth more
// (a hung call gives up about when the lease it was made under ran out, as it did with
// a context of its own).
func TestCallBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := callBound{d: time.Second}
		first := b.get()
		for range 25 {
			ctx := b.get()
			deadline, ok := ctx.Deadline()
			if left := time.Until(deadline); !ok || left < time.Second || left > 1125*time.Millisecond || ctx.Err() != nil {
				t.Fatalf("a call's context: %s left (deadline %v), err %v", left, ok, ctx.Err())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if first.Err() == nil {
			t.Error("the first context did not end at its deadline")
		}
		if a, b := b.get(), b.get(); a != b {
			t.Error("two calls at once got contexts of their own")
		}
	})
}

// TestCallBoundAfterAWait: a call that waited for the bound's lock (another caller held
// it, or the process was stopped) gets the whole bound from when it has the lock, not
// from when it asked. It runs on the real clock: a goroutine waiting on a mutex does not
// let a synctest bubble's clock advance.
func TestCallBoundAfterAWait(t *testing.T) {
	b := callBound{d: time.Second}
	_ = b.get()
	time.Sleep(100 * time.Millisecond)
	b.mu.Lock()
	got := make(chan context.Context)
	go func() { got <- b.get() }()
	time.Sleep(500 * time.Millisecond)
	b.mu.Unlock()
	ctx := <-got
	deadline, _ := ctx.Deadline()
	if left := time.Until(deadline); left < 900*time.Millisecond {
		t.Errorf("a call that waited 500 ms for the lock got a context with %s left, want about a second", left)
	}
}

// TestCallBoundOfCenturies: a bound so long that an eighth more overflows still bounds
// nothing short (every call failed at once).
func TestCallBoundOfCenturies(t *testing.T) {
	b := callBound{d: time.Duration(math.MaxInt64/2 + 1)}
	if err := b.get().Err(); err != nil {
		t.Errorf("a bound of %s: %v", b.d, err)
	}
}
