package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func reviewMCPServer(t *testing.T) (*sdk.Server, string) {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "r", Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo"}}}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func mcpGroupConfig(url string, g config.Group) func(*config.Config) {
	return func(c *config.Config) {
		c.MCPServers = map[string]config.MCPServer{"srv": {URL: url}}
		if c.Groups == nil {
			c.Groups = map[string]config.Group{}
		}
		g.MCP.Server = "srv"
		c.Groups["files"] = g
	}
}

// A run whose MCP server hangs answers within its own timeout and the client's deadline.
func TestRunWithHangingMCPServerHonoursDeadlines(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stop) })
	e := newEnv(t, envOptions{configure: mcpGroupConfig(hang.URL, config.Group{MCP: &config.GroupMCP{}})})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", ToolGroups: []string{"files"},
		Limits: &toolpb.RunLimits{Timeout: durationpb.New(time.Second)}}, nil)
	t.Logf("run: %v after %s", err, time.Since(start))
	// The client gives up at 2s; the handler goes on: a second run shows the group still locked.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	start = time.Now()
	_, err = e.cl.RunAndWait(ctx2, &toolpb.RunRequest{Prompt: "hi", ToolGroups: []string{"files"},
		Limits: &toolpb.RunLimits{Timeout: durationpb.New(time.Second)}}, nil)
	t.Logf("second run (1s timeout): %v after %s", err, time.Since(start))
	if time.Since(start) > 5*time.Second {
		t.Errorf("a run with a 1s timeout took %s to answer", time.Since(start).Round(time.Millisecond))
	}
}

// A run refused because the orchestrator shut down opens no MCP session.
func TestRunAfterShutdownOpensNoSession(t *testing.T) {
	s, url := reviewMCPServer(t)
	e := newEnv(t, envOptions{configure: mcpGroupConfig(url, config.Group{MCP: &config.GroupMCP{}})})
	ctx := testContext(t)
	e.srv.Shutdown(ctx)
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", ToolGroups: []string{"files"}}, nil)
	t.Logf("run after shutdown: %v", err)
	// The refusal came after the server's handler for the run returned: whatever the run
	// asked of its MCP groups was done by then (a caller of a group waits, within its
	// context, for the connection it starts).
	n := 0
	for range s.Sessions() {
		n++
	}
	if n != 0 {
		t.Errorf("after shutdown the MCP server holds %d open session(s) from a refused run", n)
	}
}

// Listings know the MCP groups.
func TestListingsShowMCPGroups(t *testing.T) {
	_, url := reviewMCPServer(t)
	e := newEnv(t, envOptions{configure: mcpGroupConfig(url, config.Group{MCP: &config.GroupMCP{}, Description: "Files over MCP"})})
	ctx := testContext(t)
	gs, err := e.orch.ListToolGroups(ctx, &toolpb.ListToolGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, g := range gs.GetGroups() {
		roles = append(roles, g.GetGroup().GetRole())
	}
	if !strings.Contains(strings.Join(roles, ","), "files") {
		t.Errorf("ListToolGroups roles %v: no MCP group files", roles)
	}
	if _, err := e.orch.ListTools(ctx, &toolpb.ListToolsRequest{ToolGroups: []string{"files"}}); err != nil {
		t.Errorf("ListTools(files): %v", err)
	}
}

// A required MCP group whose filter keeps no tool refuses the run.
func TestRequiredMCPGroupWithoutTools(t *testing.T) {
	_, url := reviewMCPServer(t)
	e := newEnv(t, envOptions{configure: mcpGroupConfig(url, config.Group{MCP: &config.GroupMCP{Include: []string{"nothing_*"}}})})
	ctx := testContext(t)
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "files"}}}, nil)
	if err == nil {
		t.Errorf("a required group with no tools did not refuse the run")
	}
	// And as a plain group: no warning that it brought nothing.
	evs := []*toolpb.RunResponse{}
	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", ToolGroups: []string{"files"}}, func(ev *toolpb.RunResponse) { evs = append(evs, ev) })
	t.Logf("plain: err %v, %d events, second %v", err, len(evs), evs[1])
}

// A built-in role, or a role no run can request, configured as an MCP group is refused.
func TestMCPGroupOnBuiltinRole(t *testing.T) {
	cfg := config.Default()
	cfg.MCPServers = map[string]config.MCPServer{"srv": {URL: "http://127.0.0.1:1/mcp"}}
	cfg.Groups = map[string]config.Group{"blackboard": {MCP: &config.GroupMCP{Server: "srv"}}, "bad role!": {MCP: &config.GroupMCP{Server: "srv"}}}
	if err := cfg.Validate(); err == nil {
		t.Errorf("groups.blackboard.mcp and groups.\"bad role!\".mcp are accepted; the first is never used, the second never requestable")
	}
}
