package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// A group declares facades (SPEC S7) as trees over its tools. The worker registers every
// leaf tool of a tree as a tool of the group and describes each facade as a FacadeNode;
// the orchestrator unfolds plain and by-category facades itself and calls the worker only
// for a selectable facade, whose selector runs here (see selectFacade).
//
// Facades are opaque values of pkg/tool, so their kind is read from how they behave:
//
//   - plain (tool.Of): the input schema has no properties, and selecting with {} gives
//     exactly the children and binds no state;
//   - by-category (tool.ByCategory): the schema has one property, required, of type
//     string, with an enum, described as ByCategory describes it ("Category to access.
//     Available: <the enum, comma separated>"); each category's children are learnt by
//     selecting with {"<parameter>":"<category>"} for every enum value, in order;
//   - selectable: anything else. Calling it reaches a worker, whose answer is always
//     right, so a facade of another kind that is taken for selectable still works.

// facadeKind is how the orchestrator treats a facade.
type facadeKind int

const (
	facadePlain facadeKind = iota
	facadeByCategory
	facadeSelectable
)

// maxFacadeDepth bounds nesting, as the orchestrator does.
const maxFacadeDepth = 32

// byCategoryDescription is how tool.ByCategory describes its category parameter.
const byCategoryDescription = "Category to access. Available: "

// servedFacade is a facade the worker serves.
type servedFacade struct {
	// tool is the facade as the group gave it: its definition is what the model sees.
	tool tool.Tool
	// facade is the tool.Facade found beneath wrappers.
	facade tool.Facade
	group  string
	kind   facadeKind
}

// catalog is what New builds from the groups: the registration's groups and what
// Invoke dispatches on.
type catalog struct {
	groups  []*toolpb.GroupRegistration
	tools   map[string]tool.Tool
	hashes  map[string]string
	facades map[string]*servedFacade
	group   map[string]string // tool or facade name → group role
}

// GroupRegistrations returns the groups as the worker registers them with the
// orchestrator: each group's tools (the ones given plus every leaf of its facades, sorted
// by name, with content hashes) and its facade trees. It fails as New does on a group it
// cannot serve. Tests and tools that speak the registry protocol themselves use it to
// register exactly what a worker would.
func GroupRegistrations(groups ...Group) ([]*toolpb.GroupRegistration, error) {
	c, err := buildCatalog(groups)
	if err != nil {
		return nil, err
	}
	return c.groups, nil
}

func buildCatalog(groups []Group) (*catalog, error) {
	if len(groups) == 0 {
		return nil, fmt.Errorf("%w: no groups", ErrInvalidGroup)
	}
	c := &catalog{
		tools:   map[string]tool.Tool{},
		hashes:  map[string]string{},
		facades: map[string]*servedFacade{},
		group:   map[string]string{},
	}
	roles := map[string]bool{}
	for _, g := range groups {
		if !roleRE.MatchString(g.Role) {
			return nil, fmt.Errorf("%w: role %q must match %s", ErrInvalidGroup, g.Role, roleRE)
		}
		if roles[g.Role] {
			return nil, fmt.Errorf("%w: role %q given twice", ErrInvalidGroup, g.Role)
		}
		roles[g.Role] = true
		gr, err := c.addGroup(g)
		if err != nil {
			return nil, err
		}
		c.groups = append(c.groups, gr)
	}
	return c, nil
}

// addGroup registers a group's tools and facades.
func (c *catalog) addGroup(g Group) (*toolpb.GroupRegistration, error) {
	if len(g.Tools) == 0 && len(g.Facades) == 0 {
		return nil, fmt.Errorf("%w: group %q has no tools", ErrInvalidGroup, g.Role)
	}
	gr := &toolpb.GroupRegistration{Group: &toolpb.ToolGroupInfo{
		Role: g.Role, Description: g.Description, UsageNotes: g.UsageNotes,
		Provider: g.Provider, Version: g.Version, Permissions: g.Permissions,
	}}
	b := &groupBuilder{c: c, role: g.Role, own: map[string]bool{}}
	var roots []tool.Tool
	for i, t := range g.Tools {
		if t == nil {
			return nil, fmt.Errorf("%w: group %q: tool %d is nil", ErrInvalidGroup, g.Role, i)
		}
		if _, ok := tool.As[tool.Facade](t); ok {
			roots = append(roots, t) // a facade given among the tools is a facade
			continue
		}
		if err := b.addTool(t, true); err != nil {
			return nil, err
		}
	}
	for i, f := range g.Facades {
		if f == nil {
			return nil, fmt.Errorf("%w: group %q: facade %d is nil", ErrInvalidGroup, g.Role, i)
		}
		roots = append(roots, f)
	}
	for _, f := range roots {
		node, err := b.facadeNode(f, 0)
		if err != nil {
			return nil, err
		}
		gr.Facades = append(gr.Facades, node)
	}
	for _, t := range b.tools {
		def, meta := t.Definition(), t.Metadata()
		gr.Tools = append(gr.Tools, &toolpb.RegisteredTool{Definition: wire.DefinitionToProto(def, meta), ContentHash: c.hashes[def.Name]})
	}
	sort.SliceStable(gr.Tools, func(i, j int) bool {
		return gr.Tools[i].GetDefinition().GetName() < gr.Tools[j].GetDefinition().GetName()
	})
	return gr, nil
}

// groupBuilder walks the tools and facades of one group.
type groupBuilder struct {
	c     *catalog
	role  string
	own   map[string]bool // names of the group's tools
	tools []tool.Tool
}

// addTool registers a tool of the group. A tool given in Group.Tools may appear once; a
// leaf of a facade may also appear elsewhere in the group, as long as the definition is
// the same.
func (b *groupBuilder) addTool(t tool.Tool, given bool) error {
	def, meta := t.Definition(), t.Metadata()
	hash := tool.Hash(def, meta)
	if f, clash := b.c.facades[def.Name]; clash {
		return fmt.Errorf("%w: tool %q of group %q has the name of a facade of group %q", ErrInvalidGroup, def.Name, b.role, f.group)
	}
	if prev, dup := b.c.hashes[def.Name]; dup {
		switch {
		case !b.own[def.Name]:
			return fmt.Errorf("%w: tool %q given twice (in groups %q and %q)", ErrInvalidGroup, def.Name, b.c.group[def.Name], b.role)
		case given:
			return fmt.Errorf("%w: tool %q given twice in group %q", ErrInvalidGroup, def.Name, b.role)
		case prev != hash:
			return fmt.Errorf("%w: group %q has two different tools named %q (a facade's leaf differs from another tool of that name)", ErrInvalidGroup, b.role, def.Name)
		}
		return nil
	}
	b.c.tools[def.Name] = t
	b.c.hashes[def.Name] = hash
	b.c.group[def.Name] = b.role
	b.own[def.Name] = true
	b.tools = append(b.tools, t)
	return nil
}

// facadeNode describes the facade t (a tool.Facade, possibly beneath wrappers) and
// registers its leaves.
func (b *groupBuilder) facadeNode(t tool.Tool, depth int) (*toolpb.FacadeNode, error) {
	def, meta := t.Definition(), t.Metadata()
	name := def.Name
	if depth >= maxFacadeDepth {
		return nil, fmt.Errorf("%w: group %q: facade %q nests deeper than %d levels", ErrInvalidGroup, b.role, name, maxFacadeDepth)
	}
	f, _ := tool.As[tool.Facade](t)
	if prev, dup := b.c.facades[name]; dup {
		if prev.group == b.role {
			return nil, fmt.Errorf("%w: facade %q given twice in group %q", ErrInvalidGroup, name, b.role)
		}
		return nil, fmt.Errorf("%w: facade %q given twice (in groups %q and %q)", ErrInvalidGroup, name, prev.group, b.role)
	}
	// Facade and tool names share one namespace: the orchestrator routes calls by name.
	if _, clash := b.c.tools[name]; clash {
		return nil, fmt.Errorf("%w: facade %q of group %q has the name of a tool of group %q", ErrInvalidGroup, name, b.role, b.c.group[name])
	}
	served := &servedFacade{tool: t, facade: f, group: b.role}
	b.c.facades[name] = served
	b.c.group[name] = b.role

	opts := f.Options()
	node := &toolpb.FacadeNode{
		Definition:    wire.DefinitionToProto(def, meta),
		Exclusive:     opts.Exclusive,
		UsageNotes:    opts.UsageNotes,
		NoGuideTool:   opts.NoGuideTool,
		NoContextTool: opts.NoContextTool,
	}
	var children []string
	for _, child := range f.Children() {
		if child == nil {
			continue
		}
		children = append(children, child.Definition().Name)
		if _, ok := tool.As[tool.Facade](child); ok {
			n, err := b.facadeNode(child, depth+1)
			if err != nil {
				return nil, err
			}
			node.Children = append(node.Children, &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Facade{Facade: n}})
			continue
		}
		if err := b.addTool(child, false); err != nil {
			return nil, err
		}
		node.Children = append(node.Children, &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Tool{Tool: child.Definition().Name}})
	}
	if len(children) == 0 {
		return nil, fmt.Errorf("%w: group %q: facade %q has no children", ErrInvalidGroup, b.role, name)
	}

	kind, param, categories, err := classify(f, def.InputSchema, children)
	if err != nil {
		return nil, fmt.Errorf("%w: group %q: facade %q: %v", ErrInvalidGroup, b.role, name, err)
	}
	served.kind = kind
	switch kind {
	case facadeByCategory:
		node.CategoryParameter = param
		node.Categories = categories
	case facadeSelectable:
		node.Selectable = true
	}
	return node, nil
}

// classify tells the kind of a facade from its schema and, for the kinds the
// orchestrator unfolds itself, from what it selects (see the comment at the top).
// Selections made here carry a scratch state, so that a selector that binds state
// cannot fail for want of one; a selector that binds state is selectable.
func classify(f tool.Facade, schema tool.Schema, children []string) (facadeKind, string, []*toolpb.FacadeCategory, error) {
	props, required, err := schemaShape(schema)
	if err != nil {
		return 0, "", nil, err
	}
	switch {
	case len(props) == 0:
		names, changed, err := probe(f, "{}")
		if err == nil && !changed && slices.Equal(names, children) {
			return facadePlain, "", nil, nil
		}
		return facadeSelectable, "", nil, nil
	case len(props) == 1 && len(required) == 1:
		param := required[0]
		p, ok := props[param]
		if !ok || p.Type != "string" || len(p.Enum) == 0 || p.Description != byCategoryDescription+strings.Join(p.Enum, ", ") {
			return facadeSelectable, "", nil, nil
		}
		var cats []*toolpb.FacadeCategory
		for _, value := range p.Enum {
			input, _ := json.Marshal(map[string]string{param: value})
			names, changed, err := probe(f, string(input))
			if err != nil {
				return 0, "", nil, fmt.Errorf("selecting category %q: %w", value, err)
			}
			if changed {
				return facadeSelectable, "", nil, nil
			}
			for _, n := range names {
				if !slices.Contains(children, n) {
					return 0, "", nil, fmt.Errorf("category %q selects %q, which is not one of its children", value, n)
				}
			}
			cats = append(cats, &toolpb.FacadeCategory{Name: value, Children: names})
		}
		return facadeByCategory, param, cats, nil
	default:
		return facadeSelectable, "", nil, nil
	}
}

// probe selects with input and returns the names selected (first of each name) and
// whether the selector set the state.
func probe(f tool.Facade, input string) (names []string, changed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("selector panicked: %v", p)
		}
	}()
	st := tool.NewState(nil)
	selected, err := f.Select(tool.WithState(context.Background(), st), input)
	if err != nil {
		return nil, false, err
	}
	return selectedNames(selected), st.Changed(), nil
}

// selectedNames returns the names of the selected tools, each once, in order.
func selectedNames(selected []tool.Tool) []string {
	names := []string{}
	for _, t := range selected {
		if t == nil {
			continue
		}
		if n := t.Definition().Name; !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// schemaProperty is what classify reads of a property.
type schemaProperty struct {
	Type        any      `json:"type"`
	Description string   `json:"description"`
	Enum        []string `json:"enum"`
}

// schemaShape returns the properties of a schema and its required names. A property
// whose type is not a single name has Type "" (it is not a category parameter).
func schemaShape(s tool.Schema) (map[string]schemaProperty, []string, error) {
	var shape struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(s.JSON(), &shape); err != nil {
		return nil, nil, fmt.Errorf("input schema: %v", err)
	}
	props := make(map[string]schemaProperty, len(shape.Properties))
	for name, raw := range shape.Properties {
		var p schemaProperty
		if json.Unmarshal(raw, &p) != nil {
			p = schemaProperty{} // an enum of non-strings, say: not a category parameter
		}
		if _, ok := p.Type.(string); !ok {
			p.Type = ""
		}
		props[name] = p
	}
	return props, shape.Required, nil
}
