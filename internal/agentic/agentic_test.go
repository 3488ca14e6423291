package agentic

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// nester runs nested loops with a scripted model, as the run does with its provider,
// and keeps every loop it was asked for.
type nester struct {
	prov *scripted.Provider
	mu   sync.Mutex
	runs []Loop
	// hidden are the context keys a model must not read.
	hidden []string
}

func (n *nester) Decorate(t tool.Tool) tool.Tool { return t }

func (n *nester) Hidden(key string) bool { return slices.Contains(n.hidden, key) }

func (n *nester) RunLoop(ctx context.Context, l Loop) (*loop.Result, error) {
	n.mu.Lock()
	n.runs = append(n.runs, l)
	n.mu.Unlock()
	return loop.Run(WithNester(ctx, n), loop.Options{Provider: n.prov, MaxIterations: l.MaxIterations, OutputSchema: l.OutputSchema, Strategies: []loop.Strategy{progressive.New()}},
		loop.Input{System: l.System, Messages: []llm.Message{{Role: llm.RoleUser, Text: l.Input}}, Tools: l.Tools})
}

func newNester(t *testing.T, rules ...scripted.Rule) *nester {
	t.Helper()
	p, err := scripted.New(scripted.Script{Name: "agentic", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return &nester{prov: p}
}

func call(name string) scripted.Reply {
	return scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: name, ArgumentsRaw: `{}`}}}
}

func turn(n int, r scripted.Reply) scripted.Rule {
	return scripted.Rule{When: scripted.When{Turn: n}, Reply: r}
}

// catalog is a Catalog over fixed tools; each tool counts its calls.
type catalog struct {
	tools  map[string]tool.Tool
	groups map[string][]tool.Tool
	mu     sync.Mutex
	calls  []string
}

func (c *catalog) Tool(name string) (tool.Tool, bool) { t, ok := c.tools[name]; return t, ok }
func (c *catalog) Serves(name string) bool            { _, ok := c.tools[name]; return ok }
func (c *catalog) Group(role string) ([]tool.Tool, bool) {
	ts, ok := c.groups[role]
	return ts, ok
}

func (c *catalog) add(name string, res tool.Result) {
	if c.tools == nil {
		c.tools = map[string]tool.Tool{}
	}
	c.tools[name] = tool.New(name, "Tool "+name+".", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		c.mu.Lock()
		c.calls = append(c.calls, name)
		c.mu.Unlock()
		return res, nil
	})
}

func (c *catalog) called() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.calls, ",")
}

func compileOne(t *testing.T, cat Catalog, specs ...Spec) tool.Tool {
	t.Helper()
	for i := range specs {
		if specs[i].Key == "" {
			specs[i].Key = "agentic_tools[" + string(rune('0'+i)) + "]"
		}
	}
	ts, err := Compile(specs, []string{specs[0].Name}, cat)
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDefaultSystemPrompts(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{DefaultSystemPrompt("Find the weather."), "You are an intelligent agent that can use tools to help you complete tasks. Use the provided tools to perform the following task: Find the weather."},
		{PlaybookSystemPrompt("Ship it."), "You are an intelligent agent that can use tools to help you complete tasks. Use the provided tools to perform the following task: Ship it.\n\nNote: Some tools may require certain prerequisites before they become available.\nIf a tool indicates it is not yet available, use the required prerequisite tools first."},
		{StateMachineSystemPrompt("Check out.", "CART"), "You are an intelligent agent that can use tools to complete tasks.\n\nCurrent state: CART\n\nTask: Check out.\n\nUse the available tools to complete the task. Some tools are only available\nin certain states. If a tool indicates it's not available in the current state,\nyou may need to use other tools first to transition to the appropriate state."},
	} {
		if tc.got != tc.want {
			t.Errorf("got\n%q\nwant\n%q", tc.got, tc.want)
		}
	}
}

// A simple agentic tool: every sub-tool visible, the default prompt, the input JSON as
// the user message, artifacts returned (none, one, a list).
func TestSimple(t *testing.T) {
	cat := &catalog{}
	cat.add("lookup", tool.ArtifactResult("found", tool.Artifact{TypeName: "City", JSON: []byte(`{"name":"Oslo"}`)}))
	cat.add("note", tool.Text("noted"))
	cat.add("list", tool.ArtifactResult("two", tool.Artifact{TypeName: "[]City", JSON: []byte(`[{"name":"Rome"},{"name":"Lima"}]`)}))
	n := newNester(t,
		scripted.Rule{When: scripted.When{User: `"one"`, Turn: 1}, Reply: call("lookup")},
		scripted.Rule{When: scripted.When{User: `"many"`, Turn: 1}, Reply: call("lookup")},
		scripted.Rule{When: scripted.When{User: `"many"`, Turn: 2}, Reply: call("list")},
		scripted.Rule{When: scripted.When{User: `"none"`, Turn: 1}, Reply: call("note")},
		scripted.Rule{Reply: scripted.Reply{Text: "done: {{ results }}"}},
	)
	at := compileOne(t, cat, Spec{Name: "travel", Description: "Plan a trip.", Tools: []string{"lookup", "note", "list"},
		Parameters: schema.Params(schema.String("q", "what to do"))})
	if d := at.Definition(); d.Name != "travel" || d.Description != "Plan a trip." || !strings.Contains(d.InputSchema.String(), `"q"`) {
		t.Errorf("definition %+v", d)
	}
	ctx := WithNester(ctxT(t), n)
	res, err := at.Call(ctx, `{"q":"none"}`)
	if err != nil || res.Kind != tool.KindText || res.Content != "done: noted" {
		t.Errorf("no artifact: %+v, %v", res, err)
	}
	if l := n.runs[0]; l.System != DefaultSystemPrompt("Plan a trip.") || l.Input != `{"q":"none"}` || len(l.Tools) != 3 || l.Kind != KindSimple {
		t.Errorf("loop %+v", l)
	}
	res, _ = at.Call(ctx, `{"q":"one"}`)
	if res.Kind != tool.KindArtifact || res.Artifact.TypeName != "City" || string(res.Artifact.JSON) != `{"name":"Oslo"}` || res.Content != "done: found" {
		t.Errorf("one artifact: %+v", res)
	}
	res, _ = at.Call(ctx, `{"q":"many"}`)
	if res.Kind != tool.KindArtifact || res.Artifact.TypeName != "[]City" || string(res.Artifact.JSON) != `[{"name":"Oslo"},{"name":"Rome"},{"name":"Lima"}]` {
		t.Errorf("artifacts: %+v %s", res, res.Artifact.JSON)
	}
}

// Outside a run an agentic tool answers with an error the model reads.
func TestNoNester(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	at := compileOne(t, cat, Spec{Name: "x", Description: "X.", Tools: []string{"a"}})
	res, err := at.Call(context.Background(), `{}`)
	if err != nil || !res.IsError() || res.Content != "No AgentProcess context available" {
		t.Errorf("%+v, %v", res, err)
	}
}

// Nested agentic tools: their artifacts reach the outer result only with
// capture_nested_artifacts; the outer tool's own leaves always do.
func TestCaptureNestedArtifacts(t *testing.T) {
	for _, capture := range []bool{false, true} {
		cat := &catalog{}
		cat.add("leaf", tool.ArtifactResult("leaf", tool.Artifact{TypeName: "Leaf", JSON: []byte(`{"l":1}`)}))
		cat.add("own", tool.ArtifactResult("own", tool.Artifact{TypeName: "Own", JSON: []byte(`{"o":1}`)}))
		n := newNester(t,
			scripted.Rule{When: scripted.When{HasTool: "inner", Turn: 1}, Reply: call("inner")},
			scripted.Rule{When: scripted.When{HasTool: "inner", Turn: 2}, Reply: call("own")},
			scripted.Rule{When: scripted.When{HasTool: "leaf", Turn: 1}, Reply: call("leaf")},
			scripted.Rule{Reply: scripted.Reply{Text: "ok"}},
		)
		at := compileOne(t, cat,
			Spec{Name: "outer", Description: "Outer.", Tools: []string{"inner", "own"}, CaptureNestedArtifacts: capture},
			Spec{Name: "inner", Description: "Inner.", Tools: []string{"leaf"}},
		)
		res, err := at.Call(WithNester(ctxT(t), n), `{}`)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"o":1}`
		if capture {
			want = `[{"l":1},{"o":1}]`
		}
		if res.Artifact == nil || string(res.Artifact.JSON) != want {
			t.Errorf("capture=%v: %+v", capture, res.Artifact)
		}
		if len(n.runs) != 2 || n.runs[1].Tool != "inner" {
			t.Errorf("capture=%v: loops %+v", capture, n.runs)
		}
	}
}

// A sub-tool's signal ends the calling run: it comes out of the agentic tool as the
// signal itself.
func TestSignalPassesThrough(t *testing.T) {
	cat := &catalog{tools: map[string]tool.Tool{"stop": tool.New("stop", "Stops.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, &tool.Terminate{Scope: tool.TerminateAgent, Reason: "enough"}
	})}}
	n := newNester(t, turn(1, call("stop")), scripted.Rule{Reply: scripted.Reply{Text: "x"}})
	at := compileOne(t, cat, Spec{Name: "x", Description: "X.", Tools: []string{"stop"}})
	_, err := at.Call(WithNester(ctxT(t), n), `{}`)
	var term *tool.Terminate
	if !errors.As(err, &term) || term.Reason != "enough" {
		t.Errorf("err %v, want the termination", err)
	}
}

// The nested loop's limit is the spec's; reaching it is an error the outer model reads.
func TestMaxIterationsHonoured(t *testing.T) {
	cat := &catalog{}
	cat.add("spin", tool.Text("again"))
	n := newNester(t, scripted.Rule{Reply: call("spin")})
	at := compileOne(t, cat, Spec{Name: "x", Description: "X.", Tools: []string{"spin"}, MaxIterations: 3})
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil || !res.IsError() || !strings.HasPrefix(res.Content, "Tool loop exceeded maximum iterations (3).") || cat.called() != "spin,spin,spin" {
		t.Errorf("%+v, %v; calls %s", res, err, cat.called())
	}
}

// A subagent without a description is described as a delegation to it; its loop is
// simple, with the default prompt over that description.
func TestAgentDescription(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	at := compileOne(t, cat, Spec{Name: "helper", Kind: KindAgent, Tools: []string{"a"}})
	if d := at.Definition().Description; d != "Delegate to agent 'helper'" {
		t.Errorf("description %q", d)
	}
	n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
	if _, err := at.Call(WithNester(ctxT(t), n), `{}`); err != nil {
		t.Fatal(err)
	}
	if l := n.runs[0]; l.Kind != KindAgent || l.System != DefaultSystemPrompt("Delegate to agent 'helper'") {
		t.Errorf("loop %+v", l)
	}
}
