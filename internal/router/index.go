package router

import (
	"hash/maphash"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// toolIndex finds a tool by name for Router.Tool, which resolving a run calls for every
// tool it names. It is a dense open-addressing table (linear probing, at most half full)
// whose slot is one cache line holding the name's hash, its first bytes and the stub a
// lookup returns: a lookup of a name of up to indexPrefix bytes reads one slot and
// nothing else, so that in a table of 100,000 tools it costs one cache miss, where a Go
// map also reads the key's bytes and the entry it points to. It is changed under the
// router's lock, like the map it mirrors.
type toolIndex struct {
	seed  maphash.Seed
	slots []indexSlot // a power of two long, or nil
	n     int
}

// indexPrefix is how many bytes of a name a slot holds: most tool names fit.
const indexPrefix = 22

type indexSlot struct {
	hash   uint64 // 0: an empty slot
	e      *toolEntry
	stub   tool.Tool // e's stub (nil for a facade, which Tool builds)
	n      uint8     // the name's length, up to 255 (names are at most 64 bytes)
	prefix [indexPrefix]byte
}

func (x *toolIndex) hashOf(name string) uint64 {
	h := maphash.String(x.seed, name)
	if h == 0 {
		h = 1 // 0 marks an empty slot
	}
	return h
}

// matches reports whether s holds name, whose hash is h.
func (s *indexSlot) matches(h uint64, name string) bool {
	if s.hash != h || int(s.n) != len(name) {
		return false
	}
	k := min(len(name), indexPrefix)
	if string(s.prefix[:k]) != name[:k] {
		return false
	}
	return k == len(name) || s.e.def.Name == name
}

// get returns the entry of name and its stub (nil for a facade).
func (x *toolIndex) get(name string) (*toolEntry, tool.Tool, bool) {
	if x.n == 0 || len(name) > 255 {
		return nil, nil, false
	}
	h := x.hashOf(name)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.hash == 0 {
			return nil, nil, false
		}
		if s.matches(h, name) {
			return s.e, s.stub, true
		}
	}
}

// put sets the entry of name (e's definition's name).
func (x *toolIndex) put(e *toolEntry) {
	name := e.def.Name
	if len(name) > 255 {
		return // registrations refuse such names; never indexed, never found
	}
	if x.slots == nil {
		x.seed = maphash.MakeSeed()
	}
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	h := x.hashOf(name)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.hash == 0 {
			x.n++
		} else if !s.matches(h, name) {
			continue
		}
		*s = indexSlot{hash: h, e: e, n: uint8(len(name))}
		if e.facade == nil && e.stub != nil {
			s.stub = e.stub
		}
		copy(s.prefix[:], name)
		return
	}
}

// del removes name, shifting back the slots after it that probed past it (no
// tombstones: a table that churns stays as fast as a fresh one).
func (x *toolIndex) del(name string) {
	if x.n == 0 || len(name) > 255 {
		return
	}
	h := x.hashOf(name)
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for ; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.hash == 0 {
			return
		}
		if s.matches(h, name) {
			break
		}
	}
	x.n--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &x.slots[j]
		if s.hash == 0 {
			break
		}
		// s may move to the hole at i when its home slot is not in (i, j].
		home := s.hash & mask
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.slots[i] = *s
			i = j
		}
	}
	x.slots[i] = indexSlot{}
}

func (x *toolIndex) grow() {
	old := x.slots
	x.slots = make([]indexSlot, max(16, 2*len(old)))
	x.n = 0
	for i := range old {
		if old[i].hash != 0 {
			x.put(old[i].e)
		}
	}
}
