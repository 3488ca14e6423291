package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// jsonschema-go resolves each $ref to the one subschema it names, but validates by
// following references wherever they lead: a reference back to a subschema that applies
// to the same value recurses until the stack overflows (which kills the process; no
// recover can catch it), and definitions that refer to each other several times over
// make it apply the same subschemas to one value exponentially often. The graph below
// is the schema as the validator walks it, built once when the schema is compiled:
// references that loop on one value, and schemas whose validation of one value could
// exceed MaxValueChecks, are refused; Validate uses it to bound each call's work.

// none marks an absent subschema in a graphNode.
const none = -1

// A check is roughly 100 ns of the validator's time on a current server core
// (BenchmarkLimits shows it): an entry of properties or required takes about 40 ns,
// applying a subschema about 150 ns and up to 900 ns when it fails (the error message
// is most of it), comparing a value with an enum value up to 550 ns.
const (
	applyChecks = 6
	enumChecks  = 4
)

// graph is the compiled schema as the validator walks it.
type graph struct {
	nodes []graphNode
	// contains is whether any subschema uses "contains", whose bookkeeping costs the
	// validator a step for every item of every array it checks.
	contains bool
	// valueChecks bounds the checks of validating any one value (see MaxValueChecks);
	// computed only for schemas held to the limits.
	valueChecks int64
}

// graphNode is one subschema: what one application of it costs, and the subschemas it
// hands on, to the same value or to the value's members and items.
type graphNode struct {
	checks   int64 // checks each time it applies (see MaxValueChecks)
	pathLen  int   // its JSON pointer, which the validator's errors quote
	quotes   bool  // minLength, maxLength or pattern: an error quotes the whole string
	program  int   // instructions of its pattern, if any
	distinct bool  // uniqueItems: hashes every item in full

	same []int32 // $ref, $dynamicRef, allOf, anyOf, oneOf, not, if, then, else, dependent schemas

	props                          map[string]int32
	propList                       []int32 // the values of props
	patternProps                   []int32
	additional, unevaluated, names int32

	prefix                                       []int32
	items, additionalItems, containsItem, uneval int32
}

// graphBuilder mirrors how jsonschema-go resolves identifiers and references
// (resolve.go in that module), so that each $ref leads where the validator goes.
type graphBuilder struct {
	draft7  bool
	schemas []*jsonschema.Schema
	indexOf map[*jsonschema.Schema]int32
	ptrs    []string
	byPtr   map[string]int32
	base    []int32 // the subschema whose URI is each one's base
	uri     map[int32]*url.URL
	byURI   map[string][]int32 // the subschemas with each base URI: more than one when an $id is used twice
	// anchors maps a base to its anchors ($anchor, $dynamicAnchor and, in draft-07,
	// "$id": "#name"); more than one subschema per name counts them all.
	anchors map[int32]map[string][]int32
	dynamic map[string][]int32 // subschemas by $dynamicAnchor
	// programs are the sizes of patterns, as far as checkLimits measured them.
	programs map[string]int
}

// buildGraph compiles a schema that jsonschema-go has resolved. With limited, it
// refuses schemas that exceed MaxDepth or MaxValueChecks; a loop of references on one
// value is refused either way. programs has the sizes of patterns measured already, and
// may be nil.
func buildGraph(root *jsonschema.Schema, limited bool, programs map[string]int) (*graph, error) {
	if programs == nil {
		programs = map[string]int{}
	}
	b := &graphBuilder{
		programs: programs,
		draft7:   root.Schema == "http://json-schema.org/draft-07/schema#" || root.Schema == "https://json-schema.org/draft-07/schema#",
		indexOf:  map[*jsonschema.Schema]int32{},
		byPtr:    map[string]int32{},
		uri:      map[int32]*url.URL{},
		byURI:    map[string][]int32{},
		anchors:  map[int32]map[string][]int32{},
		dynamic:  map[string][]int32{},
	}
	if err := b.visit(root, "", none); err != nil {
		return nil, err
	}
	g := &graph{nodes: make([]graphNode, len(b.schemas))}
	for i, s := range b.schemas {
		n, err := b.node(int32(i), s)
		if err != nil {
			return nil, err
		}
		g.nodes[i] = n
		if s.Contains != nil {
			g.contains = true
		}
	}
	if err := g.check(b.ptrs, limited); err != nil {
		return nil, err
	}
	return g, nil
}

// visit numbers s and its subschemas, recording bases and anchors as resolveURIs does.
func (b *graphBuilder) visit(s *jsonschema.Schema, ptr string, base int32) error {
	i := int32(len(b.schemas))
	b.schemas = append(b.schemas, s)
	b.indexOf[s] = i
	b.ptrs = append(b.ptrs, ptr)
	b.byPtr[ptr] = i
	if base == none { // the root
		base = i
		b.uri[i] = &url.URL{}
		b.byURI[""] = []int32{i}
	}
	if s.ID != "" && (!b.draft7 || s.Ref == "") {
		id, err := url.Parse(s.ID)
		if err != nil {
			return fmt.Errorf("$id %q: %v", s.ID, err)
		}
		if b.draft7 && id.Fragment != "" {
			b.anchor(base, strings.TrimPrefix(s.ID, "#"), i)
		} else {
			u := b.uri[base].ResolveReference(id)
			b.uri[i] = u
			b.byURI[u.String()] = append(b.byURI[u.String()], i)
			base = i
		}
	}
	b.base = append(b.base, base)
	if !b.draft7 {
		b.anchor(base, s.Anchor, i)
		b.anchor(base, s.DynamicAnchor, i)
		if s.DynamicAnchor != "" {
			b.dynamic[s.DynamicAnchor] = append(b.dynamic[s.DynamicAnchor], i)
		}
	}
	for p, sub := range subschemas(s, ptr) {
		if err := b.visit(sub, p, base); err != nil {
			return err
		}
	}
	return nil
}

func (b *graphBuilder) anchor(base int32, name string, i int32) {
	if name == "" {
		return
	}
	if b.anchors[base] == nil {
		b.anchors[base] = map[string][]int32{}
	}
	b.anchors[base][name] = append(b.anchors[base][name], i)
}

// resolve returns the subschemas a reference from subschema i may lead to, and the
// anchor name its fragment holds, if any.
func (b *graphBuilder) resolve(i int32, ref string) ([]int32, string, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, "", err
	}
	u = b.uri[b.base[i]].ResolveReference(u)
	doc := *u
	doc.Fragment = ""
	// jsonschema-go keeps one of the subschemas that share an $id, in an order of its
	// own; any of them may be the one.
	var out []int32
	anchor := ""
	for _, target := range b.byURI[doc.String()] {
		frag := u.Fragment
		if frag != "" && !strings.HasPrefix(frag, "/") {
			out = append(out, b.anchors[target][frag]...)
			anchor = frag
			continue
		}
		// A JSON pointer from the target, spelt as visit spells pointers.
		ptr := b.ptrs[target]
		if frag != "" {
			for _, seg := range strings.Split(frag[1:], "/") {
				ptr += "/" + escapePointer(unescapePointer(seg))
			}
		}
		if t, ok := b.byPtr[ptr]; ok {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("$ref %q at %s: cannot tell where it leads", jsontree.Truncate(ref, 100), b.where(i))
	}
	return out, anchor, nil
}

func (b *graphBuilder) where(i int32) string {
	if b.ptrs[i] == "" {
		return "the root"
	}
	return jsontree.Truncate(b.ptrs[i], 200)
}

// node compiles subschema i.
func (b *graphBuilder) node(i int32, s *jsonschema.Schema) (graphNode, error) {
	idx := func(sub *jsonschema.Schema) int32 {
		if sub == nil {
			return none
		}
		return b.index(sub)
	}
	list := func(subs []*jsonschema.Schema) []int32 {
		out := make([]int32, len(subs))
		for j, sub := range subs {
			out[j] = b.index(sub)
		}
		return out
	}
	n := graphNode{
		pathLen:         max(len(b.ptrs[i]), len("root")),
		quotes:          s.MinLength != nil || s.MaxLength != nil || s.Pattern != "",
		distinct:        s.UniqueItems,
		additional:      idx(s.AdditionalProperties),
		unevaluated:     idx(s.UnevaluatedProperties),
		names:           idx(s.PropertyNames),
		items:           idx(s.Items),
		additionalItems: idx(s.AdditionalItems),
		containsItem:    idx(s.Contains),
		uneval:          idx(s.UnevaluatedItems),
		prefix:          list(append(slices.Clip(s.PrefixItems), s.ItemsArray...)),
	}
	if s.Pattern != "" {
		var ok bool
		if n.program, ok = b.programs[s.Pattern]; !ok {
			n.program, _ = patternProgram(s.Pattern)
			b.programs[s.Pattern] = n.program
		}
	}
	// An application, and the keywords it goes through whatever the value: an entry
	// of properties or required is a check, an enum value (compared as an exact
	// number, which allocates) several, and so is each 64 bytes of enum and const,
	// which the validator's errors print.
	n.checks = applyChecks + int64(len(s.Properties)+len(s.Required)+len(s.DependentRequired)+len(s.DependencyStrings)+len(s.DependentSchemas)+len(s.DependencySchemas))
	n.checks += enumChecks * int64(len(s.Enum))
	for _, req := range s.DependentRequired {
		n.checks += int64(len(req))
	}
	for _, req := range s.DependencyStrings {
		n.checks += int64(len(req))
	}
	if s.Enum != nil {
		e, _ := json.Marshal(s.Enum)
		n.checks += int64(len(e) / 64)
	}
	if s.Const != nil {
		c, _ := json.Marshal(*s.Const)
		n.checks += enumChecks + int64(len(c)/64)
	}
	if len(s.Properties) > 0 {
		n.props = make(map[string]int32, len(s.Properties))
		for k, sub := range s.Properties {
			n.props[k] = b.index(sub)
			n.propList = append(n.propList, n.props[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.PatternProperties)) {
		n.patternProps = append(n.patternProps, b.index(s.PatternProperties[k]))
	}

	if s.Ref != "" {
		t, _, err := b.resolve(i, s.Ref)
		if err != nil {
			return n, err
		}
		n.same = append(n.same, t...)
	}
	if s.DynamicRef != "" {
		t, anchor, err := b.resolve(i, s.DynamicRef)
		if err != nil {
			return n, err
		}
		// Which subschema a dynamic reference reaches depends on how the validator got
		// here: any of those with the anchor (one per resource) may be it.
		for _, j := range append(t, b.dynamic[anchor]...) {
			if !slices.Contains(n.same, j) {
				n.same = append(n.same, j)
			}
		}
	}
	n.same = append(n.same, list(s.AllOf)...)
	n.same = append(n.same, list(s.AnyOf)...)
	n.same = append(n.same, list(s.OneOf)...)
	for _, sub := range []*jsonschema.Schema{s.Not, s.If, s.Then, s.Else} {
		if sub != nil {
			n.same = append(n.same, b.index(sub))
		}
	}
	for _, m := range []map[string]*jsonschema.Schema{s.DependentSchemas, s.DependencySchemas} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			n.same = append(n.same, b.index(m[k]))
		}
	}
	return n, nil
}

func (b *graphBuilder) index(s *jsonschema.Schema) int32 { return b.indexOf[s] }

// edges calls f with every subschema that node i hands a value or its members to.
func (g *graph) edges(i int32, f func(int32)) {
	n := &g.nodes[i]
	one := func(j int32) {
		if j != none {
			f(j)
		}
	}
	for _, j := range n.same {
		f(j)
	}
	for _, j := range n.propList {
		f(j)
	}
	for _, j := range n.patternProps {
		f(j)
	}
	for _, j := range n.prefix {
		f(j)
	}
	for _, j := range []int32{n.additional, n.unevaluated, n.names, n.items, n.additionalItems, n.containsItem, n.uneval} {
		one(j)
	}
}

// check refuses loops of subschemas on one value and, when limited, chains of them
// longer than MaxDepth and schemas whose validation of one value could take more than
// MaxValueChecks. Only what the root leads to counts: a definition nothing refers to is
// never applied.
func (g *graph) check(ptrs []string, limited bool) error {
	where := func(i int32) string {
		if ptrs[i] == "" {
			return "the root"
		}
		return jsontree.Truncate(ptrs[i], 200)
	}
	order, err := g.sameValueOrder(g.reachable(), where)
	if err != nil || !limited {
		return err
	}
	if err := g.checkChains(order, where); err != nil {
		return err
	}
	return g.checkCost(order, where)
}

// reachable marks the subschemas the root reaches.
func (g *graph) reachable() []bool {
	reach := make([]bool, len(g.nodes))
	reach[0] = true
	for stack := []int32{0}; len(stack) > 0; {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		g.edges(i, func(j int32) {
			if !reach[j] {
				reach[j] = true
				stack = append(stack, j)
			}
		})
	}
	return reach
}

// sameValueOrder orders the reachable subschemas so that each comes after those it hands
// its value to, and fails on a loop of them.
func (g *graph) sameValueOrder(reach []bool, where func(int32) string) ([]int32, error) {
	// A depth-first search of the edges that stay on the same value puts each
	// subschema after those it hands the value to; meeting a subschema still on the
	// search's path closes a loop.
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(g.nodes))
	order := make([]int32, 0, len(g.nodes))
	var path []int32
	var visit func(i int32) error
	visit = func(i int32) error {
		state[i] = onPath
		path = append(path, i)
		for _, j := range g.nodes[i].same {
			switch state[j] {
			case onPath:
				loop := path[slices.Index(path, j):]
				names := make([]string, 0, len(loop)+1)
				for _, k := range append(slices.Clip(loop), j) {
					names = append(names, where(k))
				}
				return fmt.Errorf("$ref loop: %s applies to the same value again and again; a reference back must pass through properties or items",
					jsontree.Truncate(strings.Join(names, " → "), 1000))
			case unseen:
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		state[i] = done
		path = path[:len(path)-1]
		order = append(order, i)
		return nil
	}
	for i := range g.nodes {
		if reach[i] && state[i] == unseen {
			if err := visit(int32(i)); err != nil {
				return nil, err
			}
		}
	}
	return order, nil
}

// checkChains fails when a chain of more than MaxDepth subschemas applies to one value.
func (g *graph) checkChains(order []int32, where func(int32) string) error {
	// chain[i] is the longest chain of subschemas, from i, that apply to one value.
	chain := make([]int, len(g.nodes))
	for _, i := range order {
		for _, j := range g.nodes[i].same {
			chain[i] = max(chain[i], chain[j])
		}
		if chain[i]++; chain[i] > MaxDepth+1 {
			return fmt.Errorf("a chain of more than %d subschemas ($ref, allOf, anyOf, oneOf, not, if, then, else) applies to one value, from %s; the limit is %d",
				MaxDepth, where(i), MaxDepth)
		}
	}

	return nil
}

// checkCost bounds the checks of validating one value, at every depth, by
// MaxValueChecks, and records the most it can take (valueChecks).
func (g *graph) checkCost(order []int32, where func(int32) string) error {
	// cost[i], for values d levels below the one subschema i applies to, bounds the
	// checks of validating one of them: the worst member or item, level by level, with
	// what applies to it through the same-value edges. A sum that passes the limit
	// stays just above it.
	ceiling := int64(MaxValueChecks + 1)
	add := func(a, b int64) int64 { return min(a+b, ceiling) }
	prev := make([]int64, len(g.nodes))
	cost := make([]int64, len(g.nodes))
	at := func(j int32) int64 {
		if j == none {
			return 0
		}
		return prev[j]
	}
	for d := 0; d <= jsontree.MaxArgumentDepth; d++ {
		for _, i := range order {
			n := &g.nodes[i]
			var c int64
			if d == 0 {
				c = min(n.checks, ceiling)
			} else {
				member := at(n.additional)
				for _, j := range n.propList {
					member = max(member, prev[j])
				}
				member = add(member, add(at(n.unevaluated), at(n.names)))
				for _, j := range n.patternProps {
					member = add(member, at(j))
				}
				item := add(at(n.items), at(n.additionalItems))
				for _, j := range n.prefix {
					item = max(item, at(j))
				}
				item = add(item, add(at(n.containsItem), at(n.uneval)))
				c = max(member, item)
			}
			for _, j := range n.same {
				c = add(c, cost[j])
			}
			cost[i] = c
		}
		if d == 0 {
			// A subschema that applies to one value too much does so wherever it is
			// used: name the first one.
			for _, i := range order {
				if cost[i] > MaxValueChecks {
					return fmt.Errorf("validating one value against %s could take more than %d checks (its subschemas and references multiply); the limit is %d",
						where(i), MaxValueChecks, MaxValueChecks)
				}
			}
		} else if cost[0] > MaxValueChecks {
			return fmt.Errorf("validating a value %d levels down could take more than %d checks (the subschemas and references multiply); the limit is %d",
				d, MaxValueChecks, MaxValueChecks)
		}
		g.valueChecks = max(g.valueChecks, cost[0])
		prev, cost = cost, prev
	}
	return nil
}
