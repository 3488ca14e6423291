package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

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
