package schema

import (
	"errors"
	"strings"
	"testing"
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
