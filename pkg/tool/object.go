package tool

import (
	"fmt"
	"slices"
	"strings"
)

// Set is a value that offers several tools, such as a service with one tool per
// operation.
type Set interface {
	Tools() []Tool
}

// SetFunc adapts a function to a Set.
type SetFunc func() []Tool

// Tools calls f.
func (f SetFunc) Tools() []Tool { return f() }

// Object is a group of tools taken from several sources, with a naming strategy and a
// filter applied to all of them. It is an immutable value: the With methods return
// modified copies. The zero value offers no tools.
type Object struct {
	sets   []Set
	naming func(string) string
	filter func(string) bool
}

var _ Set = Object{}

// ObjectOf returns an Object over the given sources, each a Tool, a []Tool or a Set
// (an Object is a Set, so objects nest). A value that is a Tool is taken as a tool even
// if it is also a Set. Nil sources are skipped; any other kind of source panics, since
// it is a programming error that no caller could handle.
func ObjectOf(sets ...any) Object {
	var o Object
	for i, s := range sets {
		switch s := s.(type) {
		case nil:
		case Tool:
			o.sets = append(o.sets, toolList{s})
		case []Tool:
			o.sets = append(o.sets, toolList(slices.Clone(s)))
		case Set:
			o.sets = append(o.sets, s)
		default:
			panic(fmt.Sprintf("tool.ObjectOf: source %d is a %T, not a Tool, []Tool or Set", i, s))
		}
	}
	return o
}

type toolList []Tool

func (l toolList) Tools() []Tool { return l }

// WithPrefix returns o with tools named prefix+name. It replaces any naming strategy;
// an empty prefix changes nothing.
func (o Object) WithPrefix(prefix string) Object {
	if prefix == "" {
		return o
	}
	return o.WithNamingStrategy(func(name string) string { return prefix + name })
}

// WithNamingStrategy returns o with tools renamed by f (nil means keep the names).
func (o Object) WithNamingStrategy(f func(name string) string) Object {
	o.naming = f
	return o
}

// WithFilter returns o offering only the tools whose original name (before renaming)
// keep accepts (nil accepts all).
func (o Object) WithFilter(keep func(name string) bool) Object {
	o.filter = keep
	return o
}

// Tools returns the tools of all sources: filtered on their original names, renamed by
// the naming strategy (with WithName, so that a renamed tool still unwraps to the
// original), de-duplicated by name with the first one winning, and sorted by name.
// Sources are read on every call.
func (o Object) Tools() []Tool {
	type named struct {
		name string
		tool Tool
	}
	var found []named
	seen := map[string]bool{}
	for _, s := range o.sets {
		for _, t := range s.Tools() {
			if t == nil {
				continue
			}
			name := t.Definition().Name
			if o.filter != nil && !o.filter(name) {
				continue
			}
			if o.naming != nil {
				if renamed := o.naming(name); renamed != name {
					t, name = WithName(t, renamed), renamed
				}
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			found = append(found, named{name, t})
		}
	}
	slices.SortFunc(found, func(a, b named) int { return strings.Compare(a.name, b.name) })
	out := make([]Tool, len(found))
	for i, f := range found {
		out[i] = f.tool
	}
	return out
}
