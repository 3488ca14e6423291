package worker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// A group declares facades as trees over its tools. The worker registers every leaf tool
// of a tree as a tool of the group and describes each facade as a FacadeNode of the
// facade's own kind (tool.Facade.Kind): the orchestrator unfolds plain and by-category
// facades itself and calls the worker only for a selectable facade, whose selector runs
// here (see selectFacade).

// maxFacadeDepth bounds nesting, as the orchestrator does.
const maxFacadeDepth = 32

// servedFacade is a facade the worker serves.
type servedFacade struct {
	// tool is the facade as the group gave it: its definition is what the model sees.
	tool tool.Tool
	// facade is the tool.Facade found beneath wrappers.
	facade tool.Facade
	group  string
}

// catalog is what New builds from the groups: the registration's groups and what
// Invoke dispatches on.
type catalog struct {
	groups  []*toolpb.GroupRegistration
	tools   map[string]tool.Tool
	hashes  map[string]string
	facades map[string]*servedFacade
	group   map[string]string // tool or facade name → group role
	// templates are the tools that serve the tools selectors create (tool.Template).
	templates map[string]tool.Template
}

func buildCatalog(groups []Group) (*catalog, error) {
	if len(groups) == 0 {
		return nil, fmt.Errorf("%w: no groups", ErrInvalidGroup)
	}
	c := &catalog{
		tools:     map[string]tool.Tool{},
		hashes:    map[string]string{},
		facades:   map[string]*servedFacade{},
		group:     map[string]string{},
		templates: map[string]tool.Template{},
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
	if len(g.DomainTypes) > wire.MaxDomainTypes {
		return nil, fmt.Errorf("%w: group %q has %d domain types; the limit is %d", ErrInvalidGroup, g.Role, len(g.DomainTypes), wire.MaxDomainTypes)
	}
	seenTypes := map[string]bool{}
	for _, d := range g.DomainTypes {
		if err := wire.CheckDomainType(wire.DomainTypeToProto(d)); err != nil {
			return nil, fmt.Errorf("%w: group %q: %v", ErrInvalidGroup, g.Role, err)
		}
		if seenTypes[d.TypeName] {
			return nil, fmt.Errorf("%w: group %q declares domain type %q twice", ErrInvalidGroup, g.Role, d.TypeName)
		}
		seenTypes[d.TypeName] = true
		gr.DomainTypes = append(gr.DomainTypes, wire.DomainTypeToProto(d))
	}
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
	hash := wire.Hash(def, meta)
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
	if tm, ok := tool.As[tool.Template](t); ok {
		b.c.templates[def.Name] = tm
	}
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

	switch f.Kind() {
	case tool.FacadeByCategory:
		param, cats := f.Categories()
		node.CategoryParameter = param
		for _, cat := range cats {
			names := selectedNames(cat.Tools)
			for _, n := range names {
				if !slices.Contains(children, n) {
					return nil, fmt.Errorf("%w: group %q: facade %q: category %q holds %q, which is not one of its children", ErrInvalidGroup, b.role, name, cat.Name, n)
				}
			}
			node.Categories = append(node.Categories, &toolpb.FacadeCategory{Name: cat.Name, Children: names})
		}
		inFacade := map[string]bool{}
		for _, c := range children {
			inFacade[c] = true
		}
		// The orchestrator refuses what these checks find: better to fail at start.
		if problems := wire.CheckCategories(node, inFacade); len(problems) > 0 {
			return nil, fmt.Errorf("%w: group %q: facade %q: %s", ErrInvalidGroup, b.role, name, strings.Join(problems, "; "))
		}
	case tool.FacadeSelectable:
		node.Selectable = true
	}
	return node, nil
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
