package scripted

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// view is what rules and templates see of a request.
type view struct {
	turn  int
	user  string
	batch []llm.Message // the tool messages at the end of the conversation
	msgs  []llm.Message
	tools []llm.ToolSpec
}

func newView(req *llm.Request) *view {
	v := &view{turn: 1, msgs: req.Messages, tools: req.Tools}
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			v.turn++
		}
	}
	for _, m := range slices.Backward(req.Messages) {
		if m.Role == llm.RoleUser {
			v.user = m.Text
			break
		}
	}
	start := len(req.Messages)
	for start > 0 && req.Messages[start-1].Role == llm.RoleTool {
		start--
	}
	v.batch = req.Messages[start:]
	return v
}

func (r *compiledRule) matches(v *view) bool {
	if r.turn != 0 && r.turn != v.turn {
		return false
	}
	if r.user != nil && !r.user.MatchString(v.user) {
		return false
	}
	if r.hasTool != "" && !slices.ContainsFunc(v.tools, func(t llm.ToolSpec) bool { return t.Name == r.hasTool }) {
		return false
	}
	if r.tool == "" && r.result == nil && r.isError == nil {
		return true
	}
	return slices.ContainsFunc(v.batch, func(m llm.Message) bool {
		return (r.tool == "" || m.ToolName == r.tool) &&
			(r.result == nil || r.result.MatchString(m.Text)) &&
			(r.isError == nil || m.IsError == *r.isError)
	})
}

// numberPattern finds a decimal number, as tools print them.
var numberPattern = regexp.MustCompile(`-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?`)

// funcs are the template functions, bound to one conversation.
func funcs(v *view) template.FuncMap {
	lastResult := func(msgs []llm.Message, name string) string {
		for _, m := range slices.Backward(msgs) {
			if m.Role == llm.RoleTool && m.ToolName == name {
				return m.Text
			}
		}
		return ""
	}
	return template.FuncMap{
		"result": func(name string) string { return lastResult(v.batch, name) },
		"latest": func(name string) string { return lastResult(v.msgs, name) },
		"results": func() string {
			texts := make([]string, len(v.batch))
			for i, m := range v.batch {
				texts[i] = m.Text
			}
			return strings.Join(texts, ", ")
		},
		"user": func() string { return v.user },
		"turn": func() int { return v.turn },
		"number": func(text string) (string, error) {
			s := numberPattern.FindString(text)
			if s == "" {
				return "", fmt.Errorf("no number in %q", text)
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return "", fmt.Errorf("number %q: %w", s, err)
			}
			return strconv.FormatFloat(f, 'f', -1, 64), nil
		},
		"json": encodeJSON,
		"find": func(expr, text string) (string, error) {
			re, err := regexp.Compile(expr)
			if err != nil {
				return "", err
			}
			m := re.FindStringSubmatch(text)
			switch {
			case m == nil:
				return "", nil
			case len(m) > 1:
				return m[1], nil
			default:
				return m[0], nil
			}
		},
	}
}

// execute runs a template parsed by parseTemplate against one conversation.
func execute(t *template.Template, v *view) (string, error) {
	if text, ok := plainText(t); ok {
		return text, nil // no action: nothing to bind, nothing to run
	}
	t, err := t.Clone()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Funcs(funcs(v)).Execute(&b, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

// plainText is the text of a template without actions: only text nodes.
func plainText(t *template.Template) (string, bool) {
	if t.Tree == nil || t.Root == nil {
		return "", false
	}
	var b strings.Builder
	for _, n := range t.Root.Nodes {
		text, ok := n.(*parse.TextNode)
		if !ok {
			return "", false
		}
		b.Write(text.Text)
	}
	return b.String(), true
}
