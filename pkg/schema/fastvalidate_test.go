package schema

import (
	"strings"
	"testing"
)

var flatSchemas = []string{
	`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}`,
	`{"type":"object","properties":{"q":{"type":"string","enum":["x","y","é"]},"n":{"type":"integer"},"f":{"type":"boolean"}},"required":["q"]}`,
	`{"type":"object","properties":{}}`,
	`{"type":"object","properties":{"text":{"type":"string","description":"t"}}}`,
}

// TestFastPathAgreesWithGeneric: wherever the fast path accepts arguments, the generic
// path accepts them too and writes the same canonical form; flat schemas get a fast path
// and others do not.
func TestFastPathAgreesWithGeneric(t *testing.T) {
	inputs := []string{
		`{"a":1,"b":2}`, `{"b":2.50,"a":-1e3}`, `{"a":1}`, `{"a":"1","b":2}`, `{"a":1,"b":2,"c":3}`,
		`{"a":1,"a":2,"b":3}`, `{"a":1,"b":2} x`, `{"a":null,"b":2}`, `{"a":[1],"b":2}`, `{"a":1e999,"b":1}`,
		`{"q":"x"}`, `{"q":"z"}`, `{"q":"é","n":3,"f":true}`, `{"q":"x","n":3.5}`, `{"q":"x","n":4.0}`, `{"q":"x","extra":"\u003c\n"}`,
		`{}`, `{"text":"line\r\nbreak \"quoted\" <tag> \\ ✓"}`, `{"text":"\xff"}`, `[]`, `"x"`, ``, `{`,
		// Numbers the fast path decides without parsing, and those it must parse.
		`{"a":1e308,"b":2}`, `{"a":1.7976931348623157e309,"b":1}`, `{"a":-0,"b":0.0}`, `{"a":12345.678901234567890123456789,"b":-98765.4321e-3}`,
		`{"a":` + strings.Repeat("9", 308) + `,"b":1}`, `{"a":` + strings.Repeat("9", 309) + `,"b":1}`, `{"a":` + strings.Repeat("9", 400) + `.5,"b":1}`,
		`{"q":"x","n":1e2}`, `{"q":"x","n":10.5e1}`, `{"q":"x","n":-7}`, `{"q":"x","n":` + strings.Repeat("1", 320) + `}`, `{"q":"x","n":01}`, `{"q":"x","n":1.}`,
		`{"q":"x","extra":` + strings.Repeat("9", 400) + `}`, `{"q":"x","extra":2.5E+3}`,
	}
	for _, js := range flatSchemas {
		s, err := FromJSON([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		if s.fast == nil {
			t.Errorf("schema %s has no fast path", js)
			continue
		}
		for _, in := range inputs {
			compareFast(t, s, in)
		}
	}
	for _, js := range []string{
		`{"type":"object","properties":{"a":{"type":"number","minimum":0}}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`,
		`{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`,
	} {
		s, err := FromJSON([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		if s.fast != nil {
			t.Errorf("schema %s is not flat but got a fast path", js)
		}
	}
}

func compareFast(t *testing.T, s Schema, in string) {
	t.Helper()
	fast, ferr := s.fast.validate(in)
	if ferr != nil {
		return // the fast path only says yes
	}
	slow, serr := s.validateGeneric(in)
	if serr != nil || slow != fast {
		t.Errorf("schema %s, input %q: fast %q, generic %q (%v)", s.raw, in, fast, slow, serr)
	}
}

func FuzzFastPathAgreesWithGeneric(f *testing.F) {
	for _, in := range []string{`{"a":1,"b":2}`, `{"q":"x","n":3,"f":false}`, `{"text":"é"}`, `{}`} {
		f.Add(in)
	}
	var schemas []Schema
	for _, js := range flatSchemas {
		s, err := FromJSON([]byte(js))
		if err != nil {
			f.Fatal(err)
		}
		schemas = append(schemas, s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, s := range schemas {
			compareFast(t, s, in)
		}
	})
}
