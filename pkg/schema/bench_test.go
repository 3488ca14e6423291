package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// flatBenchSchema is a typical tool's schema: a handful of scalar parameters, some
// optional, one with an enum. Validate decides its calls in one pass.
func flatBenchSchema() Schema {
	return Params(
		String("city", "City to forecast, e.g. Lisbon"),
		String("units", "Unit system of the temperatures").WithEnum("metric", "imperial").AsOptional(),
		Integer("days", "Number of days to forecast, 1 to 14").AsOptional(),
		Number("latitude", "Latitude in degrees, when the city is ambiguous").AsOptional(),
		Boolean("hourly", "Include the hourly forecast").AsOptional(),
	)
}

const flatBenchInput = `{"city":"Lisbon","units":"metric","days":3,"latitude":38.7223,"hourly":false}`

// nestedBenchSchemaJSON is an order: an object and an array of objects with a minimum,
// which only the generic path (JSON tree, jsonschema walk) validates.
const nestedBenchSchemaJSON = `{
  "type": "object",
  "description": "Places an order for a customer.",
  "properties": {
    "customer": {
      "type": "object",
      "properties": {
        "id": {"type": "string", "description": "Customer id"},
        "email": {"type": "string", "description": "Where the receipt goes"}
      },
      "required": ["id"]
    },
    "items": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string", "description": "Stock keeping unit"},
          "quantity": {"type": "integer", "minimum": 1}
        },
        "required": ["sku", "quantity"],
        "additionalProperties": false
      }
    },
    "note": {"type": "string", "description": "Note for the courier"}
  },
  "required": ["customer", "items"]
}`

const nestedBenchInput = `{"customer":{"id":"c-1042","email":"ana@example.com"},"items":[{"sku":"A-100","quantity":2},{"sku":"B-220","quantity":1},{"sku":"C-310","quantity":5}],"note":"leave at the door"}`

func BenchmarkValidate(b *testing.B) {
	nested, err := FromJSON([]byte(nestedBenchSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	flat := flatBenchSchema()
	cases := []struct {
		name  string
		s     Schema
		input string
		fast  bool // the schema has a fast path
		check func(out string, err error) error
	}{
		{"flat", flat, flatBenchInput, true, func(out string, err error) error {
			if want := `{"city":"Lisbon","days":3,"hourly":false,"latitude":38.7223,"units":"metric"}`; err != nil || out != want {
				return errors.New("got " + out + ", want " + want)
			}
			return nil
		}},
		{"nested", nested, nestedBenchInput, false, func(out string, err error) error {
			if err != nil || !strings.HasPrefix(out, `{"customer":{"email":"ana@example.com","id":"c-1042"},"items":[`) {
				return errors.New("got " + out)
			}
			return nil
		}},
		// A wrong type: the fast path declines, the generic path finds the property
		// and writes the message for the model.
		{"invalid", flat, `{"city":"Lisbon","days":"three"}`, true, func(out string, err error) error {
			if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), `"days"`) {
				return errors.New("want an invalid-arguments error naming days, got " + out)
			}
			return nil
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if (c.s.fast != nil) != c.fast {
				b.Fatalf("schema has a fast path: %v, want %v", c.s.fast != nil, c.fast)
			}
			if err := c.check(c.s.Validate(c.input)); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.s.Validate(c.input)
			}
		})
	}
}

func BenchmarkFromJSON(b *testing.B) {
	for _, c := range []struct {
		name string
		js   string
		fast bool
	}{
		{"flat", flatBenchSchema().String(), true},
		{"nested", nestedBenchSchemaJSON, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := FromJSON([]byte(c.js))
			if err != nil {
				b.Fatal(err)
			}
			if (s.fast != nil) != c.fast || !strings.HasPrefix(s.String(), `{"type":"object",`) {
				b.Fatalf("compiled %s: fast path %v, want %v", s, s.fast != nil, c.fast)
			}
			raw := []byte(c.js)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := FromJSON(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLimits times the worst the limits allow: compiling a schema at every cap at
// once (atCapsSchema), refusing hostile ones, and validating arguments of the costliest
// kind for each counted check (wideAnyOf) within 1 KiB and as large as the budget of a
// validation lets them be. "checks/op" is what the budget counted.
func BenchmarkLimits(b *testing.B) {
	caps := []byte(atCapsSchema())
	for _, c := range []struct {
		name   string
		schema []byte
		ok     bool
	}{
		{"compile/at_the_caps", caps, true},
		{"compile/billion_laughs", []byte(laughs(30, false)), false},
		{"compile/ref_loop", []byte(`{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}}}`), false},
		{"compile/over_MaxNodes", []byte(withAllOf(MaxNodes + 1)), false},
		{"compile/over_MaxDepth", []byte(nested(MaxDepth + 1)), false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := FromJSON(c.schema); (err == nil) != c.ok {
				b.Fatalf("FromJSON: %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = FromJSON(c.schema)
			}
		})
	}

	atCaps, err := FromJSON(caps)
	if err != nil {
		b.Fatal(err)
	}
	wide, err := FromJSON([]byte(wideAnyOf))
	if err != nil {
		b.Fatal(err)
	}
	small, _ := largestWithinBudget(b, wide, wideAnyOfItem, 1<<10)
	large, over := largestWithinBudget(b, wide, wideAnyOfItem, 1<<20)
	numbers, err := FromJSON([]byte(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"number"}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	mib := `{"a":[` + strings.TrimSuffix(strings.Repeat("0,", 1<<19-4), ",") + `]}`
	for _, c := range []struct {
		name  string
		s     Schema
		input string
		ok    bool
	}{
		{"validate/at_the_caps", atCaps, `{"p0":"Lisbon","p5":"v","p6":` + tree(3, 3, `"leaf"`) + `,"p7":[[[]]]}`, true},
		{"validate/at_the_caps_deep_tree", atCaps, `{"p6":` + tree(31, 1, `"leaf"`) + `}`, true},
		{"validate/at_the_caps_invalid", atCaps, `{"p6":` + tree(30, 1, `1`) + `}`, false},
		{"validate/worst_1KiB", wide, small, true},
		{"validate/worst_largest_within_budget", wide, large, true},
		{"validate/worst_twice_that_refused", wide, over, false},
		// What the budget's allowance for each byte is for: a large array of
		// numbers, the most values 1 MiB of arguments can hold.
		{"validate/numbers_1MiB", numbers, mib, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := c.s.Validate(c.input); (err == nil) != c.ok {
				b.Fatalf("Validate(%d bytes): %v", len(c.input), err)
			}
			v, err := jsontree.Decode([]byte(c.input), jsontree.MaxArgumentDepth)
			if err != nil {
				b.Fatal(err)
			}
			checks, _ := c.s.graph.spend(v, validationBudget(len(c.input)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.s.Validate(c.input)
			}
			b.ReportMetric(float64(checks), "checks/op")
			b.ReportMetric(float64(len(c.input)), "bytes")
		})
	}
}
