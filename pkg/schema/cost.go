package schema

import (
	"encoding/json"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// validationBudget is the checks a validation of size bytes of JSON may take.
func validationBudget(size int) int64 {
	return MaxValidationChecks + MaxValidationChecksPerByte*int64(size)
}

// spend walks decoded arguments the way the validator will, counting what it would
// do, and returns the count and whether it stays within limit. It decides nothing
// else: each subschema is counted as if every keyword applied and every check failed
// (a failed check is what costs most, in error messages), so the count is an upper
// bound of the validator's work; and the walk stops as soon as it passes the limit,
// after at most that many steps.
func (g *graph) spend(v any, limit int64) (int64, bool) {
	e := budget{g: g, left: limit}
	ok := e.apply(v, 0, 1)
	return limit - e.left, ok
}

type budget struct {
	g    *graph
	left int64
}

// apply counts subschema i applied to v, frame levels deep in the validator's
// recursion (every level wraps the errors of those below it in a copy).
func (e *budget) apply(v any, i int32, frame int) bool {
	n := &e.g.nodes[i]
	// An error is copied into the error of each level above, with the subschema's
	// pointer in front: a check for each 256 bytes copied.
	c := n.checks + int64(frame*(n.pathLen+64)/256)
	switch v := v.(type) {
	case string:
		if n.quotes { // the error quotes the string
			c += int64(len(v)) * int64(frame) / 64
		}
		// Matching costs up to 0.4 ns a byte for each instruction of the program.
		c += int64(len(v)) * int64(n.program) / 256
	case *jsontree.Object:
		c += int64(len(v.Keys)) // the validator's bookkeeping of evaluated properties
	case []any:
		if e.g.contains {
			c += int64(len(v))
		}
		if n.distinct { // every item hashed in full
			c += enumChecks * countValues(v, e.left)
		}
	}
	if e.left -= c; e.left < 0 {
		return false
	}
	for _, j := range n.same {
		if !e.apply(v, j, frame+1) {
			return false
		}
	}
	each := func(v any, js ...int32) bool {
		for _, j := range js {
			if j != none && !e.apply(v, j, frame+1) {
				return false
			}
		}
		return true
	}
	switch v := v.(type) {
	case *jsontree.Object:
		for _, k := range v.Keys {
			val := v.Vals[k]
			j, ok := n.props[k]
			if !ok {
				j = n.additional
			}
			if !each(val, j, n.unevaluated) || !each(val, n.patternProps...) || !each(k, n.names) {
				return false
			}
		}
	case []any:
		for idx, item := range v {
			var ok bool
			if idx < len(n.prefix) {
				ok = each(item, n.prefix[idx])
			} else {
				ok = each(item, n.items, n.additionalItems)
			}
			if !ok || !each(item, n.containsItem, n.uneval) {
				return false
			}
		}
	}
	return true
}

// countValues counts the values in v, stopping past limit.
func countValues(v any, limit int64) int64 {
	var n int64
	var walk func(v any)
	walk = func(v any) {
		if n++; n > limit {
			return
		}
		switch v := v.(type) {
		case *jsontree.Object:
			for _, k := range v.Keys {
				walk(v.Vals[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return n
}

// The validator prints the value it rejects in its error messages, and builds those
// messages for every subschema that fails, including the alternatives of an anyOf
// that another alternative satisfies. Printed in full, a large object would cost its
// size for each of them, and even a short preview of it most of the time the
// validator takes; these types print as {…}, […] and the start of the string, and are
// otherwise what the validator expects (it goes by the kind of a value, not its type).
// The messages the model reads come from explain, which quotes the value itself.
type (
	previewObject map[string]any
	previewArray  []any
	previewString string
)

func (previewObject) String() string   { return "{…}" }
func (previewArray) String() string    { return "[…]" }
func (s previewString) String() string { return cut(string(s)) }

// previewRunes is how much of a string a preview shows.
const previewRunes = 80

// cut shortens s to previewRunes runes, in time that does not depend on its length
// (unlike jsontree.Truncate, which counts them all).
func cut(s string) string {
	n := 0
	for i := range s {
		if n == previewRunes {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// toValidator converts a decoded value to what the validator checks; numbers become
// float64s, as with jsontree.ToPlain.
func toValidator(v any, path string) (any, error) {
	switch v := v.(type) {
	case *jsontree.Object:
		m := make(previewObject, len(v.Keys))
		for _, k := range v.Keys {
			pv, err := toValidator(v.Vals[k], jsontree.ChildPath(path, k))
			if err != nil {
				return nil, err
			}
			m[k] = pv
		}
		return m, nil
	case []any:
		out := make(previewArray, len(v))
		for i, e := range v {
			pv, err := toValidator(e, jsontree.IndexPath(path, i))
			if err != nil {
				return nil, err
			}
			out[i] = pv
		}
		return out, nil
	case string:
		return previewString(v), nil
	case json.Number:
		return jsontree.ToPlain(v, path)
	default:
		return v, nil
	}
}
