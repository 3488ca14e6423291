package mcp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// The HTTP server drops connections mid-call: the call ends promptly, a later one works.
func TestHTTPConnectionsDroppedMidCall(t *testing.T) {
	s, _ := testServer()
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "h", URL: srv.URL}})
	slow := byName(t, g, "slow")
	time.AfterFunc(200*time.Millisecond, srv.CloseClientConnections)
	start := time.Now()
	res := call(t, testCtx(t), slow, `{"steps":3,"ms":2000}`)
	t.Logf("dropped: %+v after %s", res, time.Since(start))
	if time.Since(start) > 3*time.Second {
		t.Errorf("call with dropped connection took %s: %+v", time.Since(start), res)
	}
	// The session outlives its dropped connections (the client library opens new ones),
	// so a later call is served without a new session or a backoff. The first call after
	// the drop may still race it: a POST sent on a pooled connection the server is closing
	// fails with EOF, and net/http does not send a POST again. So the next calls are tried
	// for a second, not one alone.
	echo := byName(t, g, "echo")
	deadline := time.Now().Add(time.Second)
	for {
		res := call(t, testCtx(t), echo, `{"text":"x"}`)
		if res.Content == "echo: x" {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(res.Content, "EOF") {
			t.Errorf("after drop: %+v", res)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close during a call ends it promptly.
func TestCloseDuringCall(t *testing.T) {
	exe, _ := os.Executable()
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stdio", Command: exe, Env: map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}}})
	slow := byName(t, g, "slow")
	time.AfterFunc(200*time.Millisecond, func() { _ = g.Close() })
	start := time.Now()
	res := call(t, testCtx(t), slow, `{"steps":5,"ms":3000}`)
	t.Logf("closed: %+v after %s", res, time.Since(start))
	if time.Since(start) > 4*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
}

// No goroutines are left after Close (stdio and HTTP).
func TestNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	exe, _ := os.Executable()
	s, _ := testServer()
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	for _, srvOpt := range []mcp.Server{
		{Name: "stdio", Command: exe, Env: map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}},
		{Name: "http", URL: srv.URL},
	} {
		g, _ := mcp.New(mcp.Options{Server: srvOpt})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tl, err := g.RequiredToolByName(ctx, "echo")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = tl.Call(ctx, `{"text":"x"}`)
		cancel()
		_ = g.Close()
	}
	srv.CloseClientConnections()
	srv.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if err := goleak.Find(opt); err != nil {
		t.Error(err)
	}
}

// A server whose tools/list fails is not asked again within the backoff.
func TestListFailureBackoff(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "x", Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{}, nil, nil
	})
	var lists atomic.Int32
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
				return nil, errors.New("listing is broken")
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "x", URL: srv.URL}})
	for i := 0; i < 5; i++ {
		_, err := g.Tools(testCtx(t))
		if i == 0 {
			t.Logf("err: %v", err)
		}
	}
	t.Logf("tools/list asked %d times in 5 quick uses", lists.Load())
	if n := lists.Load(); n > 1 {
		t.Errorf("tools/list asked %d times within the 1s backoff", n)
	}
}

// A call that ends at the run's deadline (shorter than the tool's timeout) says so.
func TestParentDeadlineMessage(t *testing.T) {
	url, st := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	slow := byName(t, g, "slow")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := call(t, ctx, slow, `{"steps":5,"ms":2000}`)
	if strings.Contains(res.Content, "timed out after 30s") || !strings.Contains(res.Content, "was cancelled: context deadline exceeded") {
		t.Errorf("a call cut at 200ms says %q", res.Content)
	}
	st.awaitCancelled(1, 3*time.Second) // let the server end the call before it closes
}

// A huge text result becomes an error before the decorator chain.
func TestHugeResult(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "x", Version: "v1"}, nil)
	big := strings.Repeat("a", mcp.MaxResultBytes+1)
	sdk.AddTool(s, &sdk.Tool{Name: "big"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: big}}}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "x", URL: srv.URL}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := call(t, testCtx(t), byName(t, g, "big"), `{}`)
	runtime.ReadMemStats(&after)
	t.Logf("result %d bytes, kind %s; allocated %d MiB", len(res.Content), res.Kind, (after.TotalAlloc-before.TotalAlloc)>>20)
	if !res.IsError() || !strings.Contains(res.Content, "over the 4194304 bytes a result may have") {
		t.Errorf("a %d-byte result reached the decorator chain", len(res.Content))
	}
	_ = tool.Text
}

// A call cut by its caller's deadline is cancelled on the server.
func TestParentDeadlineCancelsOnServer(t *testing.T) {
	url, st := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	slow := byName(t, g, "slow")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	call(t, ctx, slow, `{"steps":5,"ms":2000}`)
	st.awaitCancelled(1, 3*time.Second)
	if n := st.cancelled.Load(); n != 1 {
		t.Errorf("the server saw %d cancellations, want 1", n)
	}
}
