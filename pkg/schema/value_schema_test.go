package schema_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

func TestValueSchema(t *testing.T) {
	s, err := schema.ValueFromJSON([]byte(`{"type":"array","items":{"type":"integer"},"minItems":1}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ in, want, err string }{
		{`[3, 1, 2]`, `[3,1,2]`, ""},
		{`[]`, "", "at least 1 item"},
		{`["a"]`, "", "expected integer"},
		{`[1] [2]`, "", "invalid JSON"},
		{`{"a":1,"a":2}`, "", "duplicate key"},
	}
	for _, c := range cases {
		got, err := s.Validate(c.in)
		if c.err != "" {
			if !errors.Is(err, schema.ErrInvalidArguments) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Validate(%s) = %q, %v; want an error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Validate(%s) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"type":"strng"}`, `{"$ref":"file:///etc/passwd"}`, `{"type":"object","type":"array"}`} {
		if _, err := schema.ValueFromJSON([]byte(bad)); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("ValueFromJSON(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}
