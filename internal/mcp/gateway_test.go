package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// png is a 1x1 PNG, as an MCP server sends an image.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")

// gatewayServer is a streamable-HTTP MCP server (go-sdk) named name: tools <name>_media
// (every content kind), <name>_chatty (logs and reports progress) and <name>_huge (an
// image over the bound),
// a prompt "greet", resources "mem://doc" and "mem://<name>-only" and a template
// "mem://items/{id}", each answer naming the server.
func gatewayServer(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return gatewayMCPServer(name) }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// gatewayMCPServer is gatewayServer's MCP server, to serve over any transport.
func gatewayMCPServer(name string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "v1"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
		CompletionHandler: func(_ context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
			return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: []string{name + ":" + req.Params.Ref.Name}}}, nil
		},
	})
	sdk.AddTool(s, &sdk.Tool{Name: name + "_media", Description: "Every content kind."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: "a chart"},
			&sdk.ImageContent{Data: png, MIMEType: "image/png"},
			&sdk.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://data", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
			&sdk.ResourceLink{URI: "mem://doc", Name: "doc"},
		}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: name + "_huge", Description: "An image over the bound."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: bytes.Repeat([]byte{1}, mcp.MaxResultBytes+1), MIMEType: "image/png"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: name + "_chatty", Description: "Logs and reports progress."}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		for i := 1; i <= 3; i++ {
			_ = req.Session.Log(ctx, &sdk.LoggingMessageParams{Level: "info", Data: fmt.Sprintf("step %d", i)}) //nolint:staticcheck // the test server logs
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3})
			}
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
	})
	s.AddPrompt(&sdk.Prompt{Name: "greet", Description: "Greets."}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "hello from " + name}}}}, nil
	})
	read := func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: name + " " + req.Params.URI}}}, nil
	}
	s.AddResource(&sdk.Resource{Name: "doc", URI: "mem://doc", MIMEType: "text/plain"}, read)
	s.AddResource(&sdk.Resource{Name: "only", URI: "mem://" + name + "-only", MIMEType: "text/plain"}, read)
	s.AddResourceTemplate(&sdk.ResourceTemplate{Name: "items", URITemplate: "mem://items/{id}"}, read)
	return s
}

// endpoint serves the tools of groups through toolmesh's MCP endpoint, offering a
// session only the tools keep says yes to, and returns a connected client session.
func endpoint(t *testing.T, groups []*mcp.Group, keep func(tool.Tool) bool, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	return endpointOver(t, groups, keep, opts, nil)
}

// endpointOver is endpoint with the client's requests made by hc (nil: the default).
func endpointOver(t *testing.T, groups []*mcp.Group, keep func(tool.Tool) bool, opts *sdk.ClientOptions, hc *http.Client) *sdk.ClientSession {
	t.Helper()
	h := mcp.NewHandler(mcp.ServeOptions{
		Catalog: func(ctx context.Context) []tool.Tool {
			var out []tool.Tool
			for _, g := range groups {
				ts, err := g.Tools(ctx)
				if err != nil {
					t.Error(err)
				}
				out = append(out, ts...)
			}
			return out
		},
		Session: func(context.Context) (func(tool.Tool) tool.Tool, toolctx.Context) {
			return func(tl tool.Tool) tool.Tool {
				if keep != nil && !keep(tl) {
					return nil
				}
				return tl
			}, toolctx.Context{}
		},
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "client", Version: "v1"}, opts).Connect(testCtx(t), &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, &sdk.ClientSessionOptions{ProtocolVersion: mcp.Protocol20251125})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestMediaThroughTheMesh: an MCP server's images, audio and resources reach the loop as
// a result's parts (the model reads a placeholder for each; the first image is the
// artifact) and an MCP client of the endpoint as the server sent them; a result over the
// bound is an error.
func TestMediaThroughTheMesh(t *testing.T) {
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "srv", URL: gatewayServer(t, "srv")}})
	res := call(t, testCtx(t), byName(t, g, "srv_media"), `{}`)
	wantText := "a chart\n[image: image/png, 33 bytes]\n[audio: audio/wav, 4 bytes]\n[resource: mem://data, application/octet-stream, 3 bytes]\n[resource link: mem://doc]"
	if res.Content != wantText {
		t.Errorf("the model reads %q, want %q", res.Content, wantText)
	}
	if a := res.Artifact; a == nil || !bytes.Equal(a.Data, png) || a.MediaType != "image/png" || a.TypeName != "mcp.srv_media" {
		t.Errorf("artifact %+v, want the image", a)
	}
	if got := len(res.Parts.List()); got != 5 {
		t.Errorf("%d parts, want 5", got)
	}
	if huge := call(t, testCtx(t), byName(t, g, "srv_huge"), `{}`); !huge.IsError() || !strings.Contains(huge.Content, fmt.Sprintf("over the %d bytes a result may have", mcp.MaxResultBytes)) {
		t.Errorf("a result over the bound: %q", huge.Content)
	}

	cs := endpoint(t, []*mcp.Group{g}, nil, nil)
	out, err := cs.CallTool(testCtx(t), &sdk.CallToolParams{Name: "srv_media", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.Content{
		&sdk.TextContent{Text: "a chart"},
		&sdk.ImageContent{Data: png, MIMEType: "image/png"},
		&sdk.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://data", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
		&sdk.ResourceLink{URI: "mem://doc", Name: "doc"},
	}
	if diff := cmp.Diff(want, out.Content); diff != "" {
		t.Errorf("the endpoint's content (-want +got):\n%s", diff)
	}
}

// TestEndpointRelaysProgressAndLogs: a client that sent a progress token hears the MCP
// server's progress, with the client's token; one that set a log level hears the tool's
// log messages, and one that did not hears none.
func TestEndpointRelaysProgressAndLogs(t *testing.T) {
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "srv", URL: gatewayServer(t, "srv")}})
	var mu sync.Mutex
	var progress []float64
	var logs []string
	done := make(chan struct{}, 16)
	opts := &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.ProgressToken == "mine" {
				progress = append(progress, req.Params.Progress)
				done <- struct{}{}
			}
		},
		LoggingMessageHandler: func(_ context.Context, req *sdk.LoggingMessageRequest) { //nolint:staticcheck // what the test is about
			mu.Lock()
			logs = append(logs, fmt.Sprint(req.Params.Data))
			mu.Unlock()
			done <- struct{}{}
		},
	}
	quiet := endpoint(t, []*mcp.Group{g}, nil, opts)
	if _, err := quiet.CallTool(testCtx(t), &sdk.CallToolParams{Name: "srv_chatty", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	cs := endpoint(t, []*mcp.Group{g}, nil, opts)
	if err := cs.SetLoggingLevel(testCtx(t), &sdk.SetLoggingLevelParams{Level: "info"}); err != nil { //nolint:staticcheck // what the test is about
		t.Fatal(err)
	}
	params := &sdk.CallToolParams{Name: "srv_chatty", Arguments: map[string]any{}}
	params.SetProgressToken("mine")
	if _, err := cs.CallTool(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	for range 6 { // a notification sent just before the result may come after it
		select {
		case <-done:
		case <-testCtx(t).Done():
			t.Fatal("fewer than 3 log messages and 3 progress notifications")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Sent in order, but not always heard in order: what comes after the call's result
	// travels on the session's own stream, which may overtake the call's.
	slices.Sort(logs)
	slices.Sort(progress)
	if diff := cmp.Diff([]string{"step 1", "step 2", "step 3"}, logs); diff != "" {
		t.Errorf("log messages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{1, 2, 3}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
}

// TestEndpointSendsLogsBeforeTheResult: the log messages and progress notifications an
// MCP server sent before a call's result reach the endpoint's client before the result,
// on the call's stream (the progress notifications used to be left behind: the last
// one, handled after the result, went on the session's stream, and was lost there under
// load),
// even when the group's client handles them late (the go-sdk client handles
// notifications on a goroutine of its own, and gives a response to its caller at once),
// as a busy process does: 20 ms each, and 150 ms each (past the 250 ms a call waited
// for them before, which a busy test machine exceeded).
func TestEndpointSendsLogsBeforeTheResult(t *testing.T) {
	for _, transport := range []string{"http", "stdio"} {
		for _, d := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond} {
			t.Run(transport+"/"+d.String(), func(t *testing.T) { sendsLogsBeforeTheResult(t, transport, d) })
		}
	}
}

func sendsLogsBeforeTheResult(t *testing.T, transport string, handling time.Duration) {
	defer mcp.SlowLogHandling(handling)()
	server := mcp.Server{Name: "srv", URL: gatewayServer(t, "srv")}
	if transport == "stdio" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		server = mcp.Server{Name: "srv", Command: exe, Env: map[string]string{"TOOLMESH_MCP_TEST_SERVER": "gateway"}}
	}
	g := newGroup(t, mcp.Options{Server: server})
	wire := &wireOrder{next: http.DefaultTransport}
	cs := endpointOver(t, []*mcp.Group{g}, nil, nil, &http.Client{Transport: wire})
	if err := cs.SetLoggingLevel(testCtx(t), &sdk.SetLoggingLevelParams{Level: "info"}); err != nil { //nolint:staticcheck // what the test is about
		t.Fatal(err)
	}
	wire.start()
	params := &sdk.CallToolParams{Name: "srv_chatty", Arguments: map[string]any{}}
	params.SetProgressToken("mine")
	if _, err := cs.CallTool(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	const log, progress = "notifications/message", "notifications/progress"
	want := []string{log, progress, log, progress, log, progress, "result"}
	if diff := cmp.Diff(want, wire.seen()); diff != "" {
		t.Errorf("the call's stream, in order (-want +got):\n%s", diff)
	}
}

// wireOrder records, once started, the messages of the event streams of the responses
// it carries, in the order they came: each a notification's method, or "result".
type wireOrder struct {
	next    http.RoundTripper
	mu      sync.Mutex
	on      bool
	methods []string
}

func (w *wireOrder) start() {
	w.mu.Lock()
	w.on = true
	w.mu.Unlock()
}

func (w *wireOrder) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.methods)
}

func (w *wireOrder) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := w.next.RoundTrip(r)
	if err != nil || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, err
	}
	w.mu.Lock()
	on := w.on
	w.mu.Unlock()
	if !on || r.Method != http.MethodPost {
		return res, nil
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	for _, event := range strings.Split(string(body), "\n\n") {
		for _, line := range strings.Split(event, "\n") {
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			var m struct {
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &m) != nil {
				continue
			}
			w.mu.Lock()
			switch {
			case m.Method != "":
				w.methods = append(w.methods, m.Method)
			case m.Result != nil:
				w.methods = append(w.methods, "result")
			}
			w.mu.Unlock()
		}
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

func promptNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	var out []string
	for p, err := range cs.Prompts(testCtx(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// TestEndpointRelaysToolProgress: a mesh tool's progress reports (tool.Progress) reach
// the endpoint's client that sent a progress token, counted 1, 2, 3 with the status as
// the message.
func TestEndpointRelaysToolProgress(t *testing.T) {
	steps := tool.New("steps", "Reports three steps.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		for i := 1; i <= 3; i++ {
			tool.Progress(ctx, fmt.Sprintf("step %d", i))
		}
		return tool.Text("done"), nil
	})
	srv := httptest.NewServer(mcp.NewHandler(mcp.ServeOptions{Catalog: func(context.Context) []tool.Tool { return []tool.Tool{steps} }}))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var got []string
	heard := make(chan struct{}, 3)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "client", Version: "v1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%g %s", req.Params.Progress, req.Params.Message))
			mu.Unlock()
			heard <- struct{}{}
		},
	}).Connect(testCtx(t), &sdk.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	params := &sdk.CallToolParams{Name: "steps", Arguments: map[string]any{}}
	params.SetProgressToken(7)
	if _, err := cs.CallTool(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-heard:
		case <-testCtx(t).Done():
			t.Fatalf("heard %v", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"1 step 1", "2 step 2", "3 step 3"}, got); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
}
