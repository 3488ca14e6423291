package schema

import (
	"fmt"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// Value is a JSON Schema for any JSON value, not only a tool's object of
// arguments: the schema a run's structured final answer must satisfy. It
// is checked the way FromJSON checks tool schemas: no references outside the
// document, no duplicate keys, no unknown type names, and the same limits.
type Value struct{ s Schema }

// ValueFromJSON parses and resolves a JSON Schema of any type. Errors wrap
// ErrInvalid.
func ValueFromJSON(b []byte) (*Value, error) {
	tree, err := decodeSchema(b)
	if err != nil {
		return nil, err
	}
	if _, ok := tree.(*jsontree.Object); !ok {
		return nil, fmt.Errorf("%w: schema must be a JSON object, got %s", ErrInvalid, jsontree.TypeName(tree))
	}
	limits, err := checkLimits(tree)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s, err := resolveSchema(jsontree.Encode(tree, false), limits)
	if err != nil {
		return nil, err
	}
	return &Value{s: s}, nil
}

// JSON is the schema as compact JSON, keys in the author's order.
func (v *Value) JSON() []byte { return v.s.JSON() }

// Validate checks that text is one JSON value satisfying the schema and returns it in
// canonical form. Errors wrap ErrInvalidArguments and name the offending property.
func (v *Value) Validate(text string) (string, error) {
	tree, err := jsontree.Decode([]byte(text), jsontree.MaxArgumentDepth)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	return v.s.validateTree(tree, len(text))
}
