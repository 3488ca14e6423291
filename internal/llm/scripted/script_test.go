package scripted_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
)

// yamlText lets tests indent YAML with tabs, which YAML forbids.
func yamlText(s string) []byte {
	return []byte(strings.ReplaceAll(strings.TrimPrefix(s, "\n"), "\t", "  "))
}

func TestParse(t *testing.T) {
	got, err := scripted.Parse(yamlText(`
name: full
rules:
	- name: first-turn
	  when:
	    turn: 2
	    user: "(?i)add"
	    tool: add
	    result: "^5$"
	    error: false
	    has_tool: add
	  reply:
	    delay: 50ms
	    text: 'The sum is {{ result "add" }}.'
	    tool_calls:
	      - name: add
	        arguments: {"a": 2, "b": 3.5, "tags": [x, "y"], "opt": null}
	      - name: bad
	        arguments_raw: '{"a": 2,'
	        id: my-id
	- reply:
	    error: provider exploded
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := scripted.Script{Name: "full", Rules: []scripted.Rule{
		{
			Name: "first-turn",
			When: scripted.When{Turn: 2, User: "(?i)add", Tool: "add", Result: "^5$", Error: new(false), HasTool: "add"},
			Reply: scripted.Reply{
				Delay: 50 * time.Millisecond,
				Text:  `The sum is {{ result "add" }}.`,
				ToolCalls: []scripted.ToolCall{
					{Name: "add", Arguments: map[string]any{"a": 2, "b": 3.5, "tags": []any{"x", "y"}, "opt": nil}},
					{Name: "bad", ArgumentsRaw: `{"a": 2,`, ID: "my-id"},
				},
			},
		},
		{Reply: scripted.Reply{Error: "provider exploded"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Parse (-want +got):\n%s", diff)
	}
	p := mustNew(t, got)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{user("Add them"), assistant(call("c", "add", "{}")), result("add", "5")},
		Tools:    []llm.ToolSpec{{Name: "add"}},
	}))
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if diff := cmp.Diff(&llm.Response{
		Text: "The sum is 5.",
		ToolCalls: []llm.ToolCall{
			call("call_2_0", "add", `{"a":2,"b":3.5,"opt":null,"tags":["x","y"]}`),
			call("my-id", "bad", `{"a": 2,`),
		},
		Usage:        resp.Usage,
		FinishReason: "tool_calls",
		Model:        "scripted/full",
	}, resp); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", `
name: t
rules:
	- when:
	    colour: red
	  reply:
	    text: hi
`, "scripted: invalid script: yaml: unmarshal errors:\n  line 4: field colour not found in type scripted.When"},
		{"unknown top-level field", `
name: t
model: gpt
rules:
	- reply: {text: hi}
`, "scripted: invalid script: yaml: unmarshal errors:\n  line 2: field model not found in type scripted.Script"},
		{"bad regexp", `
name: t
rules:
	- reply: {text: hi}
	- name: second
	  when:
	    user: "(add"
	  reply:
	    text: hi
`, "scripted: invalid script \"t\": line 6: rule 2 \"second\": when.user: error parsing regexp: missing closing ): `(add`"},
		{"bad result regexp", `
name: t
rules:
	- when: {result: "a**"}
	  reply: {text: hi}
`, "scripted: invalid script \"t\": line 3: rule 1: when.result: error parsing regexp: invalid nested repetition operator: `**`"},
		{"bad template", `
name: t
rules:
	- name: greet
	  reply:
	    text: |
	      Hello
	      {{ nope "x" }}
`, `scripted: invalid script "t": line 5: rule 1 "greet": template: reply.text:2: function "nope" not defined`},
		{"unclosed template", `
name: t
rules:
	- reply:
	    text: "{{ user "
`, `scripted: invalid script "t": line 4: rule 1: template: reply.text:1: unclosed action`},
		{"bad arguments template", `
name: t
rules:
	- reply:
	    tool_calls:
	      - name: add
	      - name: multiply
	        arguments_raw: '{"a": {{ result }'
`, `scripted: invalid script "t": line 7: rule 1: template: reply.tool_calls[1].arguments_raw:1: unexpected "}" in operand`},
		{"neither text nor tool calls", `
name: t
rules:
	- reply: {text: hi}
	- name: empty
	  when: {turn: 2}
	  reply:
	    delay: 1s
`, `scripted: invalid script "t": line 6: rule 2 "empty": reply: needs text, tool_calls or error`},
		{"no reply", `
name: t
rules:
	- name: lonely
`, `scripted: invalid script "t": line 3: rule 1 "lonely": reply: needs text, tool_calls or error`},
		{"tool call without name", `
name: t
rules:
	- reply:
	    tool_calls:
	      - arguments: {a: 1}
`, `scripted: invalid script "t": line 5: rule 1: reply.tool_calls[0]: name is required`},
		{"both arguments", `
name: t
rules:
	- reply:
	    tool_calls:
	      - name: add
	        arguments: {a: 1}
	        arguments_raw: "{}"
`, `scripted: invalid script "t": line 5: rule 1: reply.tool_calls[0]: arguments and arguments_raw are exclusive`},
		{"arguments not JSON", `
name: t
rules:
	- reply:
	    tool_calls:
	      - name: add
	        arguments: {1: one}
`, `scripted: invalid script "t": line 6: rule 1: reply.tool_calls[0].arguments: json: unsupported type: map[interface {}]interface {}`},
		{"duplicate ids", `
name: t
rules:
	- reply:
	    tool_calls:
	      - {name: a, id: x}
	      - {name: b, id: x}
`, `scripted: invalid script "t": line 6: rule 1: reply.tool_calls[1].id: duplicate id "x"`},
		{"negative turn", `
name: t
rules:
	- when: {turn: -1}
	  reply: {text: hi}
`, `scripted: invalid script "t": line 3: rule 1: when.turn: must be 1 or more, not -1`},
		{"bad delay", `
name: t
rules:
	- reply: {text: hi, delay: soon}
`, "scripted: invalid script: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `soon` into time.Duration"},
		{"delay without unit", `
name: t
rules:
	- reply: {text: hi, delay: 50}
`, "scripted: invalid script: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!int `50` into time.Duration"},
		{"negative delay", `
name: t
rules:
	- reply: {text: hi, delay: -1s}
`, `scripted: invalid script "t": line 3: rule 1: reply.delay: must not be negative, not -1s`},
		{"no name", `
rules:
	- reply: {text: hi}
`, `scripted: invalid script: name: is required`},
		{"no rules", `
name: t
`, `scripted: invalid script "t": rules: at least one rule is required`},
		{"empty rules", `
name: t
rules: []
`, `scripted: invalid script "t": line 2: rules: at least one rule is required`},
		{"empty document", ``, `scripted: invalid script: empty document`},
		{"two documents", `
name: t
rules:
	- reply: {text: hi}
---
name: u
`, `scripted: invalid script: more than one YAML document`},
		{"not YAML", `name: [`, "scripted: invalid script: yaml: line 1: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scripted.Parse(yamlText(tt.yaml))
			if !errors.Is(err, scripted.ErrInvalidScript) {
				t.Errorf("error %v does not wrap ErrInvalidScript", err)
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\nwant    %s", err, tt.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		script scripted.Script
		want   string
	}{
		{"bad regexp", scripted.Script{Name: "t", Rules: []scripted.Rule{{Name: "r", When: scripted.When{User: "("}, Reply: scripted.Reply{Text: "x"}}}},
			"scripted: invalid script \"t\": rule 1 \"r\": when.user: error parsing regexp: missing closing ): `(`"},
		{"bad template", scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "{{ .x"}}}},
			`scripted: invalid script "t": rule 1: template: reply.text:1: unclosed action`},
		{"arguments not JSON", scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{
			ToolCalls: []scripted.ToolCall{{Name: "f", Arguments: func() {}}},
		}}}}, `scripted: invalid script "t": rule 1: reply.tool_calls[0].arguments: json: unsupported type: func()`},
		{"no name", scripted.Script{}, `scripted: invalid script: name: is required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scripted.New(tt.script)
			if !errors.Is(err, scripted.ErrInvalidScript) {
				t.Errorf("error %v does not wrap ErrInvalidScript", err)
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\nwant    %s", err, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("name: file\nrules:\n  - reply: {text: from a file}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := scripted.Load(good)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := collectText(t, p, request(user("hi"))); got != "from a file" {
		t.Errorf("answer = %q", got)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: file\nrules:\n  - reply: {txt: typo}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = scripted.Load(bad)
	want := bad + ": scripted: invalid script: yaml: unmarshal errors:\n  line 3: field txt not found in type scripted.Reply"
	if !errors.Is(err, scripted.ErrInvalidScript) || err.Error() != want {
		t.Errorf("Load(bad) error = %v\nwant               %s", err, want)
	}

	if _, err := scripted.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want os.ErrNotExist", err)
	}
}
