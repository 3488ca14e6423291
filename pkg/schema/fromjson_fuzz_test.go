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
	} {
		f.Add([]byte(seed), `{"a":1}`)
	}
	f.Fuzz(func(t *testing.T, def []byte, args string) {
		s, err := schema.FromJSON(def)
		if err != nil {
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
