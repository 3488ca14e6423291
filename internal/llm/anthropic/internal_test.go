package anthropic

import (
	"encoding/json"
	"testing"
)

func TestNativeCompatible(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"type":"string","format":"uri"},"b":{"type":"array","items":{"type":"integer"},"minItems":1}},"additionalProperties":false}`, true},
		{`{"type":"object","additionalProperties":{"type":"number"}}`, true}, // a map
		{`{"anyOf":[{"type":"string"},{"$ref":"#/$defs/x"}],"$defs":{"x":{"type":"null"}}}`, true},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, false}, // open object
		{`{"type":"object"}`, false}, // no properties
		{`{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"additionalProperties":false}`, false}, // unsupported keyword
		{`{"type":"string","format":"ipv5"}`, false},
		{`{"type":"array","items":{"type":"string"},"minItems":2}`, false},
		{`{"oneOf":[{"type":"string"}]}`, false},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string"}`, false},
		{`[]`, false},
	} {
		if got := NativeCompatible(json.RawMessage(tc.schema)); got != tc.want {
			t.Errorf("NativeCompatible(%s) = %v, want %v", tc.schema, got, tc.want)
		}
	}
}

func TestOutputSchemaAdapted(t *testing.T) {
	got, err := outputSchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","maxLength":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if want := `{"additionalProperties":false,"properties":{"a":{"description":"{maxLength: 3}","type":"string"}},"type":"object"}`; string(b) != want {
		t.Errorf("adapted schema = %s, want %s", b, want)
	}
}
