package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/jsontree"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
)

// Func returns a tool that calls a typed Go function.
//
// The input schema is inferred from I by github.com/google/jsonschema-go. I is one of:
//   - A struct, or a pointer to one. Properties are the exported fields under their
//     `json` names; a field is required unless its json tag says omitempty or omitzero; a
//     `jsonschema:"..."` tag becomes the property's description (without one there is no
//     description); unknown properties are refused ("additionalProperties": false);
//     pointers and slices also accept null.
//   - A string, a boolean, an integer of any size, signed or not, a float, or a named
//     type of one of them; a slice or an array; a map with string keys. Elements and
//     map values are inferred as struct fields are. Models call tools with a JSON
//     object, so the input is the one required property of an object that allows no
//     other: "input" for a string, a boolean or a number, "items" for a slice or an
//     array (an array, not null), "entries" for a map. A tool of []float64 has the schema
//     {"type":"object","properties":{"items":{"type":"array","items":{"type":"number"}}},"required":["items"],"additionalProperties":false}
//     and is called with {"items":[1.5,2]}; the function gets the value of that property.
//
// The allowed values of a string, a number or a boolean ("enum", shown after "type" and
// "description") are declared in two ways:
//   - An `enum:"a,b,c"` tag on a struct field: values separated by commas (spaces around
//     each are dropped), strings for a string field, JSON numbers or booleans for the
//     others. On a pointer, a slice or an array field they are the values of what it
//     points to or holds.
//   - A type that implements Enum: its EnumValues restrict every value of the type
//     wherever it is (the input itself, a field, an element, a map value, what a pointer
//     points to). A field's enum tag, if any, replaces them for that field.
//
// Each value must decode into the Go type it restricts. A pointer's null stays allowed
// (null joins the values). Arguments with another value are refused naming the allowed
// values.
//
// Func fails with an error that wraps schema.ErrInvalid when I is none of the above, or
// its schema cannot be inferred, or an enum is not as described.
//
// A call works as follows:
//   - Blank input gives the zero I (for a pointer, a pointer to a zero struct), even if
//     the schema has required properties, as for a function that takes no arguments.
//   - Other input is validated against the schema (see schema.Schema.Validate) and
//     decoded, unless the worker or the orchestrator has just validated exactly these
//     arguments; a failure is an error Result with Code CodeInvalidArguments that names
//     the problem.
//   - The output becomes the result: a Result passes through untouched, a string
//     becomes text as is (not JSON-quoted), anything else becomes text holding its JSON.
//   - A returned error becomes an error Result and a Signal propagates (as for New).
func Func[I, O any](name, description string, fn func(ctx context.Context, in I) (O, error), opts ...Option) (Tool, error) {
	inType := reflect.TypeFor[I]()
	js, wrapper, err := inferInput(inType)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", schema.ErrInvalid, name, err)
	}
	b, err := jsontree.Marshal(js)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", schema.ErrInvalid, name, err)
	}
	input, err := schema.FromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", name, err)
	}
	plan := newFlatPlan(inType)
	call := func(ctx context.Context, args string) (Result, error) {
		in, bad := decodeInput[I](ctx, input, args, plan, wrapper)
		if bad != nil {
			return *bad, nil
		}
		out, err := fn(ctx, in)
		if err != nil {
			return Result{}, err // New turns it into an error Result or propagates a Signal
		}
		return outputResult(out), nil
	}
	return New(name, description, input, call, opts...), nil
}

// MustFunc is Func for tools defined at start-up; it panics if the schema cannot be
// inferred.
func MustFunc[I, O any](name, description string, fn func(ctx context.Context, in I) (O, error), opts ...Option) Tool {
	t, err := Func(name, description, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// decodeInput returns the input value, or the error Result to answer with. A non-nil
// wrapper is the struct whose one field holds the input (see inferInput).
func decodeInput[I any](ctx context.Context, s schema.Schema, input string, plan *flatPlan, wrapper reflect.Type) (I, *Result) {
	var in I
	fresh := func() {
		var zero I
		in = zero
		if t := reflect.TypeFor[I](); t.Kind() == reflect.Pointer {
			in = reflect.New(t.Elem()).Interface().(I)
		}
	}
	fresh()
	if jsontree.IsBlank(input) {
		return in, nil
	}
	canonical := input
	if !toolinternal.Validated(ctx, input) {
		var err error
		if canonical, err = s.Validate(input); err != nil {
			res := ErrorWithCode(CodeInvalidArguments, err.Error())
			res.Cause = err
			return in, &res
		}
	}
	if plan != nil {
		if plan.decode(canonical, reflect.ValueOf(&in)) {
			return in, nil
		}
		fresh() // what the plan set before it gave up
	}
	target := any(&in)
	var wrapped reflect.Value
	if wrapper != nil {
		wrapped = reflect.New(wrapper)
		target = wrapped.Interface()
	}
	err := decodeArguments(canonical, target)
	var number *json.UnmarshalTypeError
	if errors.As(err, &number) && strings.HasPrefix(number.Value, "number") {
		// An integer written 1.0 or 1e2, which the schema takes as one and Go's decoder
		// refuses for an integer field: decoded again with it written 1 or 100.
		if again, ok := integralNumbers(canonical); ok {
			fresh()
			target = any(&in)
			if wrapper != nil {
				wrapped = reflect.New(wrapper)
				target = wrapped.Interface()
			}
			err = decodeArguments(again, target)
		}
	}
	if err != nil {
		err = fmt.Errorf("%w: %v", schema.ErrInvalidArguments, err)
		res := ErrorWithCode(CodeInvalidArguments, err.Error())
		res.Cause = err
		return in, &res
	}
	if wrapper != nil {
		reflect.ValueOf(&in).Elem().Set(wrapped.Elem().Field(0))
	}
	return in, nil
}

// argDecoder is a json.Decoder, refusing unknown fields, over a reader it points at each
// input in turn: decoding a call's arguments allocates neither (they are pooled).
type argDecoder struct {
	r   strings.Reader
	dec *json.Decoder
}

var argDecoders = sync.Pool{New: func() any {
	d := &argDecoder{}
	d.dec = json.NewDecoder(&d.r)
	d.dec.DisallowUnknownFields()
	return d
}}

// decodeArguments decodes canonical arguments (one JSON value, nothing after it) into v.
// A decoder goes back to the pool only when it consumed exactly its input without an
// error: then it holds nothing of it (a json.Decoder's errors, and bytes it read past a
// value, would carry into the next call's).
func decodeArguments(canonical string, v any) error {
	if len(canonical) < 2 || canonical[0] != '{' || canonical[len(canonical)-1] != '}' {
		dec := json.NewDecoder(strings.NewReader(canonical))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	d := argDecoders.Get().(*argDecoder)
	start := d.dec.InputOffset()
	d.r.Reset(canonical)
	err := d.dec.Decode(v)
	if err == nil && d.dec.InputOffset()-start == int64(len(canonical)) && !d.dec.More() {
		argDecoders.Put(d)
	}
	return err
}

// integralNumbers is canonical with each number that is an integer written with a
// fraction or an exponent (1.0, 1e2, 2.50e1) written as an integer; ok false when it has
// none. An exponent past ±40 is left alone: no integer field holds such a number, and
// its digits would be costly to write.
func integralNumbers(canonical string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(canonical))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	changed := false
	var walk func(x any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case json.Number:
			s := string(t)
			if !strings.ContainsAny(s, ".eE") {
				return t
			}
			if i := strings.IndexAny(s, "eE"); i >= 0 {
				if exp, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+")); err != nil || exp > 40 || exp < -40 {
					return t
				}
			}
			if r, ok := new(big.Rat).SetString(s); ok && r.IsInt() {
				changed = true
				return json.Number(r.Num().String())
			}
		}
		return x
	}
	v = walk(v)
	if !changed {
		return "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// outputResult converts a typed tool's output into its result.
func outputResult(out any) Result {
	switch v := out.(type) {
	case Result:
		return v
	case string:
		return Text(v)
	}
	b, err := jsontree.Marshal(out)
	if err != nil {
		return ErrorFrom(fmt.Errorf("cannot encode the tool's output as JSON: %w", err))
	}
	return Text(string(b))
}
