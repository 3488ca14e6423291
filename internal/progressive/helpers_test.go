package progressive_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// unfoldText is the unfold message, spelt out so that the tests pin it.
func unfoldText(list string) string {
	return "Tools now available: " + list + ". You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."
}

// alreadyLoaded is the one-shot text, spelt out.
func alreadyLoaded(name, advice string) string {
	return "ALREADY LOADED. The body of '" + name + "' was returned earlier in this turn — read it from your conversation history above. Do not call this tool again. " + advice
}

// calls records the invocations of leaf tools. It is safe for concurrent use.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// leaf returns a tool described "Does <name>." that answers "<name> done".
func (c *calls) leaf(name string) tool.Tool {
	return tool.New(name, "Does "+name+".", schema.Empty(), func(_ context.Context, in string) (tool.Result, error) {
		c.mu.Lock()
		c.got = append(c.got, name+" "+in)
		c.mu.Unlock()
		return tool.Text(name + " done"), nil
	})
}

func (c *calls) leaves(names ...string) []tool.Tool {
	out := make([]tool.Tool, len(names))
	for i, n := range names {
		out[i] = c.leaf(n)
	}
	return out
}

func toolNames(ts []tool.Tool) []string {
	if ts == nil {
		return nil
	}
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Definition().Name)
	}
	return out
}

func newScript(t testing.TB, rules ...scripted.Rule) *scripted.Provider {
	t.Helper()
	p, err := scripted.New(scripted.Script{Name: "test", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func onTurn(n int, r scripted.Reply) scripted.Rule {
	return scripted.Rule{When: scripted.When{Turn: n}, Reply: r}
}

func callTools(cs ...scripted.ToolCall) scripted.Reply { return scripted.Reply{ToolCalls: cs} }

func raw(name, args string) scripted.ToolCall {
	return scripted.ToolCall{Name: name, ArgumentsRaw: args}
}

func text(s string) scripted.Reply { return scripted.Reply{Text: s} }

// offered returns the names of the tools of each recorded request.
func offered(reqs []llm.Request) [][]string {
	out := make([][]string, len(reqs))
	for i, r := range reqs {
		out[i] = []string{}
		for _, s := range r.Tools {
			out[i] = append(out[i], s.Name)
		}
	}
	return out
}

// toolResults returns "<tool>: <text>" for each tool message of the history.
func toolResults(h []llm.Message) []string {
	var out []string
	for _, m := range h {
		if m.Role == llm.RoleTool {
			out = append(out, m.ToolName+": "+m.Text)
		}
	}
	return out
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

func (e *events) changes() []loop.ToolsChanged {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []loop.ToolsChanged
	for _, ev := range e.got {
		if tc, ok := ev.(loop.ToolsChanged); ok {
			out = append(out, tc)
		}
	}
	return out
}

// run runs a loop with the unfolding strategy over tools.
func run(t *testing.T, p *scripted.Provider, opts loop.Options, tools ...tool.Tool) *loop.Result {
	t.Helper()
	opts.Provider = p
	if opts.Strategies == nil {
		opts.Strategies = []loop.Strategy{progressive.New()}
	}
	if opts.LoopID == "" {
		opts.LoopID = "loop-1"
	}
	res, err := loop.Run(t.Context(), opts, loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Tools: tools})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// lines joins lines with newlines, for expected texts.
func lines(ls ...string) string { return strings.Join(ls, "\n") }
