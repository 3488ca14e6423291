package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestToolsRedescribedInConfig: the config re-describes tools the mesh does not own — a
// worker's and an MCP server's — with tools.<name>.description and .note, and the model
// reads the new text ("<description>. <note>"); a tool the config does not name keeps
// its own.
func TestToolsRedescribedInConfig(t *testing.T) {
	srv := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "search", Version: "v1"}, nil)
	type in struct{}
	sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: "web_search", Description: "Searches the web."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
		return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{&sdkmcp.TextContent{Text: "found"}}}, nil, nil
	})
	hs := httptest.NewServer(sdkmcp.NewStreamableHTTPHandler(func(*http.Request) *sdkmcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	script := scripted.Script{Name: "answer", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.MCPServers = map[string]config.MCPServer{"search": {URL: hs.URL}}
		c.Groups = map[string]config.Group{"search": {MCP: &config.GroupMCP{Server: "search"}}}
		c.Tools = map[string]config.Tool{
			"web_search": {Note: "Only use it if the question is about current events"},
			"uppercase":  {Description: "Shouts the text", Note: "Use it sparingly"},
		}
	}})
	e.startWorker("w1", examplegroups.TextGroup())
	if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"search", "text"}}, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, spec := range e.model.Requests()[0].Tools {
		got[spec.Name] = spec.Description
	}
	for name, want := range map[string]string{
		"web_search": "Searches the web.. Only use it if the question is about current events",
		"uppercase":  "Shouts the text. Use it sparingly",
		"lowercase":  examplegroupsDescription(t, "lowercase"),
	} {
		if got[name] != want {
			t.Errorf("%s reads %q, want %q", name, got[name], want)
		}
	}
}

// examplegroupsDescription is the description the text group's worker gives a tool.
func examplegroupsDescription(t *testing.T, name string) string {
	t.Helper()
	for _, tl := range examplegroups.TextGroup().Tools {
		if tl.Definition().Name == name {
			return tl.Definition().Description
		}
	}
	t.Fatalf("the text group has no tool %s", name)
	return ""
}

// TestNamingSingleTools: a run's tools may name one MCP server's tool, one facade a
// group of the config's own makes, and one built-in tool — not only a worker's; the run
// is offered exactly those. A name nothing serves is NOT_FOUND, naming the field.
func TestNamingSingleTools(t *testing.T) {
	srv := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "search", Version: "v1"}, nil)
	type in struct{}
	for _, name := range []string{"web_search", "image_search"} {
		sdkmcp.AddTool(srv, &sdkmcp.Tool{Name: name, Description: "Searches."}, func(context.Context, *sdkmcp.CallToolRequest, in) (*sdkmcp.CallToolResult, any, error) {
			return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{&sdkmcp.TextContent{Text: "found"}}}, nil, nil
		})
	}
	hs := httptest.NewServer(sdkmcp.NewStreamableHTTPHandler(func(*http.Request) *sdkmcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	script := scripted.Script{Name: "search", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "web_search", ArgumentsRaw: `{}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "ok"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.MCPServers = map[string]config.MCPServer{"search": {URL: hs.URL}}
		c.Groups = map[string]config.Group{
			"search": {MCP: &config.GroupMCP{Server: "search"}},
			"boxed":  {Include: []string{"text/*"}, Offer: "facade", Description: "Text tools."},
		}
	}})
	e.startWorker("w1", examplegroups.TextGroup())
	var started []string
	var content string
	if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"web_search", "boxed", "progress"}}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started = s.GetTools()
		}
		if f := ev.GetToolCallFinished(); f != nil {
			content = f.GetContent()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(started, ",") != "boxed,progress,web_search" {
		t.Errorf("started with %v, want boxed, progress and web_search", started)
	}
	if content != "found" {
		t.Errorf("web_search answered %q", content)
	}
	_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"nowhere"}}, nil)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `tools[0]: no worker, MCP server or tool group serves tool "nowhere"`) {
		t.Errorf("an unknown tool: %v", err)
	}
}

// TestConfigGroupsDescribeThemselves: a group of the config's own and an MCP group
// declare a provider, a version and permissions, as a worker's groups do, and
// ListToolGroups shows them; an MCP group's provider defaults to its server.
func TestConfigGroupsDescribeThemselves(t *testing.T) {
	srv := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "search", Version: "v1"}, nil)
	hs := httptest.NewServer(sdkmcp.NewStreamableHTTPHandler(func(*http.Request) *sdkmcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	e := newEnv(t, envOptions{configure: func(c *config.Config) {
		c.MCPServers = map[string]config.MCPServer{"search": {URL: hs.URL}}
		c.Groups = map[string]config.Group{
			"search": {MCP: &config.GroupMCP{Server: "search"}, Permissions: []string{"internet_access"}},
			"calc":   {Include: []string{"math/add"}, Provider: "platform team", Version: "2.1.0", Permissions: []string{"host_access", "internet_access"}},
		}
	}})
	groups, err := e.cl.ListToolGroups(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*toolpb.ToolGroupInfo{}
	for _, g := range groups {
		got[g.GetGroup().GetRole()] = g.GetGroup()
	}
	if g := got["calc"]; g.GetProvider() != "platform team" || g.GetVersion() != "2.1.0" ||
		!slices.Equal(g.GetPermissions(), []toolpb.Permission{toolpb.Permission_PERMISSION_HOST_ACCESS, toolpb.Permission_PERMISSION_INTERNET_ACCESS}) {
		t.Errorf("calc is listed as %v", g)
	}
	if g := got["search"]; g.GetProvider() != "MCP server search" || !slices.Equal(g.GetPermissions(), []toolpb.Permission{toolpb.Permission_PERMISSION_INTERNET_ACCESS}) {
		t.Errorf("search is listed as %v", g)
	}
}

// TestRunRenamesAndFiltersTools: a run renames tools as its model sees them
// (tool_names) and leaves some out (exclude_tools), for the tools it is offered at the
// start and for those a facade opens later; a call of the new name reaches the tool.
func TestRunRenamesAndFiltersTools(t *testing.T) {
	script := scripted.Script{Name: "rename", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "shout", ArgumentsRaw: `{"text":"hi"}`}, {Name: "math"}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "plus", ArgumentsRaw: `{"a":2,"b":3}`}}}},
		{When: scripted.When{Turn: 3}, Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.TextGroup(), examplegroups.Math())
	contents := map[string]string{}
	if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"text", "math"},
		ToolNames: map[string]string{"uppercase": "shout", "add": "plus"}, ExcludeTools: []string{"reverse", "word_*", "divide"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil {
			contents[f.GetTool()] = f.GetContent()
		}
	}); err != nil {
		t.Fatal(err)
	}
	names := func(turn int) string {
		var out []string
		for _, spec := range e.model.Requests()[turn].Tools {
			out = append(out, spec.Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	if got := names(0); got != "lowercase,math,shout" {
		t.Errorf("the first request offered %s", got)
	}
	if got := names(1); strings.Contains(got, "divide") || !strings.Contains(got, "plus") || strings.Contains(got, ",add,") {
		t.Errorf("after opening math the request offered %s", got)
	}
	if contents["shout"] != "HI" || contents["plus"] != "5" {
		t.Errorf("the renamed tools answered %v", contents)
	}
}
