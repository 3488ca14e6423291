package loop_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// ignoreUsage leaves out the scripted provider's token estimates, which depend on the
// size of every request.
var ignoreUsage = cmpopts.IgnoreFields(loop.Result{}, "Usage")

func user(text string) llm.Message { return llm.Message{Role: llm.RoleUser, Text: text} }

func assistant(text string, calls ...llm.ToolCall) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Text: text, ToolCalls: calls}
}

func toolMsg(id, name, text string, isError bool) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: id, ToolName: name, Text: text, IsError: isError}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: args}
}

// newScript returns a scripted model; it fails the test when the script is malformed.
func newScript(t testing.TB, rules ...scripted.Rule) *scripted.Provider {
	t.Helper()
	p, err := scripted.New(scripted.Script{Name: "test", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// onTurn answers the n-th model call with r.
func onTurn(n int, r scripted.Reply) scripted.Rule {
	return scripted.Rule{When: scripted.When{Turn: n}, Reply: r}
}

// always answers every model call with r.
func always(r scripted.Reply) scripted.Rule { return scripted.Rule{Reply: r} }

// calls is a reply with tool calls whose arguments are sent verbatim.
func calls(cs ...scripted.ToolCall) scripted.Reply { return scripted.Reply{ToolCalls: cs} }

func raw(name, args string) scripted.ToolCall {
	return scripted.ToolCall{Name: name, ArgumentsRaw: args}
}

func text(s string) scripted.Reply { return scripted.Reply{Text: s} }

// invocation is one call of a test tool as the tool saw it.
type invocation struct {
	Tool  string
	Input string
}

// recorder builds tools that record their invocations. It is safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	got []invocation
}

func (r *recorder) add(name, input string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, invocation{name, input})
}

func (r *recorder) invocations() []invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// fixed returns a tool with the empty schema that records its input and returns res.
func (r *recorder) fixed(name string, res tool.Result, opts ...tool.Option) tool.Tool {
	return r.fn(name, schema.Empty(), func(context.Context, string) (tool.Result, error) { return res, nil }, opts...)
}

// fn returns a tool that records its input and then runs f.
func (r *recorder) fn(name string, schema schema.Schema, f func(ctx context.Context, input string) (tool.Result, error), opts ...tool.Option) tool.Tool {
	return tool.New(name, "the "+name+" tool", schema, func(ctx context.Context, input string) (tool.Result, error) {
		r.add(name, input)
		return f(ctx, input)
	}, opts...)
}

// rawTool implements tool.Tool directly, without the protection tool.New adds, so that
// the loop's own handling of panics and errors is exercised.
type rawTool struct {
	name string
	meta tool.Metadata
	call func(ctx context.Context, input string) (tool.Result, error)
}

func (t rawTool) Definition() tool.Definition {
	return tool.Definition{Name: t.name, Description: "raw " + t.name}
}
func (t rawTool) Metadata() tool.Metadata { return t.meta }
func (t rawTool) Call(ctx context.Context, input string) (tool.Result, error) {
	return t.call(ctx, input)
}

// events collects loop events. It is safe for concurrent use.
type events struct {
	mu  sync.Mutex
	got []loop.Event
}

func (e *events) observe(ev loop.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func (e *events) all() []loop.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// notFoundText is the auto-correction feedback for an unknown tool.
func notFoundText(requested, suggestion, available string) string {
	return fmt.Sprintf("Tool '%s' does not exist.%s Available tools: [%s]. Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable.",
		requested, suggestion, available)
}
