package schema_test

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// FuzzFromJSON compiles arbitrary schemas, as a worker's registration brings them: it
// never panics, a schema it accepts validates arguments without panicking and its
// canonical form compiles again.
func FuzzFromJSON(f *testing.F) {
	for _, seed := range []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"array","items":{"type":"string"}}},"required":["a"]}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"http://127.0.0.1:1/s.json"}}}`,
		`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"$ref":"#"}]}}}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`,
		`{"type":"objekt"}`, `[]`, `{"type":"object","properties":{"a":{"type":"string","pattern":"(a+)+$"}}}`,
		// Hostile schemas: the limits refuse them, or, for legitimate recursion,
		// bound the work of validating.
		`{"type":"object","$ref":"#"}`,
		`{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}}}`,
		`{"type":"object","$dynamicAnchor":"n","allOf":[{"$dynamicRef":"#n"}]}`,
		`{"$id":"https://example.com/r.json","type":"object","$ref":"s.json","$defs":{"s":{"$id":"s.json","$ref":"r.json"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"urn:example:schema"}}}`,
		schema.Laughs(24, false), schema.Laughs(16, true),
		`{"type":"object","properties":{"a":` + strings.Repeat(`{"items":`, 64) + `{}` + strings.Repeat(`}`, 64) + `}}`,
		`{"type":"object","properties":{"a":{"type":"string","pattern":"\pL{1000}\pL{1000}"}}}`,
		`{"type":"object","properties":{"a":{"minLength":1e300,"maxItems":-1,"maximum":1e400,"multipleOf":0}}}`,
		`{"type":"object","properties":{"root":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"object","properties":{"v":{"type":"string"},"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}}`,
	} {
		f.Add([]byte(seed), `{"a":1}`)
	}
	f.Add([]byte(`{"type":"object","properties":{"root":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"object","properties":{"v":{"type":"string"},"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}}`),
		`{"root":{"v":"a","c":[{"v":"b","c":[{"v":1}]}]}}`)
	f.Fuzz(func(t *testing.T, def []byte, args string) {
		s, err := schema.FromJSON(def)
		if err != nil {
			// The validator resolved every reference before the limits follow them;
			// following one must not fail.
			if strings.Contains(err.Error(), "cannot tell where it leads") {
				t.Fatalf("FromJSON(%s): %v", def, err)
			}
			return
		}
		// A $ref in a schema position that points outside is refused (schema_test); one
		// under a keyword that is not a schema's is never followed.
		if strings.HasPrefix(strings.TrimSpace(string(def)), `{"$ref":"file:`) || strings.HasPrefix(strings.TrimSpace(string(def)), `{"$ref":"http`) {
			t.Fatalf("a schema that is an outside $ref compiled: %s", def)
		}
		_, _ = s.Validate(args)
		if _, err := schema.FromJSON(s.JSON()); err != nil {
			t.Fatalf("FromJSON(%s) compiled, but its JSON %s does not: %v", def, s.JSON(), err)
		}
	})
}
