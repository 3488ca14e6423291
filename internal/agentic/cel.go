package agentic

import (
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// predicateCost bounds the work of one evaluation, in CEL cost units.
const predicateCost = 1_000_000

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(
			cel.Variable("called", cel.ListType(cel.StringType)),
			cel.Variable("artifacts", cel.ListType(cel.DynType)),
			cel.Variable("blackboard", cel.ListType(cel.DynType)),
			cel.Variable("iteration", cel.IntType),
		)
	})
	return env, envErr
}

// predicate is a compiled playbook condition.
type predicate struct {
	src string
	prg cel.Program
}

func compilePredicate(src string) (*predicate, error) {
	if len(src) > decorators.MaxExpressionBytes {
		return nil, fmt.Errorf("the expression is %d bytes; the limit is %d", len(src), decorators.MaxExpressionBytes)
	}
	e, err := celEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression %q: %w", src, iss.Err())
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("the CEL expression %q yields %s, not bool", src, ast.OutputType())
	}
	prg, err := e.Program(ast, cel.CostLimit(predicateCost))
	if err != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", src, err)
	}
	return &predicate{src: src, prg: prg}, nil
}

// eval is the predicate's value over what a playbook has seen; an expression that fails
// (a missing field, say) is false.
func (p *predicate) eval(v view) bool {
	artifacts, board := v.celInputs()
	out, _, err := p.prg.Eval(map[string]any{
		"called":     v.called,
		"artifacts":  artifacts,
		"blackboard": board,
		"iteration":  int64(v.iteration),
	})
	if err != nil {
		return false
	}
	b, ok := out.Value().(bool)
	return ok && b
}

// celEntries are entries as CEL values, {type, value}; one whose JSON cannot be decoded
// is left out.
func celEntries(es []tool.Entry) []any {
	out := make([]any, 0, len(es))
	for _, e := range es {
		val, err := decorators.DecodeJSON(e.JSON)
		if err != nil {
			continue
		}
		out = append(out, map[string]any{"type": e.TypeName, "value": val})
	}
	return out
}

var (
	sourceEnvOnce sync.Once
	sourceEnv     *cel.Env
	sourceEnvErr  error
)

// sourceCELEnv is the environment of a chaining source's predicate: the object (`value`,
// `type_name`) and the process of the run it was returned in (`blackboard`, `context`).
func sourceCELEnv() (*cel.Env, error) {
	sourceEnvOnce.Do(func() {
		sourceEnv, sourceEnvErr = cel.NewEnv(
			cel.Variable("value", cel.DynType),
			cel.Variable("type_name", cel.StringType),
			cel.Variable("blackboard", cel.ListType(cel.DynType)),
			cel.Variable("context", cel.MapType(cel.StringType, cel.StringType)),
		)
	})
	return sourceEnv, sourceEnvErr
}

// sourcePredicate is a chaining source's compiled `when`.
type sourcePredicate struct {
	src string
	prg cel.Program
}

func compileSourcePredicate(src string) (*sourcePredicate, error) {
	if len(src) > decorators.MaxExpressionBytes {
		return nil, fmt.Errorf("the expression is %d bytes; the limit is %d", len(src), decorators.MaxExpressionBytes)
	}
	e, err := sourceCELEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression %q: %w", src, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("the CEL expression %q yields %s, not bool", src, t)
	}
	prg, err := e.Program(ast, cel.CostLimit(predicateCost))
	if err != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", src, err)
	}
	return &sourcePredicate{src: src, prg: prg}, nil
}

// String is the predicate's source.
func (p *sourcePredicate) String() string { return p.src }

// match is the predicate's value for object e over the run's process; an expression that
// fails, or yields no bool, is false.
func (p *sourcePredicate) match(e tool.Entry, proc *sourceInputs) bool {
	val, err := decorators.DecodeJSON(e.JSON)
	if err != nil {
		return false
	}
	out, _, err := p.prg.Eval(map[string]any{
		"value": val, "type_name": e.TypeName, "blackboard": proc.blackboard(), "context": proc.context(),
	})
	if err != nil {
		return false
	}
	b, ok := out.Value().(bool)
	return ok && b
}
