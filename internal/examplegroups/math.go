// Package examplegroups holds the example tool groups that cmd/toolworker hosts: math (ten
// operations behind one facade), text, shop (nested and selectable facades, with a cart
// whose state the orchestrator keeps), faults (tools that misbehave on purpose), and
// echo_<name> (shows the context a call receives). They are real tools, used by the demo
// and the end-to-end tests, and a model for worker authors.
package examplegroups

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Math group texts.
const (
	MathRole        = "math"
	MathDescription = "Math tools: use when you need to perform calculations"
	MathUsageNotes  = "Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding."

	// MathFacade is the one tool the math group offers; calling it makes the ten
	// operations available.
	MathFacade            = "math"
	MathFacadeDescription = "Mathematical operations. Invoke to see available operations including arithmetic, statistics, and rounding functions."
	MathFacadeUsageNotes  = MathUsageNotes
)

// Pair is the input of the binary operations.
type Pair struct {
	A float64 `json:"a" jsonschema:"the first operand"`
	B float64 `json:"b" jsonschema:"the second operand"`
}

// List is the input of the statistics operations.
type List struct {
	Numbers []float64 `json:"numbers" jsonschema:"the numbers"`
}

// Value is the input of the rounding operations.
type Value struct {
	Value float64 `json:"value" jsonschema:"the number to round"`
}

// ErrDivideByZero is returned by divide when b is zero.
var ErrDivideByZero = errors.New("cannot divide by zero")

// ErrEmptyList is returned by the statistics operations on an empty list.
var ErrEmptyList = errors.New("the list of numbers is empty")

// Math returns the math group, which offers one facade, math, over the ten operations
// of MathOperations.
func Math() worker.Group { return mathGroup(nil) }

func mathGroup(wrap Wrap) worker.Group {
	return worker.Group{
		Role:        MathRole,
		Description: MathDescription,
		UsageNotes:  MathUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Facades: []tool.Facade{
			tool.Of(MathFacade, MathFacadeDescription, wrap.all(MathOperations()), tool.UsageNotes(MathFacadeUsageNotes)),
		},
	}
}

// MathOperations returns the ten operations of the math group: add, subtract, multiply,
// divide, mean, min, max, floor, ceiling, round. Every operation is pure, so it is
// declared idempotent: the router may re-send a call whose worker died mid-call.
func MathOperations() []tool.Tool {
	binary := func(name, desc string, op func(a, b float64) (float64, error)) tool.Tool {
		return tool.MustFunc(name, desc, func(_ context.Context, in Pair) (string, error) {
			v, err := op(in.A, in.B)
			if err != nil {
				return "", err
			}
			return format(v)
		}, tool.Idempotent())
	}
	stat := func(name, desc string, op func([]float64) float64) tool.Tool {
		return tool.MustFunc(name, desc, func(_ context.Context, in List) (string, error) {
			if len(in.Numbers) == 0 {
				return "", ErrEmptyList
			}
			return format(op(in.Numbers))
		}, tool.Idempotent())
	}
	rounding := func(name, desc string, op func(float64) float64) tool.Tool {
		return tool.MustFunc(name, desc, func(_ context.Context, in Value) (string, error) {
			return format(op(in.Value))
		}, tool.Idempotent())
	}
	return []tool.Tool{
		binary("add", "Add two numbers: a + b", func(a, b float64) (float64, error) { return a + b, nil }),
		binary("subtract", "Subtract b from a: a - b", func(a, b float64) (float64, error) { return a - b, nil }),
		binary("multiply", "Multiply two numbers: a * b", func(a, b float64) (float64, error) { return a * b, nil }),
		binary("divide", "Divide a by b: a / b", func(a, b float64) (float64, error) {
			if b == 0 {
				return 0, ErrDivideByZero
			}
			return a / b, nil
		}),
		stat("mean", "Arithmetic mean of a list of numbers", func(xs []float64) float64 {
			sum := 0.0
			for _, x := range xs {
				sum += x
			}
			return sum / float64(len(xs))
		}),
		stat("min", "Smallest of a list of numbers", func(xs []float64) float64 {
			m := xs[0]
			for _, x := range xs[1:] {
				m = math.Min(m, x)
			}
			return m
		}),
		stat("max", "Largest of a list of numbers", func(xs []float64) float64 {
			m := xs[0]
			for _, x := range xs[1:] {
				m = math.Max(m, x)
			}
			return m
		}),
		rounding("floor", "Round a number down to the nearest integer", math.Floor),
		rounding("ceiling", "Round a number up to the nearest integer", math.Ceil),
		rounding("round", "Round a number to the nearest integer, halves away from zero", math.Round),
	}
}

// format renders a result the way a person writes it: 20, 7.5, 0.1.
func format(v float64) (string, error) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "", fmt.Errorf("the result is not a finite number (%v)", v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64), nil
}
