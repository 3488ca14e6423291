// Package celexpr compiles the CEL expressions of the orchestrator's config that decide
// what reaches a tool group: context converters (`kind: cel`, what of a call's
// ToolCallContext a group's workers or MCP server receive) and MCP tool filters (which
// of an MCP server's tools a group offers), and call policies (whether a call of a tool
// goes on, is denied or waits for approval, by the tool, its arguments and the caller).
// Operators who do not write Go express there what a program embedding the orchestrator
// writes as functions.
package celexpr

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// MaxBytes bounds the source of one expression.
const MaxBytes = 4 << 10

// cost bounds the work of one evaluation, in CEL cost units, and callCost that of one
// conversion, every entry's keep and every set together: an expression over a large
// context cannot spin.
const (
	cost     = 100_000
	callCost = 1_000_000
)

// Converter is a context converter from CEL: Keep (a bool over `key` and `value`, with
// `context`, `group` and `now`) decides which entries pass, all of them when it is
// empty; then each of Set's expressions (a string, with `context`, `group` and `now`)
// gives its key's value, over what Keep passed. An expression that fails on a call (a
// key the context lacks), or runs past the cost one conversion may take, leaves its entry
// out: a converter never lets through what it could not decide.
type Converter struct {
	group string
	// hidden are keys the expressions never see (secrets).
	hidden func(key string) bool
	keep   cel.Program
	set    []setter
	src    string
}

type setter struct {
	key string
	prg cel.Program
}

var _ ctxconv.Converter = (*Converter)(nil)

// converterEnv is the environment of converter expressions. Optional syntax is on, so
// that `context.?user_id.orValue("")` reads a key that may be missing.
func converterEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.OptionalTypes(),
		cel.Variable("context", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("group", cel.StringType),
		cel.Variable("now", cel.TimestampType),
		cel.Variable("key", cel.StringType),
		cel.Variable("value", cel.StringType),
	)
}

// NewConverter compiles a converter for group's calls. keep may be empty (every entry
// passes); set's keys are the context keys it writes. The entries hidden is true for
// (secrets) are out of the expressions' sight, so that set cannot copy one under
// another name; nil hides none.
func NewConverter(group, keep string, set map[string]string, hidden func(key string) bool) (*Converter, error) {
	env, err := converterEnv()
	if err != nil {
		return nil, err
	}
	c := &Converter{group: group, hidden: hidden, src: "cel"}
	if keep != "" {
		if c.keep, err = compile(env, keep, cel.BoolType); err != nil {
			return nil, fmt.Errorf("keep: %w", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if k == "" || toolctx.IsReserved(k) {
			return nil, fmt.Errorf("set: the key %q is empty or reserved", k)
		}
		prg, err := compile(env, set[k], cel.StringType)
		if err != nil {
			return nil, fmt.Errorf("set.%s: %w", k, err)
		}
		c.set = append(c.set, setter{key: k, prg: prg})
	}
	if keep == "" && len(set) == 0 {
		return nil, errors.New("a cel converter needs keep, set or both")
	}
	return c, nil
}

// compile compiles src, which must yield want (or dyn, checked on each call).
func compile(env *cel.Env, src string, want *cel.Type) (cel.Program, error) {
	if len(src) > MaxBytes {
		return nil, fmt.Errorf("the expression is %d bytes; the limit is %d", len(src), MaxBytes)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression %q: %w", src, iss.Err())
	}
	if out := ast.OutputType(); !out.IsExactType(want) && !out.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("the CEL expression %q yields %s, not %s", src, out, want)
	}
	return env.Program(ast, cel.CostLimit(cost), cel.EvalOptions(cel.OptTrackCost))
}

// budget is what is left of one conversion's cost.
type budget struct{ left int64 }

// eval evaluates prg within the budget; an evaluation that fails, or once the budget is
// spent, is an error.
func (b *budget) eval(prg cel.Program, vars map[string]any) (ref.Val, error) {
	if b.left <= 0 {
		return nil, errors.New("the conversion's cost limit is spent")
	}
	out, det, err := prg.Eval(vars)
	if det != nil && det.ActualCost() != nil {
		b.left -= int64(*det.ActualCost())
	}
	return out, err
}

// Convert gives what of ctx the group receives. Reserved keys never pass.
func (c *Converter) Convert(ctx toolctx.Context) toolctx.Context {
	in := ctx.WithoutReserved().Map()
	if c.hidden != nil {
		maps.DeleteFunc(in, func(k, _ string) bool { return c.hidden(k) })
	}
	vars := map[string]any{"context": in, "group": c.group, "now": time.Now().UTC()}
	b := &budget{left: callCost}
	out := map[string]string{}
	for k, v := range in {
		if c.keep == nil {
			out[k] = v
			continue
		}
		vars["key"], vars["value"] = k, v
		if r, err := b.eval(c.keep, vars); err == nil && r == types.True {
			out[k] = v
		}
	}
	vars["key"], vars["value"] = "", ""
	for _, s := range c.set {
		r, err := b.eval(s.prg, vars)
		if err != nil {
			delete(out, s.key)
			continue
		}
		if v, ok := r.Value().(string); ok {
			out[s.key] = v
		} else {
			delete(out, s.key)
		}
	}
	return toolctx.FromMap(out)
}

// String names the converter in logs.
func (c *Converter) String() string { return c.src }

// Tool is what a tool filter sees of an MCP server's tool.
type Tool struct {
	Name, Description string
	// Annotations are the tool's hints: read_only, destructive, idempotent and
	// open_world (booleans, present when the server gives them) and title.
	Annotations map[string]any
}

// Filter is a compiled MCP tool filter: a bool over `name`, `description` and
// `annotations`.
type Filter struct{ prg cel.Program }

// NewFilter compiles a tool filter.
func NewFilter(src string) (*Filter, error) {
	env, err := cel.NewEnv(
		cel.OptionalTypes(),
		cel.Variable("name", cel.StringType),
		cel.Variable("description", cel.StringType),
		cel.Variable("annotations", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		return nil, err
	}
	prg, err := compile(env, src, cel.BoolType)
	if err != nil {
		return nil, err
	}
	return &Filter{prg: prg}, nil
}

// Keep reports whether the filter keeps t. A filter that fails on a tool (it reads an
// annotation the server did not give, say) leaves the tool out, and says why.
func (f *Filter) Keep(t Tool) (bool, error) {
	ann := t.Annotations
	if ann == nil {
		ann = map[string]any{}
	}
	r, err := (&budget{left: callCost}).eval(f.prg, map[string]any{"name": t.Name, "description": t.Description, "annotations": ann})
	if err != nil {
		return false, err
	}
	b, ok := r.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the filter yields %v, not a bool", r.Value())
	}
	return b, nil
}
