package mcp_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// versionServer serves, over streamable HTTP on a real socket, a go-sdk server whose
// tools say which revision their call came in and ask questions: "ask" elicits on the
// session (what a 2025-11-25 server does) and "confirm" answers input_required until
// it has its answer (what a 2026-07-28 server does; the go-sdk elicits for it on a
// 2025-11-25 session). Stateless serves 2026-07-28 requests; a stateful server speaks
// 2025-11-25.
func versionServer(t *testing.T, stateless bool) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "versions", Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "version", Description: "Says the revision of its call."}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: req.Session.InitializeParams().ProtocolVersion}}}, nil, nil
	})
	nameSchema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"name": {Type: "string"}}, Required: []string{"name"}}
	sdk.AddTool(s, &sdk.Tool{Name: "ask", Description: "Asks for a name on the session."}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &sdk.ElicitParams{Message: "Whose account?", RequestedSchema: nameSchema})
		if err != nil {
			return nil, nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s %v", res.Action, res.Content["name"])}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "confirm", Description: "Asks for a name with input_required."}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if r, ok := req.Params.InputResponses["who"].(*sdk.ElicitResult); ok {
			if req.Params.RequestState != "asked" {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "lost the request state"}}}, nil, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s %v", r.Action, r.Content["name"])}}}, nil, nil
		}
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"who": &sdk.ElicitParams{Message: "Whose account?", RequestedSchema: nameSchema}},
			RequestState: "asked"}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: stateless}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestGroupSpeaksBothRevisions: an MCP group talks 2026-07-28 to a server that serves it
// (stateless) and 2025-11-25 to one that does not; a pin holds it to one revision, and a
// server that does not speak the pinned revision is refused with the reason.
func TestGroupSpeaksBothRevisions(t *testing.T) {
	stateless, stateful := versionServer(t, true), versionServer(t, false)
	for _, tc := range []struct {
		name, url, pin, want, refused string
	}{
		{"newest with a stateless server", stateless, "", mcp.Protocol20260728, ""},
		{"newest with a stateful server", stateful, "", mcp.Protocol20251125, ""},
		{"pinned 2025-11-25 with a stateless server", stateless, mcp.Protocol20251125, mcp.Protocol20251125, ""},
		{"pinned 2026-07-28 with a stateless server", stateless, mcp.Protocol20260728, mcp.Protocol20260728, ""},
		{"pinned 2026-07-28 with a stateful server", stateful, mcp.Protocol20260728, "", "it speaks MCP 2025-11-25, not the pinned 2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "versions", URL: tc.url, ProtocolVersion: tc.pin}})
			tl, err := g.RequiredToolByName(testCtx(t), "version")
			if tc.refused != "" {
				if _, err := g.Tools(testCtx(t)); err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Tools() error = %v, want one saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := call(t, testCtx(t), tl, "{}"); got.IsError() || got.Content != tc.want {
				t.Errorf("version() = %+v, want %q", got, tc.want)
			}
		})
	}
	if _, err := mcp.New(mcp.Options{Server: mcp.Server{Name: "x", URL: stateless, ProtocolVersion: "2024-01-01"}}); err == nil {
		t.Error("New accepted protocol version 2024-01-01")
	}
}

// TestEndpointServesBothRevisions: go-sdk clients of either revision use the endpoint; a
// 2026-07-28 client's requests are stateless, and it is offered the facades unfolded;
// an endpoint pinned to 2025-11-25 serves a 2026-07-28 client in 2025-11-25.
func TestEndpointServesBothRevisions(t *testing.T) {
	echo := tool.New("echo", "Echoes.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("echoed"), nil })
	sum := tool.New("sum", "Sums.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("3"), nil })
	catalog := func(context.Context) []tool.Tool {
		return []tool.Tool{echo, tool.Of("math", "Math tools.", []tool.Tool{sum})}
	}
	for _, tc := range []struct {
		name, client string
		served       []string
		want         string
		tools        []string
	}{
		{"2025-11-25 client", mcp.Protocol20251125, nil, mcp.Protocol20251125, []string{"echo", "math"}},
		{"2026-07-28 client", mcp.Protocol20260728, nil, mcp.Protocol20260728, []string{"echo", "sum"}},
		{"2026-07-28 client, endpoint pinned to 2025-11-25", mcp.Protocol20260728, []string{mcp.Protocol20251125}, mcp.Protocol20251125, []string{"echo", "math"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(mcp.NewHandler(mcp.ServeOptions{Catalog: catalog, ProtocolVersions: tc.served}))
			t.Cleanup(srv.Close)
			ctx := testCtx(t)
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx,
				&sdk.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			if got := cs.InitializeResult().ProtocolVersion; got != tc.want {
				t.Errorf("negotiated %s, want %s", got, tc.want)
			}
			var names []string
			for x, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, x.Name)
			}
			if slices.Sort(names); !slices.Equal(names, tc.tools) {
				t.Errorf("tools = %v, want %v", names, tc.tools)
			}
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{}})
			if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "echoed" {
				t.Errorf("echo = %+v, %v", res, err)
			}
		})
	}
}

// TestQuestionsReachTheEndpointsClient: a tool of an MCP group asks a question while it
// runs, in either revision (elicitation on a 2025-11-25 session, input_required in
// 2026-07-28); called through the endpoint by a client that declared elicitation, the
// question reaches that client, whose answer reaches the tool. A client that declared
// none cannot answer: the tool is told the question was cancelled, and the caller reads
// why.
func TestQuestionsReachTheEndpointsClient(t *testing.T) {
	legacy := newGroup(t, mcp.Options{Server: mcp.Server{Name: "legacy", URL: versionServer(t, false)}})
	stateless := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stateless", URL: versionServer(t, true)}})
	for _, tc := range []struct {
		name   string
		g      *mcp.Group
		tool   string
		answer *sdk.ElicitResult // nil: the client declares no elicitation
		want   string
		client string // the client's revision; "" is 2025-11-25
	}{
		{"2026-07-28 client, elicitation", legacy, "ask", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"name": "erin"}}, "accept erin", mcp.Protocol20260728},
		{"2026-07-28 client, input_required", stateless, "confirm", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"name": "finn"}}, "accept finn", mcp.Protocol20260728},
		{"elicitation, accepted", legacy, "ask", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"name": "carol"}}, "accept carol", ""},
		{"input_required, accepted", stateless, "confirm", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"name": "dave"}}, "accept dave", ""},
		{"input_required, declined", stateless, "confirm", &sdk.ElicitResult{Action: "decline"},
			"The user declined to answer the question tool 'confirm' asked (\"Whose account?\"), and the tool was told so.\nThe tool answered: decline <nil>", ""},
		{"elicitation, cancelled", legacy, "ask", &sdk.ElicitResult{Action: "cancel"},
			"The user cancelled the question tool 'ask' asked (\"Whose account?\"), and the tool was told so.\nThe tool answered: cancel <nil>", ""},
		{"no elicitation declared", legacy, "ask", nil,
			"Nobody could answer the question tool 'ask' asked (\"Whose account?\"), so the tool was told it was cancelled.\nThe tool answered: cancel <nil>", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			tl, err := tc.g.RequiredToolByName(ctx, tc.tool)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mcp.NewHandler(mcp.ServeOptions{Catalog: func(context.Context) []tool.Tool { return []tool.Tool{tl} }}))
			t.Cleanup(srv.Close)
			var asked []string
			opts := &sdk.ClientOptions{}
			if tc.answer != nil {
				opts.ElicitationHandler = func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked = append(asked, req.Params.Message)
					return tc.answer, nil
				}
			}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "person", Version: "v1"}, opts).Connect(ctx,
				&sdk.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: cmp.Or(tc.client, mcp.Protocol20251125)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tc.tool, Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("%s() = %+v, %v", tc.tool, res, err)
			}
			if got := res.Content[0].(*sdk.TextContent).Text; got != tc.want {
				t.Errorf("%s() = %q, want %q", tc.tool, got, tc.want)
			}
			if tc.answer != nil && !slices.Equal(asked, []string{"Whose account?"}) {
				t.Errorf("the client was asked %q, want the tool's one question", asked)
			}
		})
	}
}
