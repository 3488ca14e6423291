package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// metaServer is a streamable-HTTP MCP server (go-sdk) whose echo tool records the _meta
// of every call.
type metaServer struct {
	url      string
	requests atomic.Int32
	mu       sync.Mutex
	metas    []map[string]any
	auths    []string // "<session id> <Authorization>" of each call
}

func startMetaServer(t *testing.T) *metaServer {
	t.Helper()
	m := &metaServer{}
	s := sdk.NewServer(&sdk.Implementation{Name: "meta", Version: "v1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes its text."}, func(_ context.Context, req *sdk.CallToolRequest, x in) (*sdk.CallToolResult, any, error) {
		got := map[string]any{}
		for k, v := range req.Params.Meta {
			if k != "progressToken" {
				got[k] = v
			}
		}
		m.mu.Lock()
		m.metas = append(m.metas, got)
		if req.Extra != nil {
			m.auths = append(m.auths, req.Session.ID()+" "+req.Extra.Header.Get("Authorization"))
		}
		m.mu.Unlock()
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + x.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "hidden", Description: "Filtered out by the group."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{}, nil, nil
	})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.url = srv.URL
	return m
}

func (m *metaServer) seen() []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]map[string]any(nil), m.metas...)
}

// TestMCPGroups: two groups over one streamable-HTTP MCP server, one pass-through and one
// allow-keys, and a group whose server is not there. Nothing connects before a run asks;
// each group's calls carry exactly the _meta its converter lets through, a configured
// secret never; a group that cannot connect is a warning, or fails the run when required.
func TestMCPGroups(t *testing.T) {
	srv := startMetaServer(t)
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"echo", `{"text":"hi"}`}}},
		{text: "done"},
	}}
	useModel(t, model)
	dead := deadURL(t)
	m := startMesh(t, "", `
provider: {name: openai}
context:
  secrets: [sessionSecret]
mcp_servers:
  meta: {url: `+srv.url+`}
  gone: {url: `+dead+`}
groups:
  open:
    description: Echo over MCP
    mcp: {server: meta, exclude: [hidden]}
  narrow:
    mcp: {server: meta, include: [echo]}
    context: {kind: allow-keys, keys: [tenantId]}
  broken:
    mcp: {server: gone}
`)
	time.Sleep(200 * time.Millisecond)
	if n := srv.requests.Load(); n != 0 {
		t.Fatalf("the MCP server got %d requests before any run asked for it", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx := map[string]string{"tenantId": "acme", "traceId": "t-1", "sessionSecret": "s3cr3t", "Authorization": "Bearer x"}
	for _, group := range []string{"open", "narrow"} {
		evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "echo hi", ToolGroups: []string{group, "broken"}, Context: runCtx}, nil)
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		if got := finalText(t, evs); got != "done" {
			t.Errorf("%s: final %q", group, got)
		}
		f := finished(evs, 1)
		if len(f) != 1 || f[0].GetContent() != "echo: hi" {
			t.Errorf("%s: finished %v", group, f)
		}
		if s := evs[0].GetStarted(); strings.Join(s.GetTools(), ",") != "echo" {
			t.Errorf("%s: offered %v", group, s.GetTools())
		}
		if w := evs[1].GetWarning(); w == nil || w.GetField() != "tool_groups[1]" || !strings.Contains(w.GetMessage(), "Tool group with role 'broken' is not available: mcp server \"gone\": cannot connect") {
			t.Errorf("%s: second event %v, want the warning for broken", group, evs[1])
		}
	}
	metas := srv.seen()
	want := []map[string]any{
		{"tenantId": "acme", "traceId": "t-1"}, // pass-through: no secret, no credential
		{"tenantId": "acme"},                   // allow-keys
	}
	if len(metas) != 2 {
		t.Fatalf("the server saw %d calls: %v", len(metas), metas)
	}
	for i, w := range want {
		// The trace context travels beside the context entries.
		if tp, _ := metas[i]["traceparent"].(string); !strings.HasPrefix(tp, "00-") {
			t.Errorf("call %d: no traceparent in _meta %v", i+1, metas[i])
		}
		delete(metas[i], "traceparent")
		delete(metas[i], "tracestate")
		if len(metas[i]) != len(w) {
			t.Errorf("call %d: _meta %v, want %v", i+1, metas[i], w)
		}
		for k, v := range w {
			if metas[i][k] != v {
				t.Errorf("call %d: _meta[%s] = %v, want %v", i+1, k, metas[i][k], v)
			}
		}
	}

	_, err := m.c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "broken"}}}, nil)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "Required tool group with role='broken' could not be resolved: mcp server \"gone\": cannot connect") {
		t.Errorf("required broken group: %v", err)
	}
}

// deadURL is an http URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

// TestToolmeshAsMCPServer: an MCP client (go-sdk) lists the mesh's tools on the
// orchestrator's MCP endpoint, opens the math facade and hears tools/list_changed, calls a
// worker tool and an MCP-group tool, and passes a context value in _meta (and in an
// allow-listed header) that the worker sees.
func TestToolmeshAsMCPServer(t *testing.T) {
	srv := startMetaServer(t)
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", `
mcp_serve:
  listen: `+addr+`
  context_headers: [X-Tenant-Id]
mcp_servers:
  meta: {url: `+srv.url+`}
groups:
  remote:
    mcp: {server: meta, include: [echo]}
`)
	m.startWorker("math-1", "math")
	m.startWorker("echo-1", "echo_a")
	m.startWorker("shop-1", "shop")
	m.waitWorkers("math-1", "echo-1", "shop-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	changed := make(chan struct{}, 4)
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	})
	hc := &http.Client{Transport: headerRT{"X-Tenant-Id": "from-header"}}
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // facades unfold in a session
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	names := func() []string {
		t.Helper()
		res, err := session.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range res.Tools {
			out = append(out, x.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := strings.Join(names(), ","); got != "catalog,echo,math,open_cart,show_context_a" {
		t.Fatalf("tools %s", got)
	}
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "math", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.HasPrefix(mcpText(res), "Tools now available: add, subtract, multiply, divide") {
		t.Fatalf("math facade: %v %v", mcpText(res), err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no tools/list_changed after opening the facade")
	}
	if got := names(); slices.Contains(got, "math") || !slices.Contains(got, "add") {
		t.Errorf("tools after unfolding %v", got)
	}
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || res.IsError || mcpText(res) != "5" {
		t.Errorf("add: %q %v", mcpText(res), err)
	}
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "via mcp"}})
	if err != nil || mcpText(res) != "echo: via mcp" {
		t.Errorf("echo: %q %v", mcpText(res), err)
	}
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_a", Arguments: map[string]any{}, Meta: sdk.Meta{"tenantId": "acme"}})
	if err != nil || !strings.Contains(mcpText(res), `"tenantId":"acme"`) || !strings.Contains(mcpText(res), `"x-tenant-id":"from-header"`) {
		t.Errorf("show_context_a: %q %v", mcpText(res), err)
	}
	checkCartOverMCP(ctx, t, session)
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: map[string]any{"a": "two"}})
	if err != nil || !res.IsError || !strings.Contains(mcpText(res), "invalid arguments for tool 'add'") {
		t.Errorf("bad arguments: %q %v", mcpText(res), err)
	}
}

// mcpText is the text content of res, one part a line.
func mcpText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// checkCartOverMCP: through the MCP endpoint, open_cart runs its selector on the worker
// and creates the cart's tools for the store; they keep the cart for the session.
func checkCartOverMCP(ctx context.Context, t *testing.T, session *sdk.ClientSession) {
	t.Helper()
	// A selectable facade: its selector runs on the worker, and the cart tools it selects
	// keep their state for this session.
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "open_cart", Arguments: map[string]any{"store": "postgres://shop/main"}})
	if err != nil || res.IsError || !strings.HasPrefix(mcpText(res), "Tools now available: cart_add") {
		t.Fatalf("open_cart: %q %v", mcpText(res), err)
	}
	// The cart's tools were created for the store: their descriptions say which.
	listed, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	desc := map[string]string{}
	for _, tl := range listed.Tools {
		desc[tl.Name] = tl.Description
	}
	if got := desc["cart_add"]; got != "Add a quantity of a product to the cart at postgres://shop/main" {
		t.Errorf("cart_add is described %q", got)
	}
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "cart_add", Arguments: map[string]any{"sku": "A-100", "quantity": 2}})
	if err != nil || res.IsError {
		t.Errorf("cart_add: %q %v", mcpText(res), err)
	}
	res, err = session.CallTool(ctx, &sdk.CallToolParams{Name: "cart_view", Arguments: map[string]any{}})
	if err != nil || mcpText(res) != `{"store":"postgres://shop/main","items":[{"sku":"A-100","quantity":2}]}` {
		t.Errorf("cart_view: %q %v", mcpText(res), err)
	}
}

// headerRT adds headers to every request.
type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPSessionPerToken: two runs with different bearer tokens in their context reach an
// MCP server that takes Authorization from the context on two sessions, each call carrying
// only its own run's token.
func TestMCPSessionPerToken(t *testing.T) {
	srv := startMetaServer(t)
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"echo", `{"text":"hi"}`}}},
		{text: "done"},
	}}
	useModel(t, model)
	m := startMesh(t, "", `
provider: {name: openai}
mcp_servers:
  meta: {url: `+srv.url+`, context_headers: [Authorization]}
groups:
  auth:
    mcp: {server: meta}
    context: {kind: allow-keys, keys: [Authorization]}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tok := range []string{"Bearer alice", "Bearer bob"} {
		if _, err := m.run(ctx, &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"auth"}, Context: map[string]string{"Authorization": tok}}, nil); err != nil {
			m.dump()
			t.Fatal(err)
		}
	}
	srv.mu.Lock()
	auths := append([]string(nil), srv.auths...)
	srv.mu.Unlock()
	if len(auths) != 2 {
		t.Fatalf("calls %v", auths)
	}
	a, b := strings.SplitN(auths[0], " ", 2), strings.SplitN(auths[1], " ", 2)
	if a[1] != "Bearer alice" || b[1] != "Bearer bob" || a[0] == b[0] {
		t.Errorf("calls %q: want alice and bob on two sessions, each with its own token", auths)
	}
	for _, meta := range srv.seen() {
		if _, ok := meta["Authorization"]; ok {
			t.Errorf("the token travelled in _meta too: %v", meta)
		}
	}
}

// TestMCPToolsRedescribedAndFiltered: through the orchestrator process, the config
// re-describes an MCP server's tool (tools.echo.note) and a worker's
// (tools.read_handbook.description), and drops an MCP tool with the CEL exclude_when;
// the model reads the new descriptions, and the excluded tool is never offered.
func TestMCPToolsRedescribedAndFiltered(t *testing.T) {
	srv := startMetaServer(t)
	const prompt = "Echo."
	const named = "Echo, with one tool."
	model := &promptModel{scripts: map[string]*turnModel{prompt: {turns: []modelTurn{
		{calls: [][2]string{{"echo", `{"text":"hi"}`}}},
		{text: "done"},
	}}, named: {turns: []modelTurn{
		{calls: [][2]string{{"echo", `{"text":"again"}`}}},
		{text: "done"},
	}}}}
	useModel(t, model)
	m := startMesh(t, "", `
provider: {name: openai}
mcp_servers:
  meta: {url: `+srv.url+`}
groups:
  meta:
    mcp: {server: meta, exclude_when: 'description.contains("Filtered")'}
tools:
  echo: {note: Only echo what the user wrote}
  read_handbook: {description: The handbook of the platform team}
`)
	m.startWorker("handbook-1", "handbook")
	m.waitWorkers("handbook-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"meta", "handbook"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if f := finished(evs, 0); len(f) != 1 || f[0].GetContent() != "echo: hi" {
		t.Errorf("calls %v", f)
	}
	reqs := model.requests(prompt)
	if len(reqs) != 2 {
		t.Fatalf("the model got %d requests, want 2", len(reqs))
	}
	got := map[string]string{}
	for _, o := range reqs[0].tools {
		got[o.Name] = o.Description
	}
	want := map[string]string{
		"echo":                            "Echoes its text.. Only echo what the user wrote",
		examplegroups.HandbookTool:        "The handbook of the platform team",
		examplegroups.HandbookSectionTool: examplegroups.HandbookSectionDesc,
		examplegroups.HandbookPosterTool:  examplegroups.HandbookPosterDesc,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the tools the model read (-want +got):\n%s", diff)
	}
	// A run may name one MCP tool (beside a worker's) in tools: it is offered those alone.
	evs, err = m.run(ctx, &toolpb.RunRequest{Prompt: named, Tools: []string{"echo", examplegroups.HandbookSectionTool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := finished(evs, 0); len(f) != 1 || f[0].GetContent() != "echo: again" {
		t.Errorf("calls of the run naming its tools %v", f)
	}
	if r := model.requests(named); len(r) == 0 || len(r[0].tools) != 2 || r[0].tools[0].Name != "echo" || r[0].tools[1].Name != examplegroups.HandbookSectionTool {
		t.Errorf("the run naming echo and handbook_section offered %v", r)
	}
	// The worker's typed tool registered its enum, which the model reads.
	for _, o := range reqs[0].tools {
		if o.Name == examplegroups.HandbookSectionTool && !strings.Contains(o.Parameters, `"enum":["Releases","Reviews","On call"]`) {
			t.Errorf("%s's parameters %s, want the titles' enum", o.Name, o.Parameters)
		}
	}
}
