package toolinternal

import "sync"

// DefaultMaxTracked is how many loop ids a LoopMemo remembers by default.
const DefaultMaxTracked = 1024

// LoopMemo answers "is this the first time in this tool loop?". It remembers a bounded
// number of loop ids and forgets the oldest first (insertion order: seeing an id again
// does not refresh it), so a forgotten id counts as new again. It is safe for
// concurrent use; instances share nothing.
type LoopMemo struct {
	mu   sync.Mutex
	seen map[string]struct{}
	ring []string // ids in insertion order, oldest at next once full
	next int
}

// NewLoopMemo returns a memo that remembers up to maxTracked loop ids; zero or less
// means DefaultMaxTracked.
func NewLoopMemo(maxTracked int) *LoopMemo {
	if maxTracked <= 0 {
		maxTracked = DefaultMaxTracked
	}
	return &LoopMemo{seen: make(map[string]struct{}), ring: make([]string, 0, maxTracked)}
}

// MaxTracked is how many loop ids the memo remembers.
func (m *LoopMemo) MaxTracked() int { return cap(m.ring) }

// FirstTimeInLoop reports whether this is the first time the memo sees loopID; the
// empty id is always a first time and leaves the memo untouched. Among concurrent
// callers with one id exactly one gets true.
func (m *LoopMemo) FirstTimeInLoop(loopID string) bool {
	if loopID == "" {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[loopID]; ok {
		return false
	}
	if len(m.ring) < cap(m.ring) {
		m.ring = append(m.ring, loopID)
	} else {
		delete(m.seen, m.ring[m.next])
		m.ring[m.next] = loopID
		m.next = (m.next + 1) % len(m.ring)
	}
	m.seen[loopID] = struct{}{}
	return true
}
