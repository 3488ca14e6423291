package decorators

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// MaxExpressionBytes bounds the source of one expression.
const MaxExpressionBytes = 4 << 10

// expressionCost bounds the work of one evaluation, in CEL cost units, so that an
// expression over a large artifact cannot spin.
const expressionCost = 1_000_000

// Expression is a compiled CEL expression over an artifact: `value` is its JSON value
// (maps, lists, strings, numbers, booleans, null) and `type_name` its type name. A
// predicate must yield a bool; a transform yields the value to use instead.
type Expression struct {
	src string
	prg cel.Program
}

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(
			cel.Variable("value", cel.DynType),
			cel.Variable("type_name", cel.StringType),
		)
	})
	return env, envErr
}

// CompilePredicate compiles a CEL expression that must yield a bool.
func CompilePredicate(src string) (*Expression, error) { return compile(src, true) }

// CompileTransform compiles a CEL expression that yields a JSON value.
func CompileTransform(src string) (*Expression, error) { return compile(src, false) }

func compile(src string, predicate bool) (*Expression, error) {
	if len(src) > MaxExpressionBytes {
		return nil, fmt.Errorf("the expression is %d bytes; the limit is %d", len(src), MaxExpressionBytes)
	}
	e, err := celEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression %q: %w", src, iss.Err())
	}
	if predicate && ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("the CEL expression %q yields %s, not bool", src, ast.OutputType())
	}
	prg, err := e.Program(ast, cel.CostLimit(expressionCost))
	if err != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", src, err)
	}
	return &Expression{src: src, prg: prg}, nil
}

// String is the expression's source.
func (x *Expression) String() string { return x.src }

func (x *Expression) eval(e tool.Entry) (any, error) {
	var v any
	if err := json.Unmarshal(e.JSON, &v); err != nil {
		return nil, fmt.Errorf("the artifact is not JSON: %w", err)
	}
	out, _, err := x.prg.Eval(map[string]any{"value": v, "type_name": e.TypeName})
	if err != nil {
		return nil, fmt.Errorf("%q: %w", x.src, err)
	}
	return out, nil
}

// Match evaluates a predicate.
func (x *Expression) Match(e tool.Entry) (bool, error) {
	out, err := x.eval(e)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%q yielded %v, not a bool", x.src, out)
	}
	return bool(b), nil
}

var valueType = reflect.TypeOf((*structpb.Value)(nil))

// Apply evaluates a transform and returns its value as an entry of typeName.
func (x *Expression) Apply(e tool.Entry, typeName string) (tool.Entry, error) {
	out, err := x.eval(e)
	if err != nil {
		return tool.Entry{}, err
	}
	val, ok := out.(interface {
		ConvertToNative(reflect.Type) (any, error)
	})
	if !ok {
		return tool.Entry{}, fmt.Errorf("%q yielded %v, which is not a JSON value", x.src, out)
	}
	native, err := val.ConvertToNative(valueType)
	if err != nil {
		return tool.Entry{}, fmt.Errorf("%q yielded a value that is not JSON: %w", x.src, err)
	}
	pv, ok := native.(*structpb.Value)
	if !ok {
		return tool.Entry{}, errors.New("CEL: unexpected conversion result")
	}
	// encoding/json, not protojson, whose output varies from run to run on purpose.
	b, err := json.Marshal(pv.AsInterface())
	if err != nil {
		return tool.Entry{}, fmt.Errorf("%q: %w", x.src, err)
	}
	if typeName == "" {
		typeName = e.TypeName
	}
	return tool.EntryFromJSON(typeName, b)
}
