package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// Enum is implemented by a type whose values are restricted to a fixed list, such as
//
//	type Color string
//
//	func (Color) EnumValues() []any { return []any{"red", "green", "blue"} }
//
// Func shows the list to the model ("enum") wherever the type appears in a tool's
// input: the input itself, a struct field, a list element, a map value, or what a
// pointer points to; arguments with another value are refused before the tool runs.
// The type must be a string, a number or a boolean. Func calls EnumValues once, on the
// zero value; each value must encode to JSON that decodes into the type (Color("red")
// and "red" both do).
type Enum interface {
	EnumValues() []any
}

// enumTag is the struct tag that lists a field's allowed values: `enum:"red,green"`.
const enumTag = "enum"

// The property that holds a typed tool's input when it is not a struct (see Func):
// models call tools with a JSON object of named arguments.
const (
	primitiveProperty = "input"
	listProperty      = "items"
	mapProperty       = "entries"
)

// inferInput returns the schema of a typed tool's arguments for input type t, and the
// type to decode them into: nil when the arguments are t itself (a struct, or a pointer
// to one), else a struct whose one field, of type t, is the property that holds them.
func inferInput(t reflect.Type) (*jsonschema.Schema, reflect.Type, error) {
	property := wrapperProperty(t)
	if property == "" {
		structType := t
		if structType.Kind() == reflect.Pointer {
			structType = structType.Elem()
		}
		if structType.Kind() != reflect.Struct {
			if t.Kind() == reflect.Pointer {
				return nil, nil, fmt.Errorf("input type %s is not a struct or a pointer to a struct", t)
			}
			return nil, nil, fmt.Errorf("input type %s is not a struct, a pointer to a struct, a string, a boolean, a number, a slice, an array or a map with string keys", t)
		}
		js, err := jsonschema.ForType(structType, nil)
		if err != nil {
			return nil, nil, err
		}
		if err := addEnums(structType, js); err != nil {
			return nil, nil, err
		}
		if js.Properties == nil {
			// Some model APIs insist on "properties" even when there are none.
			js.Properties = map[string]*jsonschema.Schema{}
		}
		return js, nil, nil
	}
	inner, err := jsonschema.ForType(t, nil)
	if err != nil {
		return nil, nil, err
	}
	if t.Kind() == reflect.Slice {
		// A required list: null would only stand for an empty one.
		inner.Types, inner.Type = nil, "array"
	}
	if err := addEnums(t, inner); err != nil {
		return nil, nil, err
	}
	js := &jsonschema.Schema{
		Type:                 "object",
		Properties:           map[string]*jsonschema.Schema{property: inner},
		Required:             []string{property},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}, // false
	}
	wrapper := reflect.StructOf([]reflect.StructField{{
		Name: "Input",
		Type: t,
		Tag:  reflect.StructTag(`json:"` + property + `"`),
	}})
	return js, wrapper, nil
}

// wrapperProperty returns the property that holds an input of type t, or "" when t is
// not an input that needs one.
func wrapperProperty(t reflect.Type) string {
	switch {
	case scalarKind(t.Kind()):
		return primitiveProperty
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return listProperty
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		return mapProperty
	}
	return ""
}

// scalarKind reports whether k is a string, a boolean or a number.
func scalarKind(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// addEnums adds "enum" to s, the schema jsonschema-go inferred for t, and to its
// subschemas, wherever an Enum type or an enum tag restricts the values.
func addEnums(t reflect.Type, s *jsonschema.Schema) error {
	if s == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if values, ok := enumValues(t); ok {
		if !scalarKind(t.Kind()) {
			return fmt.Errorf("type %s implements tool.Enum but is not a string, a number or a boolean", t)
		}
		if len(values) == 0 {
			return fmt.Errorf("type %s: EnumValues returns no values", t)
		}
		raw := make([]string, len(values))
		for i, v := range values {
			b, err := jsontree.Marshal(v)
			if err != nil {
				return fmt.Errorf("type %s: enum value %v does not encode as JSON: %v", t, v, err)
			}
			raw[i] = string(b)
		}
		if err := setEnum(t, s, raw); err != nil {
			return fmt.Errorf("type %s: %w", t, err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return addFieldEnums(t, s)
	case reflect.Slice, reflect.Array:
		return addEnums(t.Elem(), s.Items)
	case reflect.Map:
		return addEnums(t.Elem(), s.AdditionalProperties)
	}
	return nil
}

// enumValues returns the values of t if t (or a pointer to it) implements Enum.
func enumValues(t reflect.Type) ([]any, bool) {
	enum := reflect.TypeFor[Enum]()
	switch {
	case t.Implements(enum):
		return reflect.Zero(t).Interface().(Enum).EnumValues(), true
	case reflect.PointerTo(t).Implements(enum):
		return reflect.New(t).Interface().(Enum).EnumValues(), true
	}
	return nil, false
}

// addFieldEnums adds the enums of struct type t's fields to the properties of s. It
// follows jsonschema-go: promoted fields count as the struct's own, and of two fields
// under one JSON name the later one is the property.
func addFieldEnums(t reflect.Type, s *jsonschema.Schema) error {
	if s.Properties == nil {
		return nil // no fields, or a type with a schema of its own (time.Time)
	}
	fields := reflect.VisibleFields(t)
	last := map[string]int{}
	for i, f := range fields {
		if name, ok := jsonName(f); ok {
			last[name] = i
		}
	}
	for i, f := range fields {
		name, ok := jsonName(f)
		if !ok || last[name] != i {
			continue
		}
		prop := s.Properties[name]
		tag, tagged := f.Tag.Lookup(enumTag)
		var err error
		if tagged {
			err = addTagEnum(f.Type, prop, tag)
		} else {
			err = addEnums(f.Type, prop)
		}
		if err != nil {
			return fmt.Errorf("field %s.%s: %w", t, f.Name, err)
		}
	}
	return nil
}

// jsonName returns the property name of a field that jsonschema-go makes a property.
func jsonName(f reflect.StructField) (string, bool) {
	if f.Anonymous || !f.IsExported() {
		return "", false
	}
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return f.Name, true
	}
	name, _, found := strings.Cut(tag, ",")
	if name == "-" && !found {
		return "", false
	}
	if name == "" {
		name = f.Name
	}
	return name, true
}

// addTagEnum restricts s, the schema of a field of type t, to the values an enum tag
// lists: those of the field itself, of what it points to, or of the elements it holds.
func addTagEnum(t reflect.Type, s *jsonschema.Schema, tag string) error {
	for s != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		if t.Kind() != reflect.Pointer {
			s = s.Items
		}
		t = t.Elem()
	}
	if s == nil {
		return nil
	}
	if !scalarKind(t.Kind()) {
		return fmt.Errorf("an enum tag needs a string, a number or a boolean (or a pointer to one, or a list of them), not %s", t)
	}
	if strings.TrimSpace(tag) == "" {
		return errors.New("the enum tag is empty")
	}
	parts := strings.Split(tag, ",")
	raw := make([]string, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return fmt.Errorf("the enum tag %q has an empty value", tag)
		}
		if t.Kind() == reflect.String {
			p = jsontree.Quote(p)
		}
		raw[i] = p
	}
	return setEnum(t, s, raw)
}

// setEnum sets the "enum" of s, the schema of type t, to values (at least one), each a
// JSON text. A value must decode into t and have the JSON type the schema says; null is
// added when the schema allows it (a pointer).
func setEnum(t reflect.Type, s *jsonschema.Schema, values []string) error {
	types := s.Types
	if s.Type != "" {
		types = []string{s.Type}
	}
	enum := make([]any, 0, len(values)+1)
	seen := map[string]bool{}
	for _, v := range values {
		if err := json.Unmarshal([]byte(v), reflect.New(t).Interface()); err != nil {
			return fmt.Errorf("enum value %s does not decode into %s", v, t)
		}
		var decoded any
		_ = json.Unmarshal([]byte(v), &decoded) // valid: it decoded into t
		if got := jsontree.TypeName(decoded); !slices.Contains(types, got) && (got != "integer" || !slices.Contains(types, "number")) {
			return fmt.Errorf("enum value %s is a JSON %s; the schema of %s wants %s", v, got, t, strings.Join(types, " or "))
		}
		if seen[v] {
			return fmt.Errorf("enum value %s is given twice", v)
		}
		seen[v] = true
		enum = append(enum, json.RawMessage(v))
	}
	if slices.Contains(types, "null") {
		enum = append(enum, nil)
	}
	s.Enum = enum
	return nil
}
