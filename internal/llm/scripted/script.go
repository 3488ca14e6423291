package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidScript is wrapped by every error about a malformed script.
var ErrInvalidScript = errors.New("scripted: invalid script")

// Script is a scripted model: rules that map a conversation to an answer.
type Script struct {
	// Name identifies the script; the provider answers as model "scripted/<Name>".
	Name string `yaml:"name"`
	// Rules are tried in order; the first whose When holds answers.
	Rules []Rule `yaml:"rules"`
}

// Rule is one answer and the conditions under which it is given.
type Rule struct {
	// Name appears in errors; optional.
	Name  string `yaml:"name,omitempty"`
	When  When   `yaml:"when,omitempty"`
	Reply Reply  `yaml:"reply"`
}

// When holds the conditions of a rule. All the conditions that are set must hold; an empty
// When always matches.
//
// Tool, Result and Error look at the last batch of tool results: the tool messages at the
// end of the conversation. They hold when one result of that batch satisfies all three.
type When struct {
	// Turn is the 1-based number of the model call: the number of assistant messages plus one.
	Turn int `yaml:"turn,omitempty"`
	// User is a regexp matched against the text of the last user message ("" if none).
	User string `yaml:"user,omitempty"`
	// Tool is the tool name of a result in the last batch.
	Tool string `yaml:"tool,omitempty"`
	// Result is a regexp matched against the text of a result in the last batch.
	Result string `yaml:"result,omitempty"`
	// Error, when set, is whether that result is an error.
	Error *bool `yaml:"error,omitempty"`
	// HasTool is the name of a tool that the request offers.
	HasTool string `yaml:"has_tool,omitempty"`
}

// Reply is the answer of a rule. It needs Text, ToolCalls or Error. With Error, the text and
// tool-call deltas are streamed and then the stream fails instead of yielding a final answer.
//
// Text and ToolCall.ArgumentsRaw are Go text/templates with these functions:
//
//	result NAME   text of the last result of tool NAME in the last batch ("" if none)
//	results       texts of all results of the last batch, joined by ", "
//	latest NAME   text of the most recent result of tool NAME anywhere in the conversation
//	user          text of the last user message
//	turn          the turn number
//	number TEXT   the first number in TEXT, as JSON (fails when there is none)
//	json VALUE    VALUE encoded as JSON, e.g. a string to embed in arguments
//	find RE TEXT  the first submatch of regexp RE in TEXT (the whole match without groups; "" if none)
type Reply struct {
	// Delay is the latency before the first chunk.
	Delay     time.Duration `yaml:"delay,omitempty"`
	Text      string        `yaml:"text,omitempty"`
	ToolCalls []ToolCall    `yaml:"tool_calls,omitempty"`
	// Error makes the stream fail with an error wrapping ErrInjected and this text.
	Error string `yaml:"error,omitempty"`
}

// ToolCall is a tool call of a reply. Arguments and ArgumentsRaw are exclusive; with
// neither, the arguments are "{}".
type ToolCall struct {
	// ID defaults to "call_<turn>_<index>", index counting from 0.
	ID   string `yaml:"id,omitempty"`
	Name string `yaml:"name"`
	// Arguments is any value; it is sent JSON-encoded.
	Arguments any `yaml:"arguments,omitempty"`
	// ArgumentsRaw is a template whose output is sent verbatim, valid JSON or not.
	ArgumentsRaw string `yaml:"arguments_raw,omitempty"`
}

// Parse reads a script from YAML and checks it. Unknown fields are errors; errors carry line
// numbers and wrap ErrInvalidScript.
func Parse(data []byte) (Script, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Script{}, fmt.Errorf("%w: %w", ErrInvalidScript, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Script
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return Script{}, fmt.Errorf("%w: empty document", ErrInvalidScript)
		}
		return Script{}, fmt.Errorf("%w: %w", ErrInvalidScript, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return Script{}, fmt.Errorf("%w: more than one YAML document", ErrInvalidScript)
	}
	if _, err := compile(s); err != nil {
		if se, ok := errors.AsType[*scriptError](err); ok {
			se.line = lineOf(&root, se.path)
		}
		return Script{}, err
	}
	return s, nil
}

// scriptError is a problem with one field of a script. path leads from the top of the
// document to the field: "rules", rule index, then field names and list indexes.
type scriptError struct {
	script string
	rule   string // rule label; "" for the script itself
	path   []any
	line   int // 0 when unknown (scripts built in Go)
	err    error
	// quiet leaves the field out of the message, for errors that name it already
	// (template errors read "template: reply.text:1: ...").
	quiet bool
}

func (e *scriptError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidScript.Error())
	if e.script != "" {
		fmt.Fprintf(&b, " %q", e.script)
	}
	b.WriteString(": ")
	if e.line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.line)
	}
	if e.rule != "" {
		b.WriteString(e.rule + ": ")
	}
	if f := fieldName(e.path); f != "" && !e.quiet {
		b.WriteString(f + ": ")
	}
	b.WriteString(e.err.Error())
	return b.String()
}

func (e *scriptError) Unwrap() []error { return []error{ErrInvalidScript, e.err} }

// fieldName renders a path without its rule prefix, as "reply.tool_calls[1].name".
func fieldName(path []any) string {
	if len(path) >= 2 && path[0] == "rules" {
		path = path[2:]
	}
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		}
	}
	return b.String()
}

// lineOf returns the line of the deepest node of path that exists in the document: the
// line of a mapping key, or of a sequence item.
func lineOf(root *yaml.Node, path []any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return line
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					line, n, found = n.Content[i].Line, n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		case int:
			if n.Kind != yaml.SequenceNode || p >= len(n.Content) {
				return line
			}
			n = n.Content[p]
			line = n.Line
		}
	}
	return line
}

// compiledScript is a checked script, ready to answer.
type compiledScript struct {
	name  string
	model string
	rules []compiledRule
	// waits says that a reply of the script has a delay.
	waits bool
}

type compiledRule struct {
	label   string // `rule 2 "first-turn"`, for errors
	turn    int
	user    *regexp.Regexp
	tool    string
	result  *regexp.Regexp
	isError *bool
	hasTool string

	delay   time.Duration
	text    *template.Template // nil when the reply has no text
	calls   []compiledCall
	failure string
}

type compiledCall struct {
	id       string
	name     string
	args     string             // used when argsTmpl is nil
	argsTmpl *template.Template // arguments_raw
}

func compile(s Script) (*compiledScript, error) {
	fail := func(rule string, path []any, err error) error {
		return &scriptError{script: s.Name, rule: rule, path: path, err: err}
	}
	failTemplate := func(rule string, path []any, err error) error {
		return &scriptError{script: s.Name, rule: rule, path: path, err: err, quiet: true}
	}
	if s.Name == "" {
		return nil, fail("", []any{"name"}, errors.New("is required"))
	}
	if len(s.Rules) == 0 {
		return nil, fail("", []any{"rules"}, errors.New("at least one rule is required"))
	}
	cs := &compiledScript{name: s.Name, model: "scripted/" + s.Name}
	for i, r := range s.Rules {
		label := "rule " + strconv.Itoa(i+1)
		if r.Name != "" {
			label += " " + strconv.Quote(r.Name)
		}
		at := func(path ...any) []any { return append([]any{"rules", i}, path...) }
		cr := compiledRule{
			label:   label,
			turn:    r.When.Turn,
			tool:    r.When.Tool,
			isError: r.When.Error,
			hasTool: r.When.HasTool,
			delay:   r.Reply.Delay,
			failure: r.Reply.Error,
		}
		if cr.turn < 0 {
			return nil, fail(label, at("when", "turn"), fmt.Errorf("must be 1 or more, not %d", cr.turn))
		}
		var err error
		if cr.user, err = compileRegexp(r.When.User); err != nil {
			return nil, fail(label, at("when", "user"), err)
		}
		if cr.result, err = compileRegexp(r.When.Result); err != nil {
			return nil, fail(label, at("when", "result"), err)
		}
		if cr.delay < 0 {
			return nil, fail(label, at("reply", "delay"), fmt.Errorf("must not be negative, not %v", cr.delay))
		}
		cs.waits = cs.waits || cr.delay > 0
		if r.Reply.Text == "" && len(r.Reply.ToolCalls) == 0 && r.Reply.Error == "" {
			return nil, fail(label, at("reply"), errors.New("needs text, tool_calls or error"))
		}
		if r.Reply.Text != "" {
			if cr.text, err = parseTemplate("reply.text", r.Reply.Text); err != nil {
				return nil, failTemplate(label, at("reply", "text"), err)
			}
		}
		ids := make(map[string]bool)
		for j, c := range r.Reply.ToolCalls {
			cc := compiledCall{id: c.ID, name: c.Name, args: "{}"}
			if c.Name == "" {
				return nil, fail(label, at("reply", "tool_calls", j), errors.New("name is required"))
			}
			if c.ID != "" {
				if ids[c.ID] {
					return nil, fail(label, at("reply", "tool_calls", j, "id"), fmt.Errorf("duplicate id %q", c.ID))
				}
				ids[c.ID] = true
			}
			switch {
			case c.Arguments != nil && c.ArgumentsRaw != "":
				return nil, fail(label, at("reply", "tool_calls", j), errors.New("arguments and arguments_raw are exclusive"))
			case c.Arguments != nil:
				if cc.args, err = encodeJSON(c.Arguments); err != nil {
					return nil, fail(label, at("reply", "tool_calls", j, "arguments"), err)
				}
			case c.ArgumentsRaw != "":
				name := fmt.Sprintf("reply.tool_calls[%d].arguments_raw", j)
				if cc.argsTmpl, err = parseTemplate(name, c.ArgumentsRaw); err != nil {
					return nil, failTemplate(label, at("reply", "tool_calls", j, "arguments_raw"), err)
				}
			}
			cr.calls = append(cr.calls, cc)
		}
		cs.rules = append(cs.rules, cr)
	}
	return cs, nil
}

func compileRegexp(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile(expr)
}

// parseTemplate parses with the template functions bound to an empty conversation, so that
// unknown functions are caught at load time; execution binds them to the real one.
func parseTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Funcs(funcs(&view{})).Parse(text)
}

// encodeJSON encodes v without escaping HTML characters, which a model would not do either.
func encodeJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
