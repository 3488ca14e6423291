package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// A worker declares facades (unfolding tools) as trees over its group's tools. The router
// keeps each facade as an entry of the routing table, like a tool, so that a selectable
// facade can be invoked on a replica, and builds the facade the loop sees from the tree:
// plain and by-category facades unfold in the orchestrator without contacting a worker;
// a selectable facade asks a replica's selector and binds the chosen tools to the state
// it returns.

// maxFacadeDepth bounds how deeply facades nest, as the worker SDK does.
const maxFacadeDepth = 32

// flattenFacades validates the facade trees of a group and returns every facade in them,
// outermost first.
func flattenFacades(gr *toolpb.GroupRegistration, tools map[string]parsedTool, add func(name, format string, args ...any)) []parsedTool {
	var out []parsedTool
	seen := map[string]bool{}
	var walk func(n *toolpb.FacadeNode, depth int)
	walk = func(n *toolpb.FacadeNode, depth int) {
		name := n.GetDefinition().GetName()
		switch {
		case depth >= maxFacadeDepth:
			add(name, "facade %q nests deeper than %d levels", name, maxFacadeDepth)
			return
		case wire.CheckID(name, toolNameRE, 64) != "":
			add(name, "facade name %s", wire.CheckID(name, toolNameRE, 64))
			return
		case seen[name]:
			add(name, "facade %q is declared twice", name)
			return
		}
		if _, clash := tools[name]; clash {
			add(name, "facade %q has the name of a tool of the group", name)
			return
		}
		seen[name] = true
		def, meta, err := parseDefinition(n.GetDefinition())
		if err != nil {
			add(name, "facade %q: %v", name, err)
			return
		}
		if len(n.GetChildren()) == 0 {
			add(name, "facade %q has no children", name)
		}
		if msg := wire.CheckText(n.GetUsageNotes(), wire.MaxDescriptionBytes); msg != "" {
			add(name, "facade %q: usage_notes %s", name, msg)
		}
		if len(n.GetChildren()) > wire.MaxGroupTools || len(n.GetCategories()) > wire.MaxGroupTools {
			add(name, "facade %q has more than %d children or categories", name, wire.MaxGroupTools)
			return
		}
		children := map[string]bool{}
		for _, c := range n.GetChildren() {
			switch x := c.GetChild().(type) {
			case *toolpb.FacadeChild_Tool:
				if _, ok := tools[x.Tool]; !ok {
					add(name, "facade %q names child %q, which is not a tool of the group", name, x.Tool)
				}
				children[x.Tool] = true
			case *toolpb.FacadeChild_Facade:
				children[x.Facade.GetDefinition().GetName()] = true
			default:
				add(name, "facade %q has an empty child", name)
			}
		}
		for _, p := range wire.CheckCategories(n, children) {
			add(name, "facade %q: %s", name, p)
		}
		if len(n.GetCategories()) > 0 && n.GetSelectable() {
			add(name, "facade %q cannot be both by-category and selectable", name)
		}
		out = append(out, parsedTool{name: name, def: def, meta: meta, hash: facadeHash(def, meta, n), facade: n, size: int64(proto.Size(n))})
		for _, c := range n.GetChildren() {
			if f := c.GetFacade(); f != nil {
				walk(f, depth+1)
			}
		}
	}
	for _, n := range gr.GetFacades() {
		walk(n, 0)
	}
	return out
}

// facadeHash covers the facade's definition and its whole tree, so that replicas that
// declare different trees under one name conflict like tools with different definitions.
func facadeHash(def tool.Definition, meta tool.Metadata, n *toolpb.FacadeNode) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(n)
	sum := sha256.Sum256(append([]byte(wire.Hash(def, meta)), b...))
	return hex.EncodeToString(sum[:])
}

// children lists the names a facade's node refers to directly.
func childNames(n *toolpb.FacadeNode) []string {
	var out []string
	for _, c := range n.GetChildren() {
		switch x := c.GetChild().(type) {
		case *toolpb.FacadeChild_Tool:
			out = append(out, x.Tool)
		case *toolpb.FacadeChild_Facade:
			out = append(out, x.Facade.GetDefinition().GetName())
		}
	}
	return out
}

// toolLocked returns what the loop sees of an entry: a remote tool, or a facade built
// from the entry's tree. r.mu must be held (for reading).
func (r *Router) toolLocked(e *toolEntry) tool.Tool {
	if e.facade == nil {
		return newRemoteTool(r, e)
	}
	n := e.facade
	var children []tool.Tool
	byName := map[string]tool.Tool{}
	for _, name := range childNames(n) {
		c, ok := r.tools[name]
		if !ok {
			continue // its last replica left; the facade offers what remains
		}
		t := r.toolLocked(c)
		children = append(children, t)
		byName[name] = t
	}
	var opts []tool.FacadeOption
	if n.GetExclusive() {
		opts = append(opts, tool.Exclusive())
	}
	if n.GetUsageNotes() != "" {
		opts = append(opts, tool.UsageNotes(n.GetUsageNotes()))
	}
	if n.GetNoGuideTool() {
		opts = append(opts, tool.NoGuideTool())
	}
	if n.GetNoContextTool() {
		opts = append(opts, tool.NoContextTool())
	}
	def := e.def
	switch {
	case n.GetSelectable():
		return tool.Selectable(def.Name, def.Description, def.InputSchema, children, &remoteSelector{r: r, facade: newRemoteTool(r, e), children: byName}, opts...)
	case len(n.GetCategories()) > 0:
		var cats []tool.Category
		for _, c := range n.GetCategories() {
			cat := tool.Category{Name: c.GetName()}
			for _, name := range c.GetChildren() {
				if t, ok := byName[name]; ok {
					cat.Tools = append(cat.Tools, t)
				}
			}
			cats = append(cats, cat)
		}
		if p := n.GetCategoryParameter(); p != "" {
			opts = append(opts, tool.CategoryParameter(p))
		}
		return tool.ByCategory(def.Name, def.Description, cats, opts...)
	default:
		return tool.Of(def.Name, def.Description, children, opts...)
	}
}

// remoteSelector runs a selectable facade's selector on a replica: the worker answers
// with the children it chose and the state it bound them to, and the router hands back
// those children bound to that state, which then lives in the loop's tool set.
type remoteSelector struct {
	r        *Router
	facade   *remoteTool
	children map[string]tool.Tool
}

// Select runs the selector under the run's journal, as a call of the facade's tool: a
// resumed run gets the selection the worker made before, from the journal, instead of
// asking a replica again (whose answer, or group, may since have changed).
func (s *remoteSelector) Select(ctx context.Context, input string) ([]tool.Tool, error) {
	res, resp := s.facade.journaled(ctx, input)
	if res.IsError() {
		return nil, fmt.Errorf("%s", res.Content)
	}
	sel := resp.GetSelection()
	if sel == nil {
		return nil, fmt.Errorf("the worker did not say which tools facade '%s' selects", s.facade.def.Name)
	}
	state := toolcall.NewState(sel.GetState())
	out := make([]tool.Tool, 0, len(sel.GetTools())+len(sel.GetCreated()))
	for _, name := range sel.GetTools() {
		c, ok := s.children[name]
		if !ok {
			return nil, fmt.Errorf("facade '%s' selected '%s', which is not one of its children", s.facade.def.Name, name)
		}
		out = append(out, Bound(c, state))
	}
	created, err := s.created(sel)
	if err != nil {
		return nil, err
	}
	for _, c := range created {
		out = append(out, Bound(c, state))
	}
	return out, nil
}

// created turns the tools the selector created into remote tools that show their own
// definitions and send their calls to their template, on any replica of the group. A
// created tool must come from a tool child of the facade and have a name of its own: not
// the facade's, a child's, or another tool's of the selection.
func (s *remoteSelector) created(sel *toolpb.Selection) ([]tool.Tool, error) {
	name := s.facade.def.Name
	if n := len(sel.GetCreated()); n > wire.MaxCreatedTools {
		return nil, fmt.Errorf("facade '%s' created %d tools; a selection may create at most %d", name, n, wire.MaxCreatedTools)
	}
	taken := map[string]bool{name: true}
	for n := range s.children {
		taken[n] = true
	}
	for _, n := range sel.GetTools() {
		taken[n] = true
	}
	out := make([]tool.Tool, 0, len(sel.GetCreated()))
	for _, c := range sel.GetCreated() {
		def, meta, err := wire.ParseCreated(c)
		if err != nil {
			return nil, fmt.Errorf("facade '%s' created a tool that cannot be offered: %w", name, err)
		}
		tmpl, ok := s.children[c.GetTemplate()].(*remoteTool)
		if !ok {
			return nil, fmt.Errorf("facade '%s' created '%s' from template '%s', which is not a tool among its children", name, def.Name, c.GetTemplate())
		}
		if taken[def.Name] {
			return nil, fmt.Errorf("facade '%s' created '%s', a name the facade, one of its children or another tool of the selection already has", name, def.Name)
		}
		taken[def.Name] = true
		rt := *tmpl
		rt.def, rt.meta, rt.template, rt.created = def, meta, tmpl.def.Name, def.Name
		out = append(out, &rt)
	}
	return out, nil
}

// bound is a tool bound to state: every call carries the state, and the state the tool
// returns replaces it for the next call of any tool bound to it.
type bound struct {
	tool.Tool
	state *tool.State
}

// Bound returns t bound to state.
func Bound(t tool.Tool, state *tool.State) tool.Tool { return bound{t, state} }

// Delegate exposes the bound tool.
func (b bound) Delegate() tool.Tool { return b.Tool }

// Call calls the tool with the state in its context.
func (b bound) Call(ctx context.Context, input string) (tool.Result, error) {
	return b.Tool.Call(toolcall.WithState(ctx, b.state), input)
}
