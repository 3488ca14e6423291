package agentic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Bounds of a system prompt template (system_prompt_template). text/template has no
// cost limit of its own: every loop iteration and template call takes a step, and what
// the functions make and the template writes is counted in bytes.
const (
	// MaxPromptTemplateBytes bounds the template's text.
	MaxPromptTemplateBytes = 16 << 10
	// MaxPromptBytes bounds the rendered prompt, and the value of each function call.
	MaxPromptBytes = 64 << 10
	// MaxPromptSteps bounds the loop iterations and template calls of one rendering.
	MaxPromptSteps = 10_000
	// maxPromptMadeBytes bounds what the functions of one rendering make altogether.
	maxPromptMadeBytes = 1 << 20
	// maxPrintfWidth bounds the widths and precisions of printf's verbs, so that one call
	// cannot make a large string before its size is checked.
	maxPrintfWidth = 999
)

var (
	errPromptTooLong = fmt.Errorf("the prompt is over %d bytes", MaxPromptBytes)
	errPromptSteps   = fmt.Errorf("it runs more than %d loop iterations and template calls", MaxPromptSteps)
	errPromptMade    = fmt.Errorf("its functions make more than %d bytes", maxPromptMadeBytes)
)

// stepFunc names the function that charges a step: ParsePrompt puts a call of it at the
// start of every loop body and every template. A template may call it too, to no use.
const stepFunc = "_step"

// Prompt is a compiled system prompt template: Go's text/template, with missing map keys
// an error, over promptData and promptFuncs.
type Prompt struct {
	t *template.Template
}

// ParsePrompt compiles a system prompt template.
func ParsePrompt(text string) (*Prompt, error) {
	if len(text) > MaxPromptTemplateBytes {
		return nil, fmt.Errorf("is %d bytes; the limit is %d", len(text), MaxPromptTemplateBytes)
	}
	funcs := promptFuncs(&budget{}, &promptBoard{})
	t, err := template.New("prompt").Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return nil, err
	}
	step, err := template.New("step").Funcs(funcs).Parse("{{" + stepFunc + "}}")
	if err != nil {
		return nil, err
	}
	charge := step.Root.Nodes[0]
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			chargeSteps(tt.Root, charge)
			tt.Root.Nodes = slices.Insert(tt.Root.Nodes, 0, charge.Copy())
		}
	}
	return &Prompt{t: t}, nil
}

// chargeSteps puts a copy of charge at the start of every loop body under list.
func chargeSteps(list *parse.ListNode, charge parse.Node) {
	if list == nil {
		return
	}
	for _, n := range list.Nodes {
		var b *parse.BranchNode
		switch n := n.(type) {
		case *parse.IfNode:
			b = &n.BranchNode
		case *parse.WithNode:
			b = &n.BranchNode
		case *parse.RangeNode:
			b = &n.BranchNode
			if b.List != nil {
				b.List.Nodes = slices.Insert(b.List.Nodes, 0, charge.Copy())
			}
		default:
			continue
		}
		chargeSteps(b.List, charge)
		chargeSteps(b.ElseList, charge)
	}
}

// PromptCall is what one rendering of a template reads besides its spec.
type PromptCall struct {
	// Input is the tool's arguments, as JSON; for an agent run directly, the run's last
	// user message, which need not be JSON.
	Input string
	// Context is the ToolCallContext. Its reserved keys, and those Hidden reports, are not
	// shown.
	Context toolctx.Context
	Hidden  func(key string) bool
	// Board is the run's blackboard; nil is an empty one.
	Board tool.Blackboard
}

// promptData is what a system prompt template reads (docs/agentic.md).
type promptData struct {
	// Tool and Description are the agentic tool's; Default the kind's system prompt, and
	// State the state a state machine starts in.
	Tool, Description, Default, State string
	// Input is the arguments decoded (numbers as json.Number), or the text itself when it
	// is not JSON; InputJSON the text.
	Input     any
	InputJSON string
	// Context is the ToolCallContext a model may read.
	Context map[string]string
	// Blackboard is the run's blackboard.
	Blackboard *promptBoard
}

// Render renders p for one call of the agentic tool s, starting in state (a state
// machine's) with the default prompt def.
func (p *Prompt) Render(s *Spec, state, def string, c PromptCall) (string, error) {
	d := promptData{
		Tool: s.Name, Description: s.Description, Default: def, State: state, InputJSON: c.Input,
		Context: c.Context.Keep(func(k string) bool { return !toolctx.IsReserved(k) && (c.Hidden == nil || !c.Hidden(k)) }).Map(),
	}
	if d.Description == "" && s.Kind == KindAgent {
		d.Description = AgentDescription(s.Name)
	}
	if v, err := decodeJSON([]byte(c.Input)); err == nil {
		d.Input = v
	} else if c.Input != "" {
		d.Input = c.Input // a run's prompt, for an agent run directly
	}
	d.Blackboard = &promptBoard{b: c.Board}
	t, err := p.t.Clone()
	if err != nil {
		return "", err
	}
	t.Funcs(promptFuncs(&budget{}, d.Blackboard))
	w := &boundedWriter{max: MaxPromptBytes}
	if err := t.Execute(w, d); err != nil {
		for _, known := range []error{errPromptTooLong, errPromptSteps, errPromptMade} {
			if errors.Is(err, known) {
				return "", known
			}
		}
		return "", err
	}
	if strings.TrimSpace(w.buf.String()) == "" {
		return "", errors.New("the prompt is empty")
	}
	return w.buf.String(), nil
}

// budget is what one rendering may still do.
type budget struct {
	steps, made int
}

func (b *budget) step() (string, error) {
	if b.steps++; b.steps > MaxPromptSteps {
		return "", errPromptSteps
	}
	return "", nil
}

// make counts s, a function's value, against the bounds.
func (b *budget) make(s string) (string, error) {
	b.made += len(s)
	switch {
	case len(s) > MaxPromptBytes:
		return "", errPromptTooLong
	case b.made > maxPromptMadeBytes:
		return "", errPromptMade
	}
	return s, nil
}

// promptFuncs are the functions a template may call: json, default and last, and the
// built-in functions that make strings (print, printf, println, html, js, urlquery),
// bounded.
func promptFuncs(b *budget, board *promptBoard) template.FuncMap {
	return template.FuncMap{
		stepFunc: b.step,
		"json": func(v any) (string, error) {
			var buf bytes.Buffer
			enc := json.NewEncoder(&boundedWriter{max: MaxPromptBytes, buf: &buf})
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				return "", err
			}
			return b.make(strings.TrimSuffix(buf.String(), "\n"))
		},
		"default": func(def, v any) any {
			if truth, ok := template.IsTrue(v); ok && truth {
				return v
			}
			return def
		},
		"last":     board.Last,
		"print":    func(args ...any) (string, error) { return b.make(fmt.Sprint(args...)) },
		"println":  func(args ...any) (string, error) { return b.make(fmt.Sprintln(args...)) },
		"html":     func(args ...any) (string, error) { return b.make(template.HTMLEscaper(args...)) },
		"js":       func(args ...any) (string, error) { return b.make(template.JSEscaper(args...)) },
		"urlquery": func(args ...any) (string, error) { return b.make(template.URLQueryEscaper(args...)) },
		"printf": func(format string, args ...any) (string, error) {
			if err := checkFormat(format); err != nil {
				return "", err
			}
			return b.make(fmt.Sprintf(format, args...))
		},
	}
}

// checkFormat refuses a printf format whose verbs take their width or precision from an
// argument, or ask for one over maxPrintfWidth.
func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		n := 0
		for i++; i < len(format) && strings.IndexByte("+-# .[]*0123456789", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				return errors.New("printf: a width or precision taken from an argument (*) is not allowed")
			case '0' <= c && c <= '9':
				if n = n*10 + int(c-'0'); n > maxPrintfWidth {
					return fmt.Errorf("printf: widths and precisions go up to %d", maxPrintfWidth)
				}
			default:
				n = 0
			}
		}
	}
	return nil
}

// boundedWriter keeps what is written to it and fails once it holds more than max bytes.
type boundedWriter struct {
	max int
	buf *bytes.Buffer
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.buf == nil {
		w.buf = &bytes.Buffer{}
	}
	if w.buf.Len()+len(p) > w.max {
		return 0, errPromptTooLong
	}
	return w.buf.Write(p)
}

// promptBoard is the run's blackboard as a template reads it: its entries, their types
// and the newest object of a type, decoded.
type promptBoard struct {
	b       tool.Blackboard
	entries []promptEntry
	read    bool
}

// promptEntry is an object of the blackboard: its type name and its value, decoded.
type promptEntry struct {
	Type  string
	Value any
}

// Entries are the blackboard's objects, oldest first.
func (p *promptBoard) Entries() []promptEntry {
	if !p.read && p.b != nil {
		for _, e := range p.b.Entries() {
			v, _ := decodeJSON(e.JSON)
			p.entries = append(p.entries, promptEntry{Type: e.TypeName, Value: v})
		}
	}
	p.read = true
	return p.entries
}

// Types are the type names of the blackboard's objects, each once, in the order they
// first appear.
func (p *promptBoard) Types() []string {
	var out []string
	for _, e := range p.Entries() {
		if !slices.Contains(out, e.Type) {
			out = append(out, e.Type)
		}
	}
	return out
}

// Last is the newest object of a type (a simple or qualified name, see
// tool.SatisfiesType), decoded; nil when there is none.
func (p *promptBoard) Last(typeName string) any {
	if p == nil || p.b == nil {
		return nil
	}
	e, ok := p.b.Last(typeName)
	if !ok {
		return nil
	}
	v, _ := decodeJSON(e.JSON)
	return v
}

// decodeJSON decodes one JSON value, keeping numbers as they are written (json.Number).
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}
