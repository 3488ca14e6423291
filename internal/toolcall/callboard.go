package toolcall

import (
	"fmt"
	"sync"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// CallBoard is the tool.Blackboard of one call that crossed a process boundary: it answers
// lookups from the objects sent with the call and records the objects the tool adds.
// The worker SDK gives one to every call; the orchestrator applies what it recorded.
type CallBoard struct {
	mu    sync.Mutex
	seen  []tool.Binding
	added []tool.Binding
	// limit bounds the added objects' JSON, in bytes; zero means no bound.
	limit int
	size  int
}

// NewCallBoard returns a board that sees objects and accepts at most limit bytes of added
// JSON (zero: no bound).
func NewCallBoard(objects []tool.Binding, limit int) *CallBoard {
	return &CallBoard{seen: append([]tool.Binding(nil), objects...), limit: limit}
}

// Entries returns what the call saw and what it added, oldest first.
func (b *CallBoard) Entries() []tool.Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]tool.Entry, 0, len(b.seen)+len(b.added))
	for _, x := range b.seen {
		out = append(out, x.Entry)
	}
	for _, x := range b.added {
		out = append(out, x.Entry)
	}
	return out
}

// Last returns the newest object of the type, the call's own additions included.
func (b *CallBoard) Last(typeName string) (tool.Entry, bool) {
	bd, ok := b.LastBound(typeName)
	return bd.Entry, ok
}

// LastBound is Last with the name bound to the object, if any.
func (b *CallBoard) LastBound(typeName string) (tool.Binding, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, list := range [][]tool.Binding{b.added, b.seen} {
		for i := len(list) - 1; i >= 0; i-- {
			if tool.SatisfiesType(list[i].Entry, typeName) {
				return list[i], true
			}
		}
	}
	return tool.Binding{}, false
}

// Get returns the object bound to name, the call's own bindings first.
func (b *CallBoard) Get(name string) (tool.Entry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, list := range [][]tool.Binding{b.added, b.seen} {
		for i := len(list) - 1; i >= 0; i-- {
			if name != "" && list[i].Name == name {
				return list[i].Entry, true
			}
		}
	}
	return tool.Entry{}, false
}

// Add records o.
func (b *CallBoard) Add(o tool.Entry) error { return b.Bind("", o) }

// Bind records o bound to name.
func (b *CallBoard) Bind(name string, o tool.Entry) error {
	o, err := tool.CheckEntry(o)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && b.size+o.Size() > b.limit {
		return fmt.Errorf("blackboard object of type %q: the call's additions would exceed %d bytes", o.TypeName, b.limit)
	}
	b.size += o.Size()
	b.added = append(b.added, tool.Binding{Name: name, Entry: o})
	return nil
}

// Added returns what the tool added, in order.
func (b *CallBoard) Added() []tool.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]tool.Binding(nil), b.added...)
}

var _ tool.Blackboard = (*CallBoard)(nil)
