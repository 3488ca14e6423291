package decorators

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
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

func (x *Expression) eval(e tool.Entry) (ref.Val, error) {
	v, err := decodeJSON(e.JSON)
	if err != nil {
		return nil, fmt.Errorf("the artifact is not JSON: %w", err)
	}
	out, _, err := x.prg.Eval(map[string]any{"value": v, "type_name": e.TypeName})
	if err != nil {
		return nil, fmt.Errorf("%q: %w", x.src, err)
	}
	return out, nil
}

// DecodeJSON decodes a JSON value for CEL keeping its numbers exact: an integer is an
// int (or a uint above the int range), any other number a double.
func DecodeJSON(raw []byte) (any, error) { return decodeJSON(raw) }

func decodeJSON(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return exactNumbers(v), nil
}

func exactNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
		return x
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		f, _ := x.Float64()
		return f
	}
	return v
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

// MaxTransformBytes bounds the JSON a transform yields: the value is written out only as
// far as this bound, so that a short expression that repeats a large part of its artifact
// cannot make the orchestrator build gigabytes.
const MaxTransformBytes = 1 << 20

// Apply evaluates a transform and returns its value as an entry of typeName.
func (x *Expression) Apply(e tool.Entry, typeName string) (tool.Entry, error) {
	out, err := x.eval(e)
	if err != nil {
		return tool.Entry{}, err
	}
	w := &jsonWriter{left: MaxTransformBytes}
	if err := w.write(out); err != nil {
		return tool.Entry{}, fmt.Errorf("%q: %w", x.src, err)
	}
	if typeName == "" {
		typeName = e.TypeName
	}
	return tool.EntryFromJSON(typeName, w.buf.Bytes())
}

var errTooLarge = fmt.Errorf("the value it yields is over %d bytes of JSON", MaxTransformBytes)

// jsonWriter writes a CEL value as JSON, within a byte budget: integers exactly, map keys
// sorted, bytes as base64, timestamps and durations as their JSON strings; a value with
// no JSON form (NaN, a map with a key that is not a string, a type) is an error.
type jsonWriter struct {
	buf  bytes.Buffer
	left int
}

func (w *jsonWriter) put(b []byte) error {
	if w.left -= len(b); w.left < 0 {
		return errTooLarge
	}
	w.buf.Write(b)
	return nil
}

func (w *jsonWriter) write(v ref.Val) error {
	switch x := v.(type) {
	case types.Null:
		return w.put([]byte("null"))
	case types.Bool:
		return w.put(strconv.AppendBool(nil, bool(x)))
	case types.Int:
		return w.put(strconv.AppendInt(nil, int64(x), 10))
	case types.Uint:
		return w.put(strconv.AppendUint(nil, uint64(x), 10))
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("it yields %v, which is not a JSON number", f)
		}
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		return w.put(b)
	case types.String:
		if len(x) > w.left {
			return errTooLarge
		}
		b, err := json.Marshal(string(x))
		if err != nil {
			return err
		}
		return w.put(b)
	case traits.Mapper:
		return w.writeMap(x)
	case traits.Lister:
		if err := w.put([]byte("[")); err != nil {
			return err
		}
		for i := int64(0); i < int64(x.Size().(types.Int)); i++ {
			if i > 0 {
				if err := w.put([]byte(",")); err != nil {
					return err
				}
			}
			if err := w.write(x.Get(types.Int(i))); err != nil {
				return err
			}
		}
		return w.put([]byte("]"))
	}
	// Bytes, timestamps, durations and other values with a JSON form.
	native, err := v.ConvertToNative(jsonValueType)
	if err != nil {
		return fmt.Errorf("it yields a %s, which has no JSON form", v.Type().TypeName())
	}
	pv, ok := native.(*structpb.Value)
	if !ok {
		return errors.New("CEL: unexpected conversion result")
	}
	b, err := json.Marshal(pv.AsInterface())
	if err != nil {
		return err
	}
	return w.put(b)
}

func (w *jsonWriter) writeMap(m traits.Mapper) error {
	var keys []string
	it := m.Iterator()
	for it.HasNext() == types.True {
		k, ok := it.Next().(types.String)
		if !ok {
			return errors.New("it yields a map with a key that is not a string")
		}
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	if err := w.put([]byte("{")); err != nil {
		return err
	}
	for i, k := range keys {
		if i > 0 {
			if err := w.put([]byte(",")); err != nil {
				return err
			}
		}
		if err := w.write(types.String(k)); err != nil {
			return err
		}
		if err := w.put([]byte(":")); err != nil {
			return err
		}
		if err := w.write(m.Get(types.String(k))); err != nil {
			return err
		}
	}
	return w.put([]byte("}"))
}

var jsonValueType = reflect.TypeOf((*structpb.Value)(nil))
