// Package peer is the add tool as the benchmark's peer servers serve it (bench/cmd/rawadd,
// bench/cmd/mcpadd) and as the in-process variant calls it: the same name, description,
// input type and result text as the built-in math group's add, so that every variant
// computes the same thing from the same bytes.
//
// It depends on the standard library only, so that the peer binaries carry nothing of
// toolmesh but this.
package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Name and Description of the tool, as the built-in math group has them.
const (
	Name        = "add"
	Description = "Add two numbers: a + b"
)

// Pair is the input of add; its tags give the same JSON schema as the built-in tool's.
type Pair struct {
	A float64 `json:"a" jsonschema:"the first operand"`
	B float64 `json:"b" jsonschema:"the second operand"`
}

// Sum is the result text of add: the sum written the way the built-in tool writes it.
func Sum(p Pair) (string, error) {
	v := p.A + p.B
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "", fmt.Errorf("the result is not a finite number (%v)", v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64), nil
}

// Add decodes JSON arguments and returns the result text.
func Add(args []byte) (string, error) {
	var p Pair
	if err := json.Unmarshal(args, &p); err != nil {
		return "", fmt.Errorf("invalid arguments: %w", err)
	}
	return Sum(p)
}
