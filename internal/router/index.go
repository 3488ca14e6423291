package router

import (
	"math/bits"
	"math/rand/v2"
	"strings"
)

// toolTable finds a tool's stub by name for Router.Tool without taking the router's
// lock. It is an immutable copy of the tool map, replaced by a new copy at the end of
// every change of the map (Router.publishToolsLocked) and read through an atomic
// pointer: an open-addressing table (linear probing, at most 7/8 full) of 32-byte slots,
// two to a cache line. A slot holds the name's words (all of a name of up to 16 bytes),
// its length and the stub, so that a lookup reads the caller's name and one slot: in a
// table of 100,000 tools the slots take 4 MiB, where a Go map's keys, entries and stubs
// are spread over the heap. Longer names are verified against the table's arena.
type toolTable struct {
	salt  [4]uint64
	mask  uint64
	slots []tableSlot
	long  string // the names longer than 16 bytes, one after the other
	n     int    // the slots in use
	live  int    // the bytes of long that names of slots in use take
	// arena holds long while the table is built (with): appending to it leaves the
	// bytes long already holds where they are.
	arena *strings.Builder
}

// tableSlot is one slot of a toolTable: an empty one has n == 0.
type tableSlot struct {
	w0, w1 uint64 // the name's words (nameWords)
	// stub is what Tool returns; nil for a facade, which Tool builds under the lock.
	stub *remoteTool
	n    uint32 // the name's length plus one
	off  uint32 // where a name longer than 16 bytes starts in toolTable.long
}

// shortName is the longest name a slot's words hold entirely.
const shortName = 16

// newToolTable returns an empty table with a random hash salt.
func newToolTable() *toolTable {
	t := &toolTable{mask: 7, slots: make([]tableSlot, 8)}
	for i := range t.salt {
		t.salt[i] = rand.Uint64()
	}
	return t
}

// tableSize is the number of slots of a table of n names: a power of two over 8/7 n.
func tableSize(n int) int {
	return max(8, 1<<bits.Len(uint(n*8/7)))
}

// with returns a copy of t in which the names of changed are as tools has them: gone,
// or with their entry's stub. It copies the slots and names as they are when the table
// keeps its size, and hashes them again when it grows, shrinks to a quarter or less, or
// its names of removed slots outweigh the others.
func (t *toolTable) with(tools map[string]*toolEntry, changed []string) *toolTable {
	size := tableSize(max(t.n, len(tools)))
	if size < len(t.slots) && 4*size > len(t.slots) {
		size = len(t.slots)
	}
	c := &toolTable{salt: t.salt, mask: uint64(size - 1), slots: make([]tableSlot, size), arena: &strings.Builder{}}
	if size == len(t.slots) && len(t.long) <= 2*t.live+4096 {
		copy(c.slots, t.slots)
		c.arena.WriteString(t.long)
		c.long, c.n, c.live = c.arena.String(), t.n, t.live
	} else {
		c.rehash(t)
	}
	for _, name := range changed {
		c.del(name)
	}
	for _, name := range changed {
		if e, ok := tools[name]; ok {
			c.put(name, e)
		}
	}
	c.arena = nil
	return c
}

// rehash inserts the slots of old where their hashes put them in t, their names packed
// in t's arena.
func (t *toolTable) rehash(old *toolTable) {
	for i := range old.slots {
		if s := &old.slots[i]; s.n != 0 {
			t.insert(*s, old.slotName(s))
		}
	}
}

// insert adds s, of name long when it is longer than 16 bytes, where its hash puts it.
func (t *toolTable) insert(s tableSlot, long string) {
	if s.n > shortName+1 {
		s.off = uint32(len(t.long))
		t.arena.WriteString(long)
		t.long = t.arena.String()
		t.live += len(long)
	}
	i := t.hash(s.w0, s.w1, int(s.n-1), long) & t.mask
	for t.slots[i].n != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = s
	t.n++
}

// put sets the stub of name to e's (none for a facade), adding name if t lacks it.
func (t *toolTable) put(name string, e *toolEntry) {
	stub := e.stub
	if e.facade != nil {
		stub = nil
	}
	if i, ok := t.find(name); ok {
		t.slots[i].stub = stub
		return
	}
	w0, w1 := nameWords(name)
	t.insert(tableSlot{w0: w0, w1: w1, stub: stub, n: uint32(len(name)) + 1}, name)
}

// del removes name, shifting back the slots after it that probed past it (no
// tombstones: a table that churns stays as fast as a fresh one).
func (t *toolTable) del(name string) {
	i, ok := t.find(name)
	if !ok {
		return
	}
	t.n--
	t.live -= len(t.slotName(&t.slots[i]))
	mask := int(t.mask)
	for j := (i + 1) & mask; t.slots[j].n != 0; j = (j + 1) & mask {
		s := &t.slots[j]
		// s may move to the hole at i when its home slot is not in (i, j].
		home := int(t.hash(s.w0, s.w1, int(s.n-1), t.slotName(s)) & t.mask)
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = tableSlot{}
}

// find returns the slot of name.
func (t *toolTable) find(name string) (int, bool) {
	w0, w1 := nameWords(name)
	n := uint32(len(name)) + 1
	for i := t.hash(w0, w1, len(name), name) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.n == 0 {
			return 0, false
		}
		if s.w0 == w0 && s.w1 == w1 && s.n == n && (n <= shortName+1 || t.slotName(s) == name) {
			return int(i), true
		}
	}
}

// get returns the stub of name and whether the table holds name; a facade is held with
// no stub.
func (t *toolTable) get(name string) (*remoteTool, bool) {
	i, ok := t.find(name)
	if !ok {
		return nil, false
	}
	return t.slots[i].stub, true
}

// slotName is the name of a slot whose name is longer than 16 bytes; "" for another.
func (t *toolTable) slotName(s *tableSlot) string {
	if s.n <= shortName+1 {
		return ""
	}
	return t.long[s.off : s.off+s.n-1]
}

// hash is the salted hash of a name of n bytes whose words are w0 and w1; a name longer
// than 16 bytes is long, whose words between the first and last 8 bytes it mixes in.
func (t *toolTable) hash(w0, w1 uint64, n int, long string) uint64 {
	h := mix(w0^t.salt[0], w1^t.salt[1])
	if n > shortName {
		h = t.hashMiddle(h, long)
	}
	return mix(h^t.salt[2], uint64(n)^t.salt[3])
}

// hashMiddle mixes into h the words of a long name between its first and last 8 bytes.
func (t *toolTable) hashMiddle(h uint64, name string) uint64 {
	for i := 8; i+8 < len(name); i += 8 {
		h = mix(h^t.salt[2], le64(name[i:])^t.salt[3])
	}
	return h
}

// mix folds the 128-bit product of a and b to 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// nameWords are two words that, with its length, identify a name of up to 16 bytes (its
// first and last 8 bytes, which may overlap; of a shorter name, its first and last 4,
// or its first, middle and last byte), and the first and last 8 bytes of a longer one.
func nameWords(s string) (uint64, uint64) {
	switch n := len(s); {
	case n >= 8:
		return le64(s), le64(s[n-8:])
	case n >= 4:
		return uint64(le32(s)), uint64(le32(s[n-4:]))
	case n > 0:
		return uint64(s[0]) | uint64(s[n/2])<<8 | uint64(s[n-1])<<16, 0
	}
	return 0, 0
}

// le64 is the little-endian word of the first 8 bytes of s.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// le32 is the little-endian word of the first 4 bytes of s.
func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
