package worker

import (
	"container/list"
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// A Ledger remembers the answers of calls by idempotency key, so that a call the
// orchestrator sends again (after a crash, to another replica of a worker sharing the
// ledger) is answered with the first call's answer instead of running the tool twice.
// Keys are the orchestrator's idempotency keys (run id and call id) with the tool's
// name. Load and Store must be safe for concurrent use; a store shared by replicas
// (a database, Redis) makes the guarantee hold across them.
type Ledger interface {
	// Load returns the answer stored under key, if any that has not expired.
	Load(ctx context.Context, key string) (answer []byte, ok bool, err error)
	// Store keeps an answer under key for ttl. Its context is not the call's: a call
	// whose caller went away (an orchestrator that died) while the tool ran is stored
	// all the same, its effect having happened, within ledgerStoreTimeout.
	Store(ctx context.Context, key string, answer []byte, ttl time.Duration) error
}

// ledgerStoreTimeout bounds the Store of a call's answer, which outlives the call's
// caller.
const ledgerStoreTimeout = 10 * time.Second

// DefaultLedgerTTL is how long answers are kept when Options.LedgerTTL is zero.
const DefaultLedgerTTL = 24 * time.Hour

// MemoryLedger is a Ledger in this process's memory, bounded in entries (the oldest
// goes first) and in time.
type MemoryLedger struct {
	max int
	now func() time.Time

	mu    sync.Mutex
	byKey map[string]*list.Element
	order *list.List // oldest first
}

type ledgerEntry struct {
	key     string
	answer  []byte
	expires time.Time
}

// NewMemoryLedger returns a MemoryLedger of at most max answers (10,000 when max ≤ 0).
func NewMemoryLedger(max int) *MemoryLedger {
	if max <= 0 {
		max = 10000
	}
	return &MemoryLedger{max: max, now: time.Now, byKey: map[string]*list.Element{}, order: list.New()}
}

// Load implements Ledger.
func (m *MemoryLedger) Load(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byKey[key]
	if !ok {
		return nil, false, nil
	}
	e := el.Value.(*ledgerEntry)
	if !m.now().Before(e.expires) {
		m.order.Remove(el)
		delete(m.byKey, key)
		return nil, false, nil
	}
	return e.answer, true, nil
}

// Store implements Ledger.
func (m *MemoryLedger) Store(_ context.Context, key string, answer []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok {
		m.order.Remove(el)
	}
	m.byKey[key] = m.order.PushBack(&ledgerEntry{key: key, answer: answer, expires: m.now().Add(ttl)})
	for m.order.Len() > m.max {
		oldest := m.order.Front()
		m.order.Remove(oldest)
		delete(m.byKey, oldest.Value.(*ledgerEntry).key)
	}
	return nil
}

// Len is the number of answers kept.
func (m *MemoryLedger) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// keyLocks serialises the calls of one idempotency key in this process, so that a
// duplicate that arrives while the first runs waits for its answer, as long as its own
// caller waits.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

// keyLock is held by the call that has a token in held (a channel of one).
type keyLock struct {
	held chan struct{}
	refs int
}

// lock takes key's lock, or gives up when ctx ends first: a duplicate whose caller left
// (a resumed run cancelled, an orchestrator gone again) does not wait out the first call.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{held: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// invokeOnce is invoke through the ledger: a call whose key has an answer is answered
// with it, without running the tool; otherwise the tool runs and its answer is kept.
// Calls the worker did not run (draining, an unknown tool) keep nothing, nor calls
// that failed after their caller went away.
func (s *invoker) invokeOnce(ctx context.Context, req *toolpb.InvokeRequest, progress func(string)) (*toolpb.InvokeResponse, error) {
	l := s.w.opts.Ledger
	if l == nil || req.GetIdempotencyKey() == "" {
		return s.invoke(ctx, req, progress)
	}
	key := req.GetTool() + "\x00" + req.GetIdempotencyKey()
	unlock, err := s.w.keys.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if b, ok, err := l.Load(ctx, key); err != nil {
		s.w.log.WarnContext(ctx, "idempotency ledger unreadable: running the call", "tool", req.GetTool(), "error", err.Error())
	} else if ok {
		resp := &toolpb.InvokeResponse{}
		if err := proto.Unmarshal(b, resp); err == nil {
			s.w.log.InfoContext(ctx, "call answered from the idempotency ledger", "tool", req.GetTool(), "idempotency_key", req.GetIdempotencyKey())
			return resp, nil
		}
	}
	if err := ctx.Err(); err != nil {
		// The caller left while the call waited for its key or the ledger was read (a
		// ledger that honours its context fails so): the call does not run. Run, its
		// answer would replace the one perhaps kept already, its effect taken again.
		return nil, status.FromContextError(err).Err()
	}
	resp, err := s.invoke(ctx, req, progress)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil && resp.GetError() != nil {
		// The caller went away while the tool ran, and the tool failed: a tool that turns
		// its context's end into an error answers so. That is not the call's outcome, and
		// the call sent again must run rather than get it. A tool that finished although
		// the caller left keeps its answer: its effect happened.
		return resp, nil
	}
	b, err := proto.Marshal(resp)
	if err == nil {
		// The caller may have left (its orchestrator died) while the tool ran to its end:
		// a ledger that honours its context (a database's client) would refuse the answer
		// at once, and the call sent again would take its effect a second time.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ledgerStoreTimeout)
		err = l.Store(sctx, key, b, cmpDuration(s.w.opts.LedgerTTL, DefaultLedgerTTL))
		cancel()
	}
	if err != nil {
		s.w.log.WarnContext(ctx, "the call's answer could not be kept in the idempotency ledger", "tool", req.GetTool(), "error", err.Error())
	}
	return resp, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
