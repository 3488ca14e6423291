package tool

import (
	"fmt"
)

// ValueSchema is a JSON Schema for any JSON value, not only a tool's object of
// arguments: the schema a run's final answer must satisfy (the seed's createObject). It
// is checked the way SchemaFromJSON checks tool schemas: no references outside the
// document, no duplicate keys, no unknown type names.
type ValueSchema struct{ s Schema }

// ValueSchemaFromJSON parses and resolves a JSON Schema of any type. Errors wrap
// ErrInvalidSchema.
func ValueSchemaFromJSON(b []byte) (*ValueSchema, error) {
	if isBlank(string(b)) {
		return nil, fmt.Errorf("%w: schema is empty", ErrInvalidSchema)
	}
	tree, err := decodeJSON(b, noDepthLimit)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	if _, ok := tree.(*jsonObject); !ok {
		return nil, fmt.Errorf("%w: schema must be a JSON object, got %s", ErrInvalidSchema, jsonTypeName(tree))
	}
	s, err := resolveSchema(encodeJSON(tree, false))
	if err != nil {
		return nil, err
	}
	return &ValueSchema{s: s}, nil
}

// JSON is the schema as compact JSON, keys in the author's order.
func (v *ValueSchema) JSON() []byte { return v.s.JSON() }

// Validate checks that text is one JSON value satisfying the schema and returns it in
// canonical form. Errors wrap ErrInvalidArguments and name the offending property.
func (v *ValueSchema) Validate(text string) (string, error) {
	tree, err := decodeJSON([]byte(text), maxArgumentDepth)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	return v.s.validateTree(tree)
}
