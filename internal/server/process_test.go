package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestDefaultGroupsAndStreamedText: the config's default groups join every run (a built-in
// group and a worker group; one nobody serves is left out), the run's own tools first; the
// model's text streams as deltas that add up to the answer.
func TestDefaultGroupsAndStreamedText(t *testing.T) {
	script := scripted.Script{Name: "talk", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "communicate", ArgumentsRaw: `{"message":"Working on it."}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "All done, the message was sent."}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Loop.DefaultToolGroups = []string{"communication", "text", "nobody_serves_this"}
	}})
	e.startWorker("w1", examplegroups.TextGroup())
	var started []string
	var deltas strings.Builder
	var messages []string
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", StreamText: true}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started = s.GetTools()
		}
		if d := ev.GetTextDelta(); d != nil {
			deltas.WriteString(d.GetText())
		}
		if m := ev.GetMessageToUser(); m != nil {
			messages = append(messages, m.GetText())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(started, ",") != "communicate,lowercase,progress,reverse,uppercase,word_count" {
		t.Errorf("started with %v", started)
	}
	if len(messages) != 1 || messages[0] != "Working on it." {
		t.Errorf("messages %v", messages)
	}
	if deltas.String() != final.GetText() || final.GetText() != "All done, the message was sent." {
		t.Errorf("deltas %q, final %q", deltas.String(), final.GetText())
	}
}

// TestConfigGroups: groups of the config's own take tools from other groups by
// "<group>/<tool glob>", drop excluded ones, and are offered flat, as a facade, or as a
// reference whose usage notes join the system prompt; a group may narrow its own role.
func TestConfigGroups(t *testing.T) {
	script := scripted.Script{Name: "answer", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Groups = map[string]config.Group{
			"calc":  {Include: []string{"math/add", "math/mul*", "text/*"}, Exclude: []string{"text/reverse"}},
			"boxed": {Include: []string{"math/add"}, Offer: "facade", Description: "Adding"},
			"ref":   {Include: []string{"text/word_count"}, Offer: "reference", Description: "Counting", UsageNotes: "Count words with word_count."},
			"text":  {Include: []string{"text/uppercase"}}, // narrows the workers' own group
			"ghost": {Include: []string{"weather/*"}},
			"split": {Include: []string{"math/*"}, Facades: []config.SubFacade{
				{Name: "arith", Description: "Arithmetic", Tools: []string{"add", "subtract"}},
				{Name: "rounding", Description: "Rounding", Matching: []string{"^(floor|ceiling|round)$"}},
			}},
		}
	}})
	e.startWorker("w1", flatMath(), examplegroups.TextGroup())
	ctx := testContext(t)
	started := func(req *toolpb.RunRequest) ([]string, *toolpb.RunResponse) {
		t.Helper()
		var tools []string
		var warning *toolpb.RunResponse
		if _, err := e.cl.RunAndWait(ctx, req, func(ev *toolpb.RunResponse) {
			if s := ev.GetStarted(); s != nil {
				tools = s.GetTools()
			}
			if ev.GetWarning() != nil {
				warning = ev
			}
		}); err != nil {
			t.Fatal(err)
		}
		return tools, warning
	}
	for _, tc := range []struct {
		group string
		want  string
	}{
		{"calc", "add,lowercase,multiply,uppercase,word_count"},
		{"boxed", "boxed"},
		{"split", "arith,divide,max,mean,min,multiply,rounding"},
		{"ref", "word_count"},
		{"text", "uppercase"},
	} {
		if got, _ := started(&toolpb.RunRequest{Prompt: "p", ToolGroups: []string{tc.group}}); strings.Join(got, ",") != tc.want {
			t.Errorf("group %s offers %v, want %s", tc.group, got, tc.want)
		}
	}
	reqs := e.model.Requests()
	if sys := reqs[len(reqs)-2].System; sys != "Tools of 'ref' (Counting):\nCount words with word_count." {
		t.Errorf("system prompt of the reference run %q", sys)
	}
	if _, w := started(&toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"ghost"}}); w == nil || !strings.Contains(w.GetWarning().GetMessage(), "none of the groups it includes is served (weather)") {
		t.Errorf("ghost group warning %v", w)
	}
	groups, err := e.cl.ListToolGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, g := range groups {
		listed[g.GetGroup().GetRole()] = g.GetSource() + " | " + strings.Join(g.GetTools(), ",") + " | " + strings.Join(g.GetWorkerIds(), ",")
	}
	for role, want := range map[string]string{
		"calc":  "config: math/add, math/mul*, text/* (except text/reverse) | add,lowercase,multiply,uppercase,word_count | ",
		"text":  "config: text/uppercase | uppercase | ",
		"math":  "workers | add,ceiling,divide,floor,max,mean,min,multiply,round,subtract | w1",
		"ghost": "config: weather/* |  | ",
	} {
		if listed[role] != want {
			t.Errorf("ListToolGroups %s = %q, want %q", role, listed[role], want)
		}
	}
}

// TestMCPToolsChangeMidRun: an MCP server adds a tool while a run goes on
// (tools/list_changed); after the call, the loop offers the new tool (a tools_changed
// event says so) and the model calls it.
func TestMCPToolsChangeMidRun(t *testing.T) {
	srv := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "growing", Version: "v1"}, nil)
	type in struct{}
	sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "grow", Description: "Adds the tool fresh."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
		sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "fresh", Description: "A new tool."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
			return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{&sdkmcp.TextContent{Text: "fresh answer"}}}, nil, nil
		})
		// The notification reaches the client before the result. It travels on another
		// stream than the result, and nothing tells when the orchestrator's MCP client
		// took it (internal/mcp's tools/list_changed handler has no hook): a wall-clock wait.
		time.Sleep(100 * time.Millisecond)
		return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{&sdkmcp.TextContent{Text: "grown"}}}, nil, nil
	})
	hs := httptest.NewServer(sdkmcp.NewStreamableHTTPHandler(func(*http.Request) *sdkmcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	script := scripted.Script{Name: "grow", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "grow", ArgumentsRaw: `{}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "fresh", ArgumentsRaw: `{}`}}}},
		{Reply: scripted.Reply{Text: "{{ result \"fresh\" }}"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.MCPServers = map[string]config.MCPServer{"growing": {URL: hs.URL}}
		c.Groups = map[string]config.Group{"grow": {MCP: &config.GroupMCP{Server: "growing"}}}
	}})
	var changes []*toolpb.ToolsChanged
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "grow", ToolGroups: []string{"grow"}}, func(ev *toolpb.RunResponse) {
		if c := ev.GetToolsChanged(); c != nil {
			changes = append(changes, c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != "fresh answer" {
		t.Errorf("final %q", final.GetText())
	}
	if len(changes) != 1 || strings.Join(changes[0].GetAdded(), ",") != "fresh" {
		t.Errorf("tools_changed %v", changes)
	}
}

// growingServer is an MCP server with the tools plant and seed; calling plant adds the
// tool fresh (tools/list_changed).
func growingServer(t *testing.T) string {
	t.Helper()
	srv := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "growing", Version: "v1"}, nil)
	type in struct{}
	text := func(s string) (*sdkmcp.CallToolResult, any, error) {
		return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{&sdkmcp.TextContent{Text: s}}}, nil, nil
	}
	sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "seed", Description: "A seed."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
		return text("seeded")
	})
	sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "plant", Description: "Adds the tool fresh."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
		sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "fresh", Description: "A new tool."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
			return text("fresh answer")
		})
		// The notification reaches the client before the result. It travels on another
		// stream than the result, and nothing tells when the orchestrator's MCP client
		// took it (internal/mcp's tools/list_changed handler has no hook): a wall-clock wait.
		time.Sleep(100 * time.Millisecond)
		return text("planted")
	})
	hs := httptest.NewServer(sdkmcp.NewStreamableHTTPHandler(func(*http.Request) *sdkmcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestMCPToolsChangeInFacades: an MCP group offered as a facade follows tools/list_changed
// too. Opened, the facade's children gain the new tool; not yet opened, the facade is
// replaced by one that holds it.
func TestMCPToolsChangeInFacades(t *testing.T) {
	calls := func(names ...string) []scripted.Rule {
		var rules []scripted.Rule
		for i, n := range names {
			rules = append(rules, scripted.Rule{When: scripted.When{Turn: i + 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: n, ArgumentsRaw: `{}`}}}})
		}
		return append(rules, scripted.Rule{Reply: scripted.Reply{Text: "{{ result \"fresh\" }}"}})
	}
	for _, tc := range []struct {
		name    string
		groups  map[string]config.Group
		request []string
		script  []string
		changes []string // added/removed of each tools_changed event, in order
	}{{
		name:    "opened",
		groups:  map[string]config.Group{"garden": {MCP: &config.GroupMCP{Server: "growing"}, Offer: "facade"}},
		request: []string{"garden"},
		script:  []string{"garden", "plant", "fresh"},
		changes: []string{"+garden,garden_context,plant,seed -garden", "+fresh -"},
	}, {
		name: "not opened",
		groups: map[string]config.Group{
			"trigger": {MCP: &config.GroupMCP{Server: "growing", Include: []string{"plant"}}},
			"garden":  {MCP: &config.GroupMCP{Server: "growing", Include: []string{"seed", "fresh"}}, Offer: "facade"},
		},
		request: []string{"trigger", "garden"},
		script:  []string{"plant", "garden", "fresh"},
		changes: []string{"+garden -garden", "+fresh,garden,garden_context,seed -garden"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			url := growingServer(t)
			e := newEnv(t, envOptions{script: scripted.Script{Name: "grow", Rules: calls(tc.script...)}, configure: func(c *config.Config) {
				c.MCPServers = map[string]config.MCPServer{"growing": {URL: url}}
				c.Groups = tc.groups
			}})
			var changes []string
			final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "grow", ToolGroups: tc.request}, func(ev *toolpb.RunResponse) {
				if c := ev.GetToolsChanged(); c != nil {
					added, removed := slices.Sorted(slices.Values(c.GetAdded())), slices.Sorted(slices.Values(c.GetRemoved()))
					changes = append(changes, "+"+strings.Join(added, ",")+" -"+strings.Join(removed, ","))
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if final.GetText() != "fresh answer" {
				t.Errorf("final %q", final.GetText())
			}
			if !slices.Equal(changes, tc.changes) {
				t.Errorf("tools_changed %q, want %q", changes, tc.changes)
			}
		})
	}
}

// TestConfiguredSinksAndReplan: a group's artifact rule (type, CEL predicate, the
// blackboard and a program's own sink) takes the matching elements of a worker's list
// artifact; a tool configured to replan ends its run REPLAN_REQUESTED with the configured
// reason, after the object it bound joined the blackboard.
func TestConfiguredSinksAndReplan(t *testing.T) {
	archive := &decorators.ListSink{}
	script := scripted.Script{Name: "crm", Rules: []scripted.Rule{
		{When: scripted.When{User: "find", Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "find_customers", ArgumentsRaw: `{"query":""}`}}}},
		{When: scripted.When{User: "bind", Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "bind_customer", ArgumentsRaw: `{"id":2}`}}}},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script, sinks: map[string]decorators.Sink{"archive": archive}, configure: func(c *config.Config) {
		c.Groups = map[string]config.Group{"crm": {Artifacts: []config.ArtifactSink{{
			ArtifactFilter: config.ArtifactFilter{Type: "Customer", When: `value.city == "London"`}, Sinks: []string{"blackboard", "archive"},
		}}}}
		c.Tools = map[string]config.Tool{"bind_customer": {Replan: &config.Replan{Reason: "a customer was chosen"}}}
	}})
	e.startWorker("w1", examplegroups.CRMGroup())
	ctx := testContext(t)
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "find", Prompt: "find", ToolGroups: []string{"crm"}}, nil); err != nil {
		t.Fatal(err)
	}
	var archived []string
	for _, it := range archive.Items() {
		archived = append(archived, string(it.JSON))
	}
	want := `{"id":1,"name":"Ada Lovelace","city":"London","status":"active"},{"id":3,"name":"Alan Turing","city":"London","status":"blocked"}`
	if strings.Join(archived, ",") != want {
		t.Errorf("archive sink got %v", archived)
	}
	r, err := e.cl.GetRun(ctx, "find")
	if err != nil || len(r.GetBlackboard()) != 2 {
		t.Errorf("blackboard of the find run: %v, %v", r.GetBlackboard(), err)
	}

	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "bind", Prompt: "bind", ToolGroups: []string{"crm"}}, nil)
	var re *client.ReplanError
	if !errors.As(err, &re) || re.Replan.GetReason() != "a customer was chosen" || re.Replan.GetTool() != "bind_customer" {
		t.Fatalf("bind run: %v, want a replan with the configured reason", err)
	}
	r, err = e.cl.GetRun(ctx, "bind")
	if err != nil || r.GetState() != toolpb.RunState_RUN_STATE_REPLAN_REQUESTED || len(r.GetBlackboard()) != 1 || r.GetBlackboard()[0].GetName() != "customer" {
		t.Errorf("bind run: %v, %v", r, err)
	}
}
