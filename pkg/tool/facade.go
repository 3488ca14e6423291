package tool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/jsontree"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
)

// Facade is a progressive tool: the model first sees only the facade, and calling it
// makes its children available in its place. The orchestrator's unfolding strategy finds
// a Facade beneath wrappers with As, asks it which children the call selected, and
// changes the tool set; the facade's own Call only answers the model (listing the
// selected children), or dispatches a shortcut call to a child.
//
// Children may be any tools, including remote ones and other facades (nesting to any
// depth). Of, ByCategory and Selectable build facades; AddTools and AddObject extend
// them without losing their selection.
type Facade interface {
	Tool
	// Kind says how the facade selects: a worker registers it as that kind, and the
	// orchestrator unfolds plain and by-category facades without calling the worker.
	Kind() FacadeKind
	// Children are the tools the facade holds, as far as they are known before a call
	// (a selectable facade may create further tools when it is called).
	Children() []Tool
	// Categories are the categories of a FacadeByCategory facade, in order, and the name
	// of the parameter that picks one; nil and "" for the other kinds.
	Categories() (parameter string, categories []Category)
	// Select returns the tools a call with input makes available. An empty selection
	// leaves the tool set as it is.
	Select(ctx context.Context, input string) ([]Tool, error)
	// Options says how unfolding treats the facade.
	Options() FacadeOptions
}

// FacadeKind says how a facade chooses the children a call makes available.
type FacadeKind int

// The kinds of facade.
const (
	// FacadePlain makes all its children available (Of).
	FacadePlain FacadeKind = iota
	// FacadeByCategory makes available the children of the category that its one
	// parameter names, or all of them for an unknown category (ByCategory).
	FacadeByCategory
	// FacadeSelectable lets a selector decide from the call's arguments, and may bind
	// the tools it selects to state (Selectable, and any Facade implemented elsewhere
	// that AddTools wraps).
	FacadeSelectable
)

// String names the kind.
func (k FacadeKind) String() string {
	switch k {
	case FacadePlain:
		return "plain"
	case FacadeByCategory:
		return "by-category"
	case FacadeSelectable:
		return "selectable"
	default:
		return "unknown"
	}
}

// FacadeOptions say how unfolding treats a facade.
type FacadeOptions struct {
	// Exclusive removes every other tool when the facade unfolds, so that the model can
	// only pick among the children.
	Exclusive bool
	// UsageNotes tell the model how to use the children; they are shown only once the
	// facade has been called (after the list of the children the call made available,
	// and in the context tool).
	UsageNotes string
	// NoGuideTool leaves out the guide tool, which takes the facade's name after unfolding
	// and answers a repeated call with the list of children.
	NoGuideTool bool
	// NoContextTool leaves out the "<name>_context" tool, which carries the facade's
	// description, the children and the usage notes after unfolding.
	NoContextTool bool
}

// FacadeOption configures a facade built by Of, ByCategory or Selectable.
type FacadeOption func(*facadeConfig)

type facadeConfig struct {
	opts          FacadeOptions
	categoryParam string
}

// Exclusive makes the facade remove every other tool when it unfolds.
func Exclusive() FacadeOption { return func(c *facadeConfig) { c.opts.Exclusive = true } }

// UsageNotes sets the notes shown with the children once the facade has been called.
func UsageNotes(notes string) FacadeOption {
	return func(c *facadeConfig) { c.opts.UsageNotes = notes }
}

// NoGuideTool switches off the guide tool for the facade.
func NoGuideTool() FacadeOption { return func(c *facadeConfig) { c.opts.NoGuideTool = true } }

// NoContextTool switches off the "<name>_context" tool for the facade.
func NoContextTool() FacadeOption { return func(c *facadeConfig) { c.opts.NoContextTool = true } }

// CategoryParameter names the parameter of a ByCategory facade; the default is
// DefaultCategoryParameter. Other facades ignore it.
func CategoryParameter(name string) FacadeOption {
	return func(c *facadeConfig) { c.categoryParam = name }
}

// DefaultCategoryParameter is the parameter a ByCategory facade reads the category from.
const DefaultCategoryParameter = "category"

// AllCategory is the category CategorizedTools adds for the union of all tools when some
// tools have no category, and AddTools adds to a ByCategory facade.
const AllCategory = "all"

// Selector decides which tools a call of a selectable facade makes available, from the
// call's arguments. It may return tools it creates for those arguments (a cart bound to
// a connection string). A Facade is a Selector, and so may be a stub of a remote one.
type Selector interface {
	Select(ctx context.Context, input string) ([]Tool, error)
}

// SelectorFunc adapts a function to a Selector.
type SelectorFunc func(ctx context.Context, input string) ([]Tool, error)

// Select calls f.
func (f SelectorFunc) Select(ctx context.Context, input string) ([]Tool, error) {
	return f(ctx, input)
}

var _ Selector = SelectorFunc(nil)

// Category is a named group of the tools of a ByCategory facade.
type Category struct {
	Name  string
	Tools []Tool
}

// CategorizedTool is a tool with the category it belongs to; "" means none.
type CategorizedTool struct {
	Tool     Tool
	Category string
}

// CategorizedTools groups tools into categories, in the order the categories first
// appear: each category holds
// its own tools and then every tool without a category; when there is at least one tool
// without a category, a category AllCategory holding every tool (in the given order)
// comes last. A category that is itself named AllCategory is that category.
func CategorizedTools(tools []CategorizedTool) []Category {
	var order []string
	own := map[string][]Tool{}
	var uncategorised, every []Tool
	for _, ct := range tools {
		if ct.Tool == nil {
			continue
		}
		every = append(every, ct.Tool)
		if ct.Category == "" {
			uncategorised = append(uncategorised, ct.Tool)
			continue
		}
		if _, ok := own[ct.Category]; !ok {
			order = append(order, ct.Category)
		}
		own[ct.Category] = append(own[ct.Category], ct.Tool)
	}
	var out []Category
	for _, name := range order {
		if name == AllCategory && len(uncategorised) > 0 {
			continue // it becomes the union below
		}
		out = append(out, Category{Name: name, Tools: append(slices.Clone(own[name]), uncategorised...)})
	}
	if len(uncategorised) > 0 {
		out = append(out, Category{Name: AllCategory, Tools: every})
	}
	return out
}

// facade is the one implementation behind Of, ByCategory and Selectable. How it selects
// depends on which of categories and selector is set: by category, by selector (plus the
// tools added later), or else all children.
type facade struct {
	name, description string
	schema            schema.Schema
	opts              FacadeOptions
	children          []Tool

	categories    []Category // ByCategory
	categoryParam string

	selector Selector // Selectable
	added    []Tool   // tools added to a selectable facade; always selected

	memo *selectionMemo
}

var _ Facade = (*facade)(nil)

func newFacade(name, description string, opts []FacadeOption) (*facade, facadeConfig) {
	c := facadeConfig{categoryParam: DefaultCategoryParameter}
	for _, o := range opts {
		o(&c)
	}
	return &facade{name: name, description: description, opts: c.opts, memo: &selectionMemo{}}, c
}

// Of returns a facade with the empty input schema that makes all its children available.
func Of(name, description string, children []Tool, opts ...FacadeOption) Facade {
	f, _ := newFacade(name, description, opts)
	f.children = uniqueTools(children)
	return f
}

// ByCategory returns a facade whose single required string parameter (named
// DefaultCategoryParameter unless CategoryParameter says otherwise) picks one of the
// categories, in the given order:
//
//	{"type":"object","properties":{"category":{"type":"string","description":"Category to access. Available: read, write","enum":["read","write"]}},"required":["category"]}
//
// A call makes the tools of that category available; an unknown category, a missing,
// blank or non-string parameter and unparseable arguments make all children available.
// The children are the union of the categories' tools. CategorizedTools builds the
// categories from tools tagged with a category.
func ByCategory(name, description string, byCategory []Category, opts ...FacadeOption) Facade {
	f, c := newFacade(name, description, opts)
	f.categoryParam = c.categoryParam
	f.setCategories(byCategory)
	return f
}

// Selectable returns a facade with the given input schema whose selector decides, from
// the call's arguments, which tools become available; it may return the children or
// tools it creates for the arguments. The children are what the facade shows before it
// is called (FormatTree, shortcut calls). A facade served by a worker creates tools
// through a Template listed among the children (see NewTemplate), so that any replica
// can rebuild them.
func Selectable(name, description string, input schema.Schema, children []Tool, selector Selector, opts ...FacadeOption) Facade {
	f, _ := newFacade(name, description, opts)
	f.schema = input
	f.children = uniqueTools(children)
	f.selector = selector
	return f
}

func (f *facade) setCategories(cats []Category) {
	f.categories = make([]Category, 0, len(cats))
	names := make([]string, 0, len(cats))
	var all []Tool
	for _, cat := range cats {
		f.categories = append(f.categories, Category{Name: cat.Name, Tools: slices.Clone(cat.Tools)})
		names = append(names, cat.Name)
		all = append(all, cat.Tools...)
	}
	f.children = uniqueTools(all)
	f.schema = schema.Params(schema.String(f.categoryParam, "Category to access. Available: "+strings.Join(names, ", ")).WithEnum(names...))
}

func (f *facade) Definition() Definition {
	return Definition{Name: f.name, Description: f.description, InputSchema: f.schema}
}

func (f *facade) Metadata() Metadata { return Metadata{} }

func (f *facade) Children() []Tool { return slices.Clone(f.children) }

func (f *facade) Kind() FacadeKind {
	switch {
	case f.categories != nil:
		return FacadeByCategory
	case f.selector != nil:
		return FacadeSelectable
	default:
		return FacadePlain
	}
}

func (f *facade) Categories() (string, []Category) {
	if f.categories == nil {
		return "", nil
	}
	out := make([]Category, len(f.categories))
	for i, c := range f.categories {
		out[i] = Category{Name: c.Name, Tools: slices.Clone(c.Tools)}
	}
	return f.categoryParam, out
}

func (f *facade) Options() FacadeOptions { return f.opts }

// Call answers the model. Arguments that name a child (see shortcut) call that child
// and return its result; otherwise the answer lists the selection, which
// is kept for the Select of the same call that the injection strategy makes next, so
// that a selector runs once per call.
func (f *facade) Call(ctx context.Context, input string) (Result, error) {
	if child, args, ok := f.shortcut(input); ok {
		return callShortcut(ctx, child, args)
	}
	selected, err := f.selectTools(ctx, input)
	if err != nil {
		if _, ok := AsSignal(err); ok {
			return Result{}, err
		}
		return ErrorFrom(err), nil
	}
	f.memo.put(ctx, input, selected)
	names := make([]string, len(selected))
	for i, t := range selected {
		names[i] = t.Definition().Name
	}
	return Text(toolinternal.UnfoldMessage(names, f.opts.UsageNotes)), nil
}

// Select returns the tools a call with input makes available.
func (f *facade) Select(ctx context.Context, input string) ([]Tool, error) {
	if selected, ok := f.memo.take(ctx, input); ok {
		return selected, nil
	}
	return f.selectTools(ctx, input)
}

func (f *facade) selectTools(ctx context.Context, input string) ([]Tool, error) {
	switch {
	case f.categories != nil:
		return f.selectCategory(input), nil
	case f.selector != nil:
		selected, err := f.selector.Select(ctx, input)
		if err != nil {
			return nil, fmt.Errorf("selecting the tools of '%s': %w", f.name, err)
		}
		return uniqueTools(append(slices.Clone(selected), f.added...)), nil
	default:
		return slices.Clone(f.children), nil
	}
}

// selectCategory reads the category parameter; anything but a known category name
// selects all children.
func (f *facade) selectCategory(input string) []Tool {
	if tree, err := jsontree.Decode([]byte(input), jsontree.MaxArgumentDepth); err == nil {
		if obj, ok := tree.(*jsontree.Object); ok {
			if name, ok := obj.Vals[f.categoryParam].(string); ok {
				for _, cat := range f.categories {
					if cat.Name == name {
						return slices.Clone(cat.Tools)
					}
				}
			}
		}
	}
	return slices.Clone(f.children)
}

// shortcut implements shortcut dispatch: when the arguments are a JSON
// object one of whose members (the first in member order) is named after a child, the
// child is called at once with that member's value. Blank, {}, invalid JSON, arrays and
// objects without such a member take the normal path.
func (f *facade) shortcut(input string) (Tool, string, bool) {
	if jsontree.IsBlank(input) || len(f.children) == 0 {
		return nil, "", false
	}
	tree, err := jsontree.Decode([]byte(input), jsontree.MaxArgumentDepth)
	if err != nil {
		return nil, "", false
	}
	obj, ok := tree.(*jsontree.Object)
	if !ok {
		return nil, "", false
	}
	for _, key := range obj.Keys {
		for _, child := range f.children {
			if child.Definition().Name == key {
				return child, string(jsontree.Encode(obj.Vals[key], false)), true
			}
		}
	}
	return nil, "", false
}

// callShortcut calls child with args. An object is validated against the child's schema
// first, as the loop validates every call, so that a remote child is not contacted with
// arguments it would refuse; a scalar or an array passes as it is.
func callShortcut(ctx context.Context, child Tool, args string) (Result, error) {
	if strings.HasPrefix(args, "{") {
		canonical, err := child.Definition().InputSchema.Validate(args)
		if err != nil {
			name := child.Definition().Name
			msg := fmt.Sprintf("invalid arguments for tool '%s': %s. Call it again with arguments that match its schema.",
				name, strings.TrimPrefix(err.Error(), schema.ErrInvalidArguments.Error()+": "))
			return ErrorWithCode(CodeInvalidArguments, msg), nil
		}
		args = canonical
	}
	res, err := child.Call(ctx, args)
	if d := toolinternal.DispatchFrom(ctx); d != nil && err == nil && child.Metadata().ReturnDirect {
		d.Direct = true
	}
	return res, err
}

// AddTools returns f with tools added to its children, keeping its name, description,
// schema, options and way of selecting (the selector and the category schema are kept).
// A child whose name f already has is skipped.
//
//   - Of: the tools are selected with the others.
//   - ByCategory: the tools have no category, so they join every category and the
//     category AllCategory, which is added (to the schema's enum too) if missing.
//   - Selectable, or a Facade implemented elsewhere (it becomes the selector): the tools
//     are selected in addition to whatever the selector selects.
func AddTools(f Facade, tools ...Tool) Facade {
	tools = slices.DeleteFunc(slices.Clone(tools), func(t Tool) bool { return t == nil })
	own, ok := f.(*facade)
	if !ok {
		def := f.Definition()
		own = &facade{
			name: def.Name, description: def.Description, schema: def.InputSchema, opts: f.Options(),
			children: uniqueTools(f.Children()), selector: f, memo: &selectionMemo{},
		}
	}
	g := *own
	g.memo = &selectionMemo{}
	existing := map[string]bool{}
	for _, c := range g.children {
		existing[c.Definition().Name] = true
	}
	var fresh []Tool
	for _, t := range uniqueTools(tools) {
		if !existing[t.Definition().Name] {
			fresh = append(fresh, t)
		}
	}
	if len(fresh) == 0 {
		return &g
	}
	switch {
	case g.categories != nil:
		cats := make([]Category, 0, len(g.categories)+1)
		hasAll := false
		for _, cat := range g.categories {
			if cat.Name == AllCategory {
				hasAll = true
				cat.Tools = g.children // the union, as CategorizedTools makes it
			}
			cats = append(cats, Category{Name: cat.Name, Tools: append(slices.Clone(cat.Tools), fresh...)})
		}
		children := append(slices.Clone(g.children), fresh...)
		if !hasAll {
			cats = append(cats, Category{Name: AllCategory, Tools: children})
		}
		g.setCategories(cats)
		g.children = children // the old children first, then the added ones
	case g.selector != nil:
		g.children = append(slices.Clone(g.children), fresh...)
		g.added = append(slices.Clone(g.added), fresh...)
	default:
		g.children = append(slices.Clone(g.children), fresh...)
	}
	return &g
}

// AddObject returns f with the tools that o offers now added, as AddTools does. A facade
// among them nests.
func AddObject(f Facade, o Object) Facade { return AddTools(f, o.Tools()...) }

// uniqueTools drops nil tools and every tool whose name an earlier one has.
func uniqueTools(tools []Tool) []Tool {
	seen := map[string]bool{}
	out := make([]Tool, 0, len(tools))
	for _, t := range tools {
		if t == nil {
			continue
		}
		name := t.Definition().Name
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, t)
	}
	return out
}

// maxRememberedSelections bounds the selections a facade keeps between its Call and the
// strategy's Select; a call whose selection is never taken (the loop ended) is forgotten
// once this many newer ones came.
const maxRememberedSelections = 64

// selectionMemo keeps the selection of a call, keyed by the call's identity and input,
// until the injection strategy asks for it. Calls without a run and call id are not kept.
type selectionMemo struct {
	mu    sync.Mutex
	order []string
	m     map[string][]Tool
}

func memoKey(ctx context.Context, input string) string {
	info, ok := CallInfoFrom(ctx)
	if !ok || info.IdempotencyKey() == "" {
		return ""
	}
	return info.IdempotencyKey() + "\x00" + info.LoopID + "\x00" + input
}

func (s *selectionMemo) put(ctx context.Context, input string, selected []Tool) {
	key := memoKey(ctx, input)
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]Tool{}
	}
	if _, ok := s.m[key]; !ok {
		s.order = append(s.order, key)
	}
	s.m[key] = slices.Clone(selected)
	for len(s.order) > maxRememberedSelections {
		delete(s.m, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *selectionMemo) take(ctx context.Context, input string) ([]Tool, bool) {
	key := memoKey(ctx, input)
	if key == "" {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	selected, ok := s.m[key]
	if ok {
		delete(s.m, key)
		s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	}
	return selected, ok
}
