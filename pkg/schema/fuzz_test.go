package schema_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// FuzzValidate checks that Validate never panics, whatever a model sends, and that
// what it accepts is canonical: validating the output again gives the same output.
func FuzzValidate(f *testing.F) {
	schemas := []schema.Schema{
		schema.Empty(),
		schema.Params(
			schema.String("name", ""),
			schema.Integer("n", "").AsOptional(),
			schema.String("color", "").WithEnum("red", "green").AsOptional(),
			schema.Object("o", "", schema.Array("l", "", schema.TypeNumber)).AsOptional(),
		),
		mustSchema(f, `{"type":"object","properties":{"a":{"anyOf":[{"type":"string","minLength":2},{"type":"array","items":{"$ref":"#"}}]}},"additionalProperties":{"type":"boolean"}}`),
	}
	for _, seed := range []string{
		``, `{}`, `{"name":"x"}`, `{"name":"x","n":1.0,"o":{"l":[1,2e3]}}`, `{"a":"é\u00e9"}`, `{"a":[{"a":"xx"}],"b":true}`,
		`{"a":1,"a":2}`, `[]`, `{"name":"x"} x`, "{\"\xff\":1}", `{"n":1e999}`, `{"color":"blue"}`,
	} {
		f.Add(seed, uint8(0))
		f.Add(seed, uint8(1))
		f.Add(seed, uint8(2))
	}
	f.Fuzz(func(t *testing.T, input string, which uint8) {
		s := schemas[int(which)%len(schemas)]
		canonical, err := s.Validate(input)
		if err != nil {
			return
		}
		again, err := s.Validate(canonical)
		if err != nil {
			t.Fatalf("Validate(%q) accepted, but its output %q is rejected: %v", input, canonical, err)
		}
		if again != canonical {
			t.Fatalf("Validate is not idempotent on %q: %q then %q", input, canonical, again)
		}
	})
}
