package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// With a ledger, a call sent again with the same idempotency key is answered with the
// first answer and the tool runs once, duplicates that arrive at once included; another
// key, or another tool, runs again; without a ledger every call runs.
func TestLedgerAnswersDuplicatesOnce(t *testing.T) {
	var runs atomic.Int64
	// The first charge runs until the four duplicates below have all reached the worker.
	var arrived atomic.Int32
	allArrived := make(chan struct{})
	charge := tool.New("charge", "Charge a card.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		n := runs.Add(1)
		if n == 1 {
			select {
			case <-allArrived:
			case <-ctx.Done():
				t.Error("the duplicates did not all reach the worker while the first ran")
			}
		}
		return tool.Text("charged #" + string(rune('0'+n))), nil
	})
	refund := tool.New("refund", "Refund.", schema.Empty(), func(context.Context, string) (tool.Result, error) { runs.Add(1); return tool.Text("refunded"), nil })
	ledger := NewMemoryLedger(0)
	watch := watchInvoke(func(req *toolpb.InvokeRequest) {
		if req.GetTool() == "charge" && req.GetIdempotencyKey() == "run_1/call_1" && arrived.Add(1) == 4 {
			close(allArrived)
		}
	}, nil)
	w := start(t, Options{Ledger: ledger, ServerOptions: []grpc.ServerOption{watch}}, Group{Role: "pay", Tools: []tool.Tool{charge, refund}})
	c := w.client()
	call := func(name, key string) string {
		resp, err := c.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: name, ArgumentsJson: `{}`, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetText()
	}
	var wg sync.WaitGroup
	answers := make([]string, 4)
	for i := range answers {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = call("charge", "run_1/call_1") }()
	}
	wg.Wait()
	for _, a := range answers {
		if a != "charged #1" {
			t.Errorf("answers %q: want the first answer every time", answers)
			break
		}
	}
	if call("charge", "run_1/call_1") != "charged #1" || runs.Load() != 1 {
		t.Errorf("a later duplicate ran the tool: %d runs", runs.Load())
	}
	if call("charge", "run_1/call_2") != "charged #2" {
		t.Error("another key did not run")
	}
	if call("refund", "run_1/call_1") != "refunded" || runs.Load() != 3 {
		t.Errorf("another tool with the same key: %d runs", runs.Load())
	}
	if ledger.Len() != 3 {
		t.Errorf("the ledger keeps %d answers", ledger.Len())
	}

	plain := start(t, Options{}, Group{Role: "pay", Tools: []tool.Tool{charge}})
	before := runs.Load()
	for range 2 {
		if _, err := plain.client().Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{}`, IdempotencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load()-before != 2 {
		t.Errorf("without a ledger: %d runs, want 2", runs.Load()-before)
	}
}

// The memory ledger forgets answers after their TTL and beyond its size, oldest first.
func TestMemoryLedgerBounds(t *testing.T) {
	m := NewMemoryLedger(2)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	_ = m.Store(ctx, "a", []byte("1"), time.Minute)
	_ = m.Store(ctx, "b", []byte("2"), time.Minute)
	_ = m.Store(ctx, "c", []byte("3"), time.Minute)
	if _, ok, _ := m.Load(ctx, "a"); ok || m.Len() != 2 {
		t.Errorf("the oldest answer is kept beyond the size (%d)", m.Len())
	}
	now = now.Add(2 * time.Minute)
	if _, ok, _ := m.Load(ctx, "b"); ok {
		t.Error("an expired answer is returned")
	}
}

// A call whose caller went away while it ran keeps nothing in the ledger when the tool
// answered with an error: an answer made because the call was cancelled (a tool that
// turns its context's end into an error result) is not the call's outcome. The call
// sent again with the same key runs and gets the tool's real answer. A tool that
// finished its work although the caller left keeps its answer: the effect happened.
func TestLedgerKeepsNoCancellation(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testLedgerKeepsNoCancellation(t, NewMemoryLedger(0)) })
	// A ledger in a shared store refuses what its context's end cuts short, as a
	// database's client does: the answer of a call whose caller left is kept all the same.
	t.Run("shared", func(t *testing.T) { testLedgerKeepsNoCancellation(t, contextLedger{NewMemoryLedger(0)}) })
}

// contextLedger is a ledger that honours its context, as a client of a shared store does.
type contextLedger struct{ *MemoryLedger }

func (l contextLedger) Load(ctx context.Context, key string) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return l.MemoryLedger.Load(ctx, key)
}

func (l contextLedger) Store(ctx context.Context, key string, answer []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.MemoryLedger.Store(ctx, key, answer, ttl)
}

func testLedgerKeepsNoCancellation(t *testing.T, ledger Ledger) {
	var runs atomic.Int64
	started := make(chan struct{}, 4)
	add := tool.New("add", "Add slowly.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		n := runs.Add(1)
		if n == 1 {
			started <- struct{}{}
			<-ctx.Done() // the first attempt is cut short by its caller
			return tool.ErrorWithCode(tool.CodeTimeout, "cancelled while waiting: "+ctx.Err().Error()), nil
		}
		return tool.Text("3"), nil
	})
	stubborn := tool.New("charge", "Charge, whatever the caller does.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		return tool.Text("charged"), nil
	})
	ended := make(chan string, 8) // the idempotency key of each call whose worker side returned
	watch := watchInvoke(nil, func(req *toolpb.InvokeRequest) { ended <- req.GetIdempotencyKey() })
	w := start(t, Options{Ledger: ledger, ServerOptions: []grpc.ServerOption{watch}}, Group{Role: "math", Tools: []tool.Tool{add, stubborn}})
	c := w.client()
	// The worker's side of a cancelled call ends after the caller's: endOf waits until it
	// has, and its key's lock is free again.
	endOf := func(what, key string) {
		t.Helper()
		ctx := testContext(t)
		for {
			select {
			case k := <-ended:
				if k != key {
					continue
				}
				if !w.keys.idle() {
					t.Fatalf("%s returned at the worker, but a call still holds an idempotency key", what)
				}
				return
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	cut := func(name, key string) {
		ctx, cancel := context.WithCancel(testContext(t))
		go func() { <-started; cancel() }()
		if _, err := c.Invoke(ctx, &toolpb.InvokeRequest{Tool: name, ArgumentsJson: `{}`, IdempotencyKey: key}); err == nil {
			t.Fatalf("%s: the cancelled call answered", name)
		}
	}
	cut("add", "run_1/loop_1/1/call_1")
	endOf("the cancelled call to end", "run_1/loop_1/1/call_1")
	resp, err := c.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "add", ArgumentsJson: `{}`, IdempotencyKey: "run_1/loop_1/1/call_1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetText() != "3" || runs.Load() != 2 {
		t.Errorf("the call sent again answered %v after %d runs; want the real answer 3 after 2 runs", resp, runs.Load())
	}

	cut("charge", "run_1/loop_1/1/call_2")
	endOf("the cancelled charge to end", "run_1/loop_1/1/call_2")
	before := runs.Load()
	resp, err = c.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{}`, IdempotencyKey: "run_1/loop_1/1/call_2"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetText() != "charged" || runs.Load() != before {
		t.Errorf("a charge that finished after its caller left ran again (%v, %d runs)", resp, runs.Load()-before)
	}
}

// TestLedgerRunsNothingForACallerGone: a call sent again whose caller leaves while the
// ledger is read (a shared store, slow, that honours its context) does not run: it ran,
// with the caller gone, took its effect a second time, and its answer replaced the one
// kept, which the next call sent again got.
func TestLedgerRunsNothingForACallerGone(t *testing.T) {
	var runs atomic.Int64
	charge := tool.New("charge", "Charge.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text(fmt.Sprintf("charged %d", runs.Add(1))), nil
	})
	ledger := &slowLedger{MemoryLedger: NewMemoryLedger(0), loading: make(chan struct{}, 1)}
	ended := make(chan struct{}, 4)
	watch := watchInvoke(nil, func(*toolpb.InvokeRequest) { ended <- struct{}{} })
	w := start(t, Options{Ledger: ledger, ServerOptions: []grpc.ServerOption{watch}}, Group{Role: "pay", Tools: []tool.Tool{charge}})
	c := w.client()
	req := &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{}`, IdempotencyKey: "run_1/loop_1/1/call_1"}
	call := func(ctx context.Context) (string, error) {
		resp, err := c.Invoke(ctx, req)
		<-ended
		return resp.GetText(), err
	}
	if got, err := call(testContext(t)); err != nil || got != "charged 1" {
		t.Fatalf("the first call: %q, %v", got, err)
	}
	ledger.slow.Store(true)
	ctx, cancel := context.WithCancel(testContext(t))
	go func() { <-ledger.loading; cancel() }()
	if got, err := call(ctx); err == nil {
		t.Fatalf("the call whose caller left answered %q", got)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once: the call whose caller left ran it again", n)
	}
	ledger.slow.Store(false)
	if got, err := call(testContext(t)); err != nil || got != "charged 1" {
		t.Errorf("the call sent again: %q, %v; want the first answer, charged 1", got, err)
	}
}

// slowLedger is a ledger that honours its context and, while slow is set, reads no
// faster than its caller waits (it says on loading that a read began).
type slowLedger struct {
	*MemoryLedger
	slow    atomic.Bool
	loading chan struct{}
}

func (l *slowLedger) Load(ctx context.Context, key string) ([]byte, bool, error) {
	if l.slow.Load() {
		l.loading <- struct{}{}
		<-ctx.Done()
		return nil, false, ctx.Err()
	}
	return l.MemoryLedger.Load(ctx, key)
}

// idle reports whether no call holds an idempotency key's lock.
func (k *keyLocks) idle() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m) == 0
}

// watchInvoke is a server option (Options.ServerOptions) that tells the test of the
// worker's Invoke calls: arrived, when not nil, is called as a call reaches the worker,
// before it takes its idempotency key's lock; ended, when not nil, once the worker's side
// of the call has returned, the lock released.
func watchInvoke(arrived, ended func(*toolpb.InvokeRequest)) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r, ok := req.(*toolpb.InvokeRequest)
		if !ok || info.FullMethod != toolpb.ToolWorkerService_Invoke_FullMethodName {
			return h(ctx, req)
		}
		if arrived != nil {
			arrived(r)
		}
		if ended != nil {
			defer ended(r)
		}
		return h(ctx, req)
	})
}

// A duplicate that waits for its key while the first call runs gives up when its own
// caller leaves, rather than when the first call ends: it held a handler and its key's
// lock for as long as the slowest call of the key.
func TestLedgerDuplicateGivesUpWithItsCaller(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	charge := tool.New("charge", "Charge a card.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		close(started)
		<-release
		return tool.Text("charged"), nil
	})
	arrived := make(chan struct{}, 2)
	duplicateEnded := make(chan struct{})
	var calls atomic.Int32
	watch := watchInvoke(func(*toolpb.InvokeRequest) { arrived <- struct{}{} }, func(*toolpb.InvokeRequest) {
		if calls.Add(1) == 1 {
			close(duplicateEnded) // the first to end: the duplicate, unless it waited
		}
	})
	w := start(t, Options{Ledger: NewMemoryLedger(0), ServerOptions: []grpc.ServerOption{watch}}, Group{Role: "pay", Tools: []tool.Tool{charge}})
	c := w.client()
	req := &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{}`, IdempotencyKey: "run_1/call_1"}
	first := make(chan error, 1)
	go func() { _, err := c.Invoke(testContext(t), req); first <- err }()
	<-arrived
	<-started
	ctx, cancel := context.WithCancel(testContext(t))
	dup := make(chan error, 1)
	go func() { _, err := c.Invoke(ctx, req); dup <- err }()
	<-arrived
	time.Sleep(20 * time.Millisecond) // the duplicate waits for the key
	cancel()
	select {
	case <-duplicateEnded:
	case <-time.After(5 * time.Second):
		t.Error("the duplicate's handler still waits for the first call 5 s after its caller left")
	}
	if err := <-dup; status.Code(err) != codes.Canceled {
		t.Errorf("the duplicate: %v, want Canceled", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("the first call: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !w.keys.idle() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !w.keys.idle() {
		t.Error("a key's lock is still held after both calls ended")
	}
}
