package process

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Bounds limit a blackboard. Zero fields mean the defaults.
type Bounds struct {
	// MaxEntries bounds the number of entries. Default DefaultMaxEntries.
	MaxEntries int
	// MaxBytes bounds the values of all entries together, JSON and blobs' data alike.
	// Default DefaultMaxBytes.
	MaxBytes int
}

// Defaults of Bounds.
const (
	DefaultMaxEntries = 1024
	DefaultMaxBytes   = 3 << 20
	// MaxTypeNameBytes bounds a type name and a binding name.
	MaxTypeNameBytes = 256
)

func (b Bounds) maxEntries() int {
	if b.MaxEntries > 0 {
		return b.MaxEntries
	}
	return DefaultMaxEntries
}

func (b Bounds) maxBytes() int {
	if b.MaxBytes > 0 {
		return b.MaxBytes
	}
	return DefaultMaxBytes
}

// Blackboard is the entries of a run in the order they were added, and the names bound
// to some of them. A name bound again points at the newer entry; the older stays.
type Blackboard struct {
	Entries []tool.Entry
	// Bindings maps a name to the index of its entry in Entries.
	Bindings map[string]int
	// Bytes is the size of all entries' values together (tool.Entry.Size).
	Bytes  int
	Bounds Bounds
}

// Clone returns a copy that shares no slice or map with b.
func (b Blackboard) Clone() Blackboard {
	b.Entries = slices.Clone(b.Entries)
	b.Bindings = maps.Clone(b.Bindings)
	return b
}

// Add appends e (bound to name unless name is empty) and returns its index. A value
// that is neither one JSON value nor a blob with a valid media type (tool.CheckEntry),
// a blank type name, and a blackboard over its bounds are errors that say so; nothing
// is added then. A blob's data counts against the bounds as JSON does.
func (b *Blackboard) Add(name string, e tool.Entry) (int, error) {
	if len(e.TypeName) > MaxTypeNameBytes || !utf8.ValidString(e.TypeName) {
		return 0, fmt.Errorf("blackboard entry: the type name must be valid UTF-8 of at most %d bytes", MaxTypeNameBytes)
	}
	if len(name) > MaxTypeNameBytes || !utf8.ValidString(name) {
		return 0, fmt.Errorf("blackboard entry: the binding name must be valid UTF-8 of at most %d bytes", MaxTypeNameBytes)
	}
	checked, err := tool.CheckEntry(e)
	if err != nil {
		return 0, err
	}
	if len(b.Entries) >= b.Bounds.maxEntries() {
		return 0, fmt.Errorf("blackboard entry of type %q: the blackboard is full (%d entries)", e.TypeName, b.Bounds.maxEntries())
	}
	if b.Bytes+checked.Size() > b.Bounds.maxBytes() {
		return 0, fmt.Errorf("blackboard entry of type %q: %d bytes would take the blackboard over its %d bytes", e.TypeName, checked.Size(), b.Bounds.maxBytes())
	}
	b.Entries = append(b.Entries, checked)
	b.Bytes += checked.Size()
	i := len(b.Entries) - 1
	if name != "" {
		if b.Bindings == nil {
			b.Bindings = map[string]int{}
		}
		b.Bindings[name] = i
	}
	return i, nil
}

// Get returns the entry bound to name.
func (b Blackboard) Get(name string) (tool.Entry, bool) {
	i, ok := b.Bindings[name]
	if !ok || i < 0 || i >= len(b.Entries) {
		return tool.Entry{}, false
	}
	return b.Entries[i], true
}

// Last returns the newest entry that satisfies the type name (see tool.SatisfiesType).
func (b Blackboard) Last(typeName string) (tool.Entry, bool) {
	for i := len(b.Entries) - 1; i >= 0; i-- {
		if tool.SatisfiesType(b.Entries[i], typeName) {
			return b.Entries[i], true
		}
	}
	return tool.Entry{}, false
}

// Count is the number of entries that satisfy the type name.
func (b Blackboard) Count(typeName string) int {
	n := 0
	for _, e := range b.Entries {
		if tool.SatisfiesType(e, typeName) {
			n++
		}
	}
	return n
}

// NameOf returns the names bound to entry i, sorted.
func (b Blackboard) NameOf(i int) []string {
	var names []string
	for n, j := range b.Bindings {
		if j == i {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }
