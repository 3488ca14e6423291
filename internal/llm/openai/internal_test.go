package openai

import (
	"encoding/json"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func TestOfficialEndpointUsesMaxCompletionTokens(t *testing.T) {
	for _, tc := range []struct {
		base string
		want string
	}{
		{"", "max_completion_tokens"},
		{"https://API.openai.com/v1/", "max_completion_tokens"},
		{"http://localhost:11434/v1", "max_tokens"},
	} {
		p, err := New(Options{BaseURL: tc.base, DefaultModel: "m"})
		if err != nil {
			t.Fatal(err)
		}
		params, err := p.params(&llm.Request{MaxOutputTokens: 7})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(params)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		if body[tc.want] != 7.0 || len(body) != 3 { // model, stream_options and the bound
			t.Errorf("base %q: body = %s, want %s", tc.base, b, tc.want)
		}
	}
}

func TestStrictCompatible(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`, true},
		{`{"type":"object","properties":{},"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"type":["string","null"],"format":"date"},"b":{"type":"array","items":{"type":"object","properties":{"c":{"type":"integer","minimum":0}},"required":["c"],"additionalProperties":false},"maxItems":3},"d":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/x"}]}},"required":["a","b","d"],"additionalProperties":false,"$defs":{"x":{"type":"number"}}}`, true},
		{`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, false},                                // a not required
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, false},                                            // additionalProperties missing
		{`{"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"],"additionalProperties":false}`, false}, // unsupported keyword
		{`{"type":"object","properties":{"a":{"type":"string","format":"uri"}},"required":["a"],"additionalProperties":false}`, false},
		{`{"type":"object","properties":{"a":{}},"required":["a"],"additionalProperties":false}`, false}, // untyped
		{`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}},"required":["a"],"additionalProperties":false}`, false},
		{`{"anyOf":[{"type":"object"}]}`, false},
		{`{"type":"string"}`, false},
		{`[]`, false},
		{`{`, false},
	} {
		if got := StrictCompatible(json.RawMessage(tc.schema)); got != tc.want {
			t.Errorf("StrictCompatible(%s) = %v, want %v", tc.schema, got, tc.want)
		}
	}
}
