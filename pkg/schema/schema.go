// Package schema is the JSON Schema of a tool's arguments: built from a parameter list
// (Params, rendered exactly as models expect a simple schema), inferred elsewhere from
// Go types, or accepted from an author's JSON (FromJSON, which never fetches a
// referenced schema and holds the schema to limits, MaxBytes, MaxDepth, MaxNodes and the
// others, so that compiling it and validating against it take bounded time and
// memory). Validate checks the arguments a model produced before a call is dispatched
// and returns them in canonical form, with errors written for the model to act on;
// Value does the same for a JSON value of any type (a run's structured answer).
//
// It imports no other toolmesh package except internal/jsontree.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// ErrInvalid reports an input schema that toolmesh cannot use: not JSON, not an
// object schema, or not resolvable without fetching anything.
var ErrInvalid = errors.New("invalid input schema")

// ErrInvalidArguments reports tool-call arguments that a model produced and that do
// not satisfy the tool's input schema. The wrapped message is written for the model.
var ErrInvalidArguments = errors.New("invalid arguments")

// emptySchemaJSON is what a tool without parameters shows the model: some model APIs
// insist on "properties" even when there are none.
const emptySchemaJSON = `{"type":"object","properties":{}}`

// Schema is the JSON Schema of a tool's arguments.
//
// It is an immutable value, cheap to copy: it holds the canonical JSON that the model is
// shown and the resolved form used to validate arguments before a call is dispatched.
// The zero value is the empty schema, which accepts any JSON object.
type Schema struct {
	raw      []byte // canonical JSON; nil for the empty schema
	resolved *jsonschema.Resolved
	// params is the exact parameter list when the schema was built by Params, so
	// that Parameters gives back what the author wrote.
	params []Parameter
	simple bool
	// fast validates calls of a flat schema in one pass; nil for other schemas.
	fast *fastSchema
	// graph bounds the work of validating against the schema; nil for the empty schema.
	graph   *graph
	explain *explainer
}

// emptyResolved is the resolved empty schema shared by every zero Schema. It is
// computed once and never changes.
var emptyResolved = sync.OnceValue(func() *jsonschema.Resolved {
	s, err := resolveSchema([]byte(emptySchemaJSON), &checked{})
	if err != nil {
		panic("schema: empty schema does not resolve: " + err.Error())
	}
	return s.resolved
})

// Empty returns the schema of a tool without parameters. It renders exactly
// {"type":"object","properties":{}}.
func Empty() Schema { return Schema{} }

// supportedDrafts are the $schema values jsonschema-go can validate; "" means the
// latest (draft 2020-12).
var supportedDrafts = []string{
	"",
	"https://json-schema.org/draft/2020-12/schema",
	"http://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft-07/schema#",
}

// FromJSON accepts a JSON Schema that a worker or a tool author supplies.
//
// The schema must be a JSON object with "type": "object", since models call tools with
// an object of named arguments. It is resolved once, here: a $ref that points outside
// the document (an http or file URI, or a relative one) is refused, because fetching
// schemas while registering a worker's tools would let a worker make the orchestrator
// read arbitrary URLs. Duplicate keys, unknown "type" names, unsupported $schema
// drafts, a $ref that loops back to the same value, keywords such as minLength that are
// not non-negative integers, and schemas over any of the limits (MaxBytes, MaxDepth,
// MaxNodes and the others) are refused as well; the error names the limit and where the
// schema passes it. Errors wrap ErrInvalid.
//
// The canonical form keeps the author's key order (the model reads it) and drops
// insignificant whitespace.
func FromJSON(b []byte) (Schema, error) {
	tree, err := decodeSchema(b)
	if err != nil {
		return Schema{}, err
	}
	root, ok := tree.(*jsontree.Object)
	if !ok {
		return Schema{}, fmt.Errorf("%w: schema must be a JSON object, got %s", ErrInvalid, jsontree.TypeName(tree))
	}
	t, ok := root.Get("type")
	if !ok {
		return Schema{}, fmt.Errorf(`%w: schema must have "type": "object"`, ErrInvalid)
	}
	if t != "object" {
		return Schema{}, fmt.Errorf(`%w: schema "type" must be "object", got %s`, ErrInvalid, jsontree.Encode(t, false))
	}
	limits, err := checkLimits(root)
	if err != nil {
		return Schema{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return resolveSchema(jsontree.Encode(root, false), limits)
}

// decodeSchema decodes the JSON of a schema from outside, within MaxBytes and
// MaxJSONDepth.
func decodeSchema(b []byte) (any, error) {
	if jsontree.IsBlank(string(b)) {
		return nil, fmt.Errorf("%w: schema is empty", ErrInvalid)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%w: schema is %d bytes; the limit is %d", ErrInvalid, len(b), MaxBytes)
	}
	tree, err := jsontree.Decode(b, MaxJSONDepth)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return tree, nil
}

// resolveSchema resolves canonical schema JSON. For a schema held to the limits, the
// caller has checked those the JSON shows and passes what checkLimits returned; then
// the others, which only the resolved schema shows (MaxDepth for chains through $ref,
// MaxValueChecks), apply too. Schemas built from Go code pass nil.
func resolveSchema(raw []byte, limits *checked) (Schema, error) {
	var js jsonschema.Schema
	if err := json.Unmarshal(raw, &js); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			field := strings.TrimPrefix(ute.Field, "schemaWithoutMethods.")
			return Schema{}, fmt.Errorf("%w: keyword %q must not be a %s", ErrInvalid, field, ute.Value)
		}
		return Schema{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !slices.Contains(supportedDrafts, js.Schema) {
		return Schema{}, fmt.Errorf("%w: unsupported $schema %q (supported: draft 2020-12 and draft-07)", ErrInvalid, js.Schema)
	}
	// No Loader: jsonschema-go then refuses every reference it cannot find inside this
	// document, which is the guarantee FromJSON documents.
	rs, err := js.Resolve(nil)
	if err != nil {
		return Schema{}, fmt.Errorf("%w: %s", ErrInvalid, describeResolveError(err))
	}
	var programs map[string]int
	if limits != nil {
		programs = limits.programs
	}
	g, err := buildGraph(&js, limits != nil, programs)
	if err != nil {
		return Schema{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return Schema{raw: raw, resolved: rs, fast: compileFast(raw), graph: g, explain: &explainer{}}, nil
}

// describeResolveError rewords jsonschema-go's refusal to load a referenced schema,
// which talks about its own API ("no loader passed to Schema.Resolve").
func describeResolveError(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "loading "); ok && strings.Contains(msg, "cannot resolve remote schemas") {
		uri, _, _ := strings.Cut(rest, ": ")
		return fmt.Sprintf("$ref %q points outside the schema; only references within it are allowed", uri)
	}
	return msg
}

// subschemas yields the direct subschemas of s with their JSON pointers.
func subschemas(s *jsonschema.Schema, ptr string) func(yield func(string, *jsonschema.Schema) bool) {
	return func(yield func(string, *jsonschema.Schema) bool) {
		one := func(kw string, sub *jsonschema.Schema) bool {
			return sub == nil || yield(ptr+"/"+kw, sub)
		}
		list := func(kw string, subs []*jsonschema.Schema) bool {
			for i, sub := range subs {
				if !one(kw+"/"+strconv.Itoa(i), sub) {
					return false
				}
			}
			return true
		}
		named := func(kw string, subs map[string]*jsonschema.Schema) bool {
			if len(subs) == 0 {
				return true
			}
			for _, k := range slices.Sorted(maps.Keys(subs)) {
				if !one(kw+"/"+escapePointer(k), subs[k]) {
					return false
				}
			}
			return true
		}
		_ = named("properties", s.Properties) &&
			named("patternProperties", s.PatternProperties) &&
			named("$defs", s.Defs) &&
			named("definitions", s.Definitions) &&
			named("dependentSchemas", s.DependentSchemas) &&
			named("dependencies", s.DependencySchemas) &&
			one("items", s.Items) &&
			list("items", s.ItemsArray) &&
			list("prefixItems", s.PrefixItems) &&
			one("additionalItems", s.AdditionalItems) &&
			one("contains", s.Contains) &&
			one("unevaluatedItems", s.UnevaluatedItems) &&
			one("additionalProperties", s.AdditionalProperties) &&
			one("propertyNames", s.PropertyNames) &&
			one("unevaluatedProperties", s.UnevaluatedProperties) &&
			list("allOf", s.AllOf) &&
			list("anyOf", s.AnyOf) &&
			list("oneOf", s.OneOf) &&
			one("not", s.Not) &&
			one("if", s.If) &&
			one("then", s.Then) &&
			one("else", s.Else) &&
			one("contentSchema", s.ContentSchema)
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// JSON returns the canonical JSON of the schema: exactly what the model is shown.
func (s Schema) JSON() []byte { return bytes.Clone(s.json()) }

func (s Schema) json() []byte {
	if s.raw == nil {
		return []byte(emptySchemaJSON)
	}
	return s.raw
}

// String returns the canonical JSON as a string.
func (s Schema) String() string { return string(s.json()) }

// MarshalJSON embeds the schema as JSON, so that a Definition can be logged or sent
// as is.
func (s Schema) MarshalJSON() ([]byte, error) { return s.JSON(), nil }

// Equal reports whether two schemas show the model the same JSON. go-cmp uses it, so
// Definitions compare with cmp.Diff.
func (s Schema) Equal(o Schema) bool { return bytes.Equal(s.json(), o.json()) }

func (s Schema) resolvedSchema() *jsonschema.Resolved {
	if s.resolved == nil {
		return emptyResolved()
	}
	return s.resolved
}

// Validate checks the arguments a model produced for a call against the schema, before
// the call is dispatched, and returns them in canonical form: compact JSON, object keys
// sorted, numbers spelt as the model spelt them.
//
// Blank input counts as {}: models often send nothing for tools without parameters.
// It rejects invalid UTF-8, invalid JSON, data after the value, duplicate keys at any
// depth (encoding/json would silently keep the last one, so the tool and the validator
// could see different arguments), objects and arrays nested more than 64 levels deep
// (which would make validation slow), a top level that is not an object, arguments
// that would take more than MaxValidationChecks (and MaxValidationChecksPerByte for
// each of their bytes) to check against the schema, and every schema violation. The
// error wraps ErrInvalidArguments and names the problem and the property, e.g.
// `property "a": expected number, got string`, so that the model can correct its call.
func (s Schema) Validate(input string) (canonical string, err error) {
	if jsontree.IsBlank(input) {
		input = "{}"
	}
	if s.fast != nil {
		if out, err := s.fast.validate(input); err == nil {
			return out, nil
		}
	}
	return s.validateGeneric(input)
}

// validateGeneric is Validate without the fast path.
func (s Schema) validateGeneric(input string) (string, error) {
	tree, err := jsontree.Decode([]byte(input), jsontree.MaxArgumentDepth)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	if _, ok := tree.(*jsontree.Object); !ok {
		return "", fmt.Errorf("%w: arguments must be a JSON object, got %s", ErrInvalidArguments, jsontree.TypeName(tree))
	}
	return s.validateTree(tree, len(input))
}

// maxMessageRunes bounds an error message for the model: the explanations of a failed
// anyOf, say, add up with the alternatives.
const maxMessageRunes = 2000

// validateTree validates a decoded JSON value, size bytes long, and returns its
// canonical encoding.
func (s Schema) validateTree(tree any, size int) (string, error) {
	value, err := toValidator(tree, "")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	if s.graph != nil {
		if _, ok := s.graph.spend(tree, validationBudget(size)); !ok {
			return "", fmt.Errorf("%w: they would take too long to check against this schema (more than %d checks); send fewer or shorter values",
				ErrInvalidArguments, validationBudget(size))
		}
	}
	rs := s.resolvedSchema()
	if err := validateSafely(rs, value); err != nil {
		x := s.explain
		if x == nil {
			x = &explainer{}
		}
		msg := x.explain(rs.Schema(), tree, "")
		if msg == "" {
			msg = describeValidationError(err)
		}
		return "", fmt.Errorf("%w: %s", ErrInvalidArguments, jsontree.Truncate(msg, maxMessageRunes))
	}
	return string(jsontree.Encode(tree, true)), nil
}

// validateSafely keeps a bug in the validator from crashing the orchestrator, which
// validates every call of every model.
func validateSafely(rs *jsonschema.Resolved, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the schema validator failed: %v", r)
		}
	}()
	return rs.Validate(v)
}

// Parameters returns the schema as a list of parameters, in the order the schema lists
// its properties. For a schema built by Params it is exactly the list given. For a
// schema from JSON it is derived when every property has a single JSON type (a type
// paired with "null" counts as that type) and string enum values, if any; otherwise, and
// for the empty schema, it is nil.
func (s Schema) Parameters() []Parameter {
	if s.simple {
		return cloneParameters(s.params)
	}
	tree, err := jsontree.Decode(s.json(), jsontree.NoDepthLimit)
	if err != nil {
		return nil
	}
	root, _ := tree.(*jsontree.Object)
	ps, ok := deriveParameters(root)
	if !ok {
		return nil
	}
	return ps
}

// WithParameter returns the schema with p added as a property, or replacing the
// property of the same name. A schema built by Params stays a parameter list; any
// other schema keeps all its keywords and gains the property (and a "required" entry
// unless p is optional).
func (s Schema) WithParameter(p Parameter) Schema {
	if s.simple || s.raw == nil {
		return Params(append(cloneParameters(s.params), p)...)
	}
	tree, err := jsontree.Decode(s.raw, jsontree.NoDepthLimit)
	if err != nil {
		panic("schema: schema JSON does not decode: " + err.Error())
	}
	root := tree.(*jsontree.Object)
	props, ok := root.Vals["properties"].(*jsontree.Object)
	if !ok {
		props = jsontree.NewObject()
	}
	prop, err := jsontree.Decode(renderParameter(p), jsontree.NoDepthLimit)
	if err != nil {
		panic("schema: rendered parameter does not decode: " + err.Error())
	}
	props.Set(p.Name, prop)
	root.Set("properties", props)
	var required []any
	if r, ok := root.Vals["required"].([]any); ok {
		required = slices.DeleteFunc(slices.Clone(r), func(v any) bool { return v == p.Name })
	}
	if !p.Optional {
		required = append(required, p.Name)
	}
	if len(required) > 0 {
		root.Set("required", required)
	} else {
		root.Remove("required")
	}
	out, err := resolveSchema(jsontree.Encode(root, false), nil)
	if err != nil {
		panic("schema: schema with added parameter does not resolve: " + err.Error())
	}
	return out
}
