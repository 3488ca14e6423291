package mcp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// The test binary doubles as a stdio MCP server: with TOOLMESH_MCP_TEST_SERVER=stdio it
// serves testServer on stdin and stdout instead of running the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("TOOLMESH_MCP_TEST_SERVER") {
	case "stdio":
		s, _ := testServer()
		_ = s.Run(context.Background(), &sdk.StdioTransport{})
		os.Exit(0)
	case "gateway": // gatewayServer's tools over stdio, named srv
		_ = gatewayMCPServer("srv").Run(context.Background(), &sdk.StdioTransport{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serverState records what the test server saw.
type serverState struct {
	mu        sync.Mutex
	metas     []map[string]any
	auths     []string // "<session id> <Authorization header>" of each echo call
	cancelled atomic.Int32
	// cancelledCh is closed (and replaced) each time cancelled grows.
	cancelledCh chan struct{}
}

// cancel records that the server saw a call cancelled.
func (s *serverState) cancel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelled.Add(1)
	close(s.cancelledCh)
	s.cancelledCh = make(chan struct{})
}

// awaitCancelled waits until the server has seen n cancellations, or for at most
// within; it reports whether it saw them.
func (s *serverState) awaitCancelled(n int32, within time.Duration) bool {
	timeout := time.After(within)
	for {
		s.mu.Lock()
		got, ch := s.cancelled.Load(), s.cancelledCh
		s.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

func (s *serverState) lastMeta() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.metas) == 0 {
		return nil
	}
	return s.metas[len(s.metas)-1]
}

type textIn struct {
	Text string `json:"text"`
}

type slowIn struct {
	Steps int `json:"steps"`
	MS    int `json:"ms"`
}

// testServer is an MCP server with tools that answer text, fail, return structured
// content, report progress and notice cancellation, and echo their _meta.
func testServer() (*sdk.Server, *serverState) {
	st := &serverState{cancelledCh: make(chan struct{})}
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "v1"}, nil)
	record := func(req *sdk.CallToolRequest) {
		st.mu.Lock()
		defer st.mu.Unlock()
		m := map[string]any{}
		for k, v := range req.Params.Meta {
			m[k] = v
		}
		if req.Params.Meta == nil {
			m = nil
		}
		st.metas = append(st.metas, m)
		if req.Extra != nil {
			st.auths = append(st.auths, req.Session.ID()+" "+req.Extra.Header.Get("Authorization"))
		}
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes its text."}, func(_ context.Context, req *sdk.CallToolRequest, in textIn) (*sdk.CallToolResult, any, error) {
		record(req)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "structured", Description: "Returns structured content."}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return nil, map[string]any{"n": 42, "ok": true}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Reports progress, step by step."}, func(ctx context.Context, req *sdk.CallToolRequest, in slowIn) (*sdk.CallToolResult, any, error) {
		for i := 1; i <= in.Steps; i++ {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(in.Steps), Message: "step " + string(rune('0'+i))})
			}
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
				st.cancel()
				return nil, nil, ctx.Err()
			}
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
	})
	if os.Getenv("TOOLMESH_MCP_TEST_SERVER") == "stdio" {
		// Only the stdio server may die: it is its own process.
		sdk.AddTool(s, &sdk.Tool{Name: "die", Description: "Exits the server process."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	}
	return s, st
}

// httpServer serves testServer over streamable HTTP.
func httpServer(t *testing.T) (string, *serverState) {
	t.Helper()
	s, st := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, st
}

// sessionEnded is what a group logs when a session ends: the failure its backoff runs
// from is recorded then.
const sessionEnded = "mcp session ended; the next use connects again"

// logWatch is a slog handler that counts the messages logged through it, for a test to
// wait on what the code under test logs.
type logWatch struct {
	mu      sync.Mutex
	seen    map[string]int
	changed chan struct{} // closed (and replaced) at every record
}

func newLogWatch() *logWatch {
	return &logWatch{seen: map[string]int{}, changed: make(chan struct{})}
}

// logger is a logger whose records w counts.
func (w *logWatch) logger() *slog.Logger { return slog.New(w) }

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }

func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[r.Message]++
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *logWatch) WithGroup(string) slog.Handler      { return w }

// await waits until msg has been logged n times; the test fails if that takes longer
// than ten seconds.
func (w *logWatch) await(t *testing.T, msg string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		w.mu.Lock()
		got, ch := w.seen[msg], w.changed
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%q was logged %d times, want %d", msg, got, n)
		}
	}
}

func newGroup(t *testing.T, opts mcp.Options) *mcp.Group {
	t.Helper()
	g, err := mcp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func byName(t *testing.T, g *mcp.Group, name string) tool.Tool {
	t.Helper()
	tl, err := g.RequiredToolByName(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func call(t *testing.T, ctx context.Context, tl tool.Tool, input string) tool.Result {
	t.Helper()
	res, err := tl.Call(ctx, input)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLazyGroupOverHTTP: nothing connects until the tools are first needed; then the
// filtered tools are offered and their calls map text, isError and structured content.
func TestLazyGroupOverHTTP(t *testing.T) {
	url, _ := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}, Filter: func(t mcp.ToolInfo) bool { return t.Name != "slow" }})
	if g.Connected() {
		t.Fatal("connected before first use")
	}
	ts, err := g.Tools(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ts {
		names = append(names, x.Definition().Name)
	}
	if strings.Join(names, ",") != "echo,fail,structured" || !g.Connected() {
		t.Errorf("tools %v, connected %v", names, g.Connected())
	}
	ctx := testCtx(t)
	if res := call(t, ctx, byName(t, g, "echo"), `{"text":"hi"}`); res.IsError() || res.Content != "echo: hi" {
		t.Errorf("echo: %+v", res)
	}
	if res := call(t, ctx, byName(t, g, "fail"), `{}`); !res.IsError() || res.Content != "it broke" {
		t.Errorf("fail: %+v", res)
	}
	res := call(t, ctx, byName(t, g, "structured"), `{}`)
	if res.Kind != tool.KindArtifact || res.Artifact.TypeName != "mcp.structured" || string(res.Artifact.JSON) != `{"n":42,"ok":true}` {
		t.Errorf("structured: %+v", res)
	}
	_, err = g.RequiredToolByName(ctx, "nope")
	if err == nil || err.Error() != "MCP tool 'nope' not found. Available tools: echo, fail, structured" {
		t.Errorf("RequiredToolByName(nope) = %v", err)
	}
	if _, ok := g.ToolByName(ctx, "slow"); ok {
		t.Error("ToolByName found a filtered-out tool")
	}
}

// TestMetaThroughConverters: the context reaches the server as _meta through the
// group's converter: every entry with pass-through, the listed keys with allow-keys, an
// empty object with none; with an empty context no entry travels. A progress token
// travels when a progress report reaches someone; with neither, _meta is absent.
func TestMetaThroughConverters(t *testing.T) {
	url, st := httpServer(t)
	bag := toolctx.MustOf("tenantId", "acme", "traceId", "t-1")
	for _, tc := range []struct {
		name string
		conv ctxconv.Converter
		ctx  toolctx.Context
		want map[string]any // without progressToken
	}{
		{"pass-through", ctxconv.PassThrough(), bag, map[string]any{"tenantId": "acme", "traceId": "t-1"}},
		{"allow-keys", ctxconv.AllowKeys("tenantId"), bag, map[string]any{"tenantId": "acme"}},
		{"none", ctxconv.None(), bag, map[string]any{}},
		{"empty context", ctxconv.PassThrough(), toolctx.Empty, map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}, Converter: tc.conv})
			ctx := toolctx.NewContext(toolcall.WithCallInfo(testCtx(t), tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c"}), tc.ctx)
			call(t, ctx, byName(t, g, "echo"), `{"text":"x"}`)
			got := st.lastMeta()
			if _, ok := got["progressToken"]; ok {
				t.Errorf("_meta %v has a progress token, with no one to report progress to", got)
			}
			if tc.ctx.Len() == 0 && got != nil {
				t.Errorf("_meta %v, want none at all: nothing is to be sent", got)
			}
			call(t, toolcall.WithProgress(ctx, func(string) {}), byName(t, g, "echo"), `{"text":"x"}`)
			got = st.lastMeta()
			if _, ok := got["progressToken"]; !ok {
				t.Errorf("_meta %v has no progress token", got)
			}
			delete(got, "progressToken")
			if len(got) != len(tc.want) {
				t.Fatalf("_meta %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("_meta[%s] = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestProgressAndCancellationOverStdio: a stdio server (this test binary) reports progress,
// which reaches the call's progress channel in order; a call cancelled mid-way reaches
// the server as MCP cancellation and answers at once.
func TestProgressAndCancellationOverStdio(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stdio", Command: exe, Env: map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}}})
	var mu sync.Mutex
	var reports []string
	ctx := toolcall.WithProgress(testCtx(t), func(s string) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, s)
	})
	slow := byName(t, g, "slow")
	if res := call(t, ctx, slow, `{"steps":3,"ms":10}`); res.Content != "done" {
		t.Fatalf("slow: %+v", res)
	}
	mu.Lock()
	if strings.Join(reports, ",") != "step 1,step 2,step 3" {
		t.Errorf("progress %q", reports)
	}
	mu.Unlock()

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	res := call(t, cctx, slow, `{"steps":5,"ms":2000}`)
	if !res.IsError() || !strings.Contains(res.Content, "was cancelled") || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled call: %+v after %s", res, time.Since(start))
	}
	// The server saw the cancellation: a later call is answered normally.
	if res := call(t, ctx, byName(t, g, "echo"), `{"text":"after"}`); res.Content != "echo: after" {
		t.Errorf("after cancellation: %+v", res)
	}
}

// TestServerThatDoesNotStart: a command that does not exist gives a clear error, and the
// tools' lookup says no MCP tools are available.
func TestServerThatDoesNotStart(t *testing.T) {
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "ghost", Command: "/nonexistent/mcp-server"}})
	_, err := g.Tools(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), `mcp server "ghost": cannot connect`) {
		t.Errorf("Tools: %v", err)
	}
	_, err = g.RequiredToolByName(testCtx(t), "x")
	if err == nil || err.Error() != "MCP tool 'x' not found. No MCP tools are available - check MCP client connections." {
		t.Errorf("RequiredToolByName: %v", err)
	}
}

// TestStructuredContentJSON: structured content round-trips as the artifact's JSON.
func TestStructuredContentJSON(t *testing.T) {
	url, _ := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	res := call(t, testCtx(t), byName(t, g, "structured"), `{}`)
	var v map[string]any
	if err := json.Unmarshal(res.Artifact.JSON, &v); err != nil || v["n"] != float64(42) {
		t.Errorf("artifact %s: %v", res.Artifact.JSON, err)
	}
}

// TestCancellationReachesTheServer: a call whose context ends mid-way is cancelled on the
// server (MCP notifications/cancelled), and its deadline does the same.
func TestCancellationReachesTheServer(t *testing.T) {
	url, st := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url, Timeout: 300 * time.Millisecond}})
	slow := byName(t, g, "slow")
	cctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(100*time.Millisecond, cancel)
	if res := call(t, cctx, slow, `{"steps":5,"ms":2000}`); !strings.Contains(res.Content, "was cancelled") {
		t.Errorf("cancelled: %+v", res)
	}
	res := call(t, testCtx(t), slow, `{"steps":5,"ms":2000}`)
	if res.Code != tool.CodeTimeout || !strings.Contains(res.Content, "timed out after 300ms on MCP server test") {
		t.Errorf("deadline: %+v", res)
	}
	st.awaitCancelled(2, 5*time.Second)
	if n := st.cancelled.Load(); n != 2 {
		t.Errorf("the server saw %d cancellations, want 2", n)
	}
}

// TestTraceContextInMeta: a call made inside a span carries the W3C trace context in
// _meta (traceparent), so that the server's spans join the trace.
func TestTraceContextInMeta(t *testing.T) {
	url, st := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(testCtx(t), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	call(t, ctx, byName(t, g, "echo"), `{"text":"x"}`)
	if got := st.lastMeta()["traceparent"]; got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("traceparent %v", got)
	}
	call(t, testCtx(t), byName(t, g, "echo"), `{"text":"x"}`)
	if _, ok := st.lastMeta()["traceparent"]; ok {
		t.Error("a call outside any span sent a traceparent")
	}
}

// TestSessionPerCredential: a server that takes Authorization from the context gets one
// session per distinct token, each call carrying only its own caller's token (and never in
// _meta); a call without a token uses a session without one.
func TestSessionPerCredential(t *testing.T) {
	url, st := httpServer(t)
	g := newGroup(t, mcp.Options{
		Server:    mcp.Server{Name: "auth", URL: url, ContextHeaders: []string{"Authorization"}},
		Converter: ctxconv.AllowKeys("Authorization", "tenantId"),
	})
	echo := byName(t, g, "echo") // listed without a token
	for _, tok := range []string{"Bearer alice", "Bearer bob", "Bearer alice"} {
		ctx := toolctx.NewContext(testCtx(t), toolctx.MustOf("Authorization", tok, "tenantId", "acme"))
		call(t, ctx, echo, `{"text":"x"}`)
		if _, ok := st.lastMeta()["Authorization"]; ok {
			t.Errorf("the token travelled in _meta: %v", st.lastMeta())
		}
	}
	st.mu.Lock()
	auths := append([]string(nil), st.auths...)
	st.mu.Unlock()
	if len(auths) != 3 {
		t.Fatalf("calls %v", auths)
	}
	sessionOf := map[string]string{}
	for _, a := range auths {
		id, tok, _ := strings.Cut(a, " ")
		if prev, ok := sessionOf[tok]; ok && prev != id {
			t.Errorf("token %q used sessions %s and %s", tok, prev, id)
		}
		sessionOf[tok] = id
	}
	if sessionOf["Bearer alice"] == sessionOf["Bearer bob"] || sessionOf["Bearer alice"] == "" {
		t.Errorf("alice and bob shared a session: %v", auths)
	}
	if n := g.Sessions(); n != 3 { // no token (the listing), alice, bob
		t.Errorf("%d sessions, want 3", n)
	}
}

// TestUnfoldingFactories: facades over a server's tools by predicate, names and regular
// expressions.
func TestUnfoldingFactories(t *testing.T) {
	url, _ := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	ctx := testCtx(t)
	kids := func(f tool.Facade, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(names(f.Children()), ",")
	}
	if got := kids(g.Unfolding(ctx, "all", "everything", nil)); got != "echo,fail,slow,structured" {
		t.Errorf("Unfolding(nil) = %s", got)
	}
	if got := kids(g.UnfoldingByName(ctx, "two", "two", "echo", "slow", "missing")); got != "echo,slow" {
		t.Errorf("UnfoldingByName = %s", got)
	}
	if got := kids(g.UnfoldingMatching(ctx, "re", "re", regexp.MustCompile(`^s`), regexp.MustCompile(`ai`))); got != "fail,slow,structured" {
		t.Errorf("UnfoldingMatching = %s", got)
	}
	f, _ := g.UnfoldingByName(ctx, "two", "Two tools", "echo")
	if f.Definition().Name != "two" || f.Definition().Description != "Two tools" {
		t.Errorf("facade %+v", f.Definition())
	}
}

// TestStdioServerRestartsOnUse: a stdio server that dies mid-call gives that call a clear
// error; the next use, after the backoff, starts it again.
func TestStdioServerRestartsOnUse(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogWatch()
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stdio", Command: exe, Env: map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}}, Logger: logs.logger()})
	ctx := testCtx(t)
	echo, die := byName(t, g, "echo"), byName(t, g, "die")
	res := call(t, ctx, die, `{}`)
	if !res.IsError() || !strings.Contains(res.Content, "tool 'die' failed on MCP server stdio") {
		t.Errorf("the call the server died in: %+v", res)
	}
	// The group notices the server's end (and says so), then waits out the backoff.
	logs.await(t, sessionEnded, 1)
	g.ElapseBackoff()
	res = call(t, ctx, echo, `{"text":"again"}`)
	if res.Content != "echo: again" {
		t.Errorf("after the server died: %+v", res)
	}
}

// names is the sorted names of ts.
func names(ts []tool.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Definition().Name
	}
	slices.Sort(out)
	return out
}
