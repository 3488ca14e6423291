package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
)

// A server that never answers initialize: Tools respects the caller's deadline.
func TestToolsRespectsCallerDeadline(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stop) })
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "hang", URL: hang.URL}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := g.Tools(ctx)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Tools with a 300ms deadline took %s (err %v)", took.Round(time.Millisecond), err)
	}
}

// While one connect hangs, a second caller with its own short deadline is not held.
func TestSecondCallerBlockedByHangingConnect(t *testing.T) {
	stop := make(chan struct{})
	arrived := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stop) })
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "hang", URL: hang.URL}})
	go func() { _, _ = g.Tools(context.Background()) }()
	// The first caller's connect reached the server, and hangs there.
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller's connect never reached the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _ = g.Tools(ctx)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("second Tools with a 300ms deadline took %s", took.Round(time.Millisecond))
	}
}

var modelToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Tool names that model APIs refuse are not offered.
func TestInvalidToolNamesLeftOut(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "names", Version: "v1"}, nil)
	for _, n := range []string{"ok_name", "has space", "dotted.name", "slash/name", strings.Repeat("x", 80)} {
		sdk.AddTool(s, &sdk.Tool{Name: n, Description: "d"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{}, nil, nil
		})
	}
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "names", URL: srv.URL}})
	ts, err := g.Tools(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if n := x.Definition().Name; !modelToolName.MatchString(n) {
			t.Errorf("offered tool %q, which model APIs refuse", n)
		}
	}
}

// A stdio server killed mid-call: the call ends promptly and a later call reconnects.
func TestStdioKilledMidCall(t *testing.T) {
	exe, _ := os.Executable()
	pidfile := filepath.Join(t.TempDir(), "pid")
	logs := newLogWatch()
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stdio", Command: "sh",
		Args: []string{"-c", `echo $$ > "$0"; exec "$1"`, pidfile, exe},
		Env:  map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}}, Logger: logs.logger()})
	slow := byName(t, g, "slow")
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	time.AfterFunc(200*time.Millisecond, func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	start := time.Now()
	res := call(t, testCtx(t), slow, `{"steps":5,"ms":2000}`)
	t.Logf("mid-call kill: %+v after %s", res, time.Since(start))
	if !res.IsError() || time.Since(start) > 3*time.Second {
		t.Errorf("killed call: %+v after %s", res, time.Since(start))
	}
	// The group notices the server's end (and says so), then waits out the backoff.
	logs.await(t, sessionEnded, 1)
	g.ElapseBackoff()
	res = call(t, testCtx(t), byName(t, g, "echo"), `{"text":"again"}`)
	if res.Content != "echo: again" {
		t.Errorf("after reconnect: %+v", res)
	}
}

// An HTTP server that restarts (old session unknown): the next call reconnects.
func TestHTTPServerRestart(t *testing.T) {
	var mu sync.Mutex
	s, _ := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	cur := h
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hh := cur
		mu.Unlock()
		hh.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	logs := newLogWatch()
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "http", URL: srv.URL}, Logger: logs.logger()})
	echo := byName(t, g, "echo")
	if res := call(t, testCtx(t), echo, `{"text":"1"}`); res.Content != "echo: 1" {
		t.Fatalf("first: %+v", res)
	}
	// "restart": a fresh handler that knows no sessions.
	s2, _ := testServer()
	mu.Lock()
	cur = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s2 }, nil)
	mu.Unlock()
	res := call(t, testCtx(t), echo, `{"text":"2"}`)
	t.Logf("after restart, first call: %q", res.Content)
	if res.Content != "echo: 2" {
		// The server did not know the session: the group drops it (and says so), then
		// waits out the backoff.
		logs.await(t, sessionEnded, 1)
		g.ElapseBackoff()
		res = call(t, testCtx(t), echo, `{"text":"2"}`)
		t.Logf("after restart, second call: %q", res.Content)
	}
	if res.Content != "echo: 2" {
		t.Errorf("never reconnected after the server restarted; last %q", res.Content)
	}
}

// Garbage from a stdio server ends the connect promptly.
func TestGarbageStdio(t *testing.T) {
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "garbage", Command: "sh", Args: []string{"-c", "echo 'this is not json'; sleep 30"}}})
	start := time.Now()
	_, err := g.Tools(testCtx(t))
	t.Logf("garbage: %v after %s", err, time.Since(start))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("garbage: %v after %s", err, time.Since(start))
	}
}

// Garbage from an HTTP server ends the connect promptly.
func TestGarbageHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("<html>nope"))
	}))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "garbage", URL: srv.URL}})
	start := time.Now()
	_, err := g.Tools(testCtx(t))
	t.Logf("garbage http: %v after %s", err, time.Since(start))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("garbage: %v after %s", err, time.Since(start))
	}
}

// Empty arguments (models send "" for tools without parameters) are {}.
func TestEmptyInput(t *testing.T) {
	url, _ := httpServer(t)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}})
	res := call(t, testCtx(t), byName(t, g, "structured"), ``)
	t.Logf("empty input: %+v", res)
	if res.IsError() {
		t.Errorf("empty input: %+v", res)
	}
}

// Concurrent first use opens one session.
func TestConcurrentFirstUse(t *testing.T) {
	s, _ := testServer()

	n := 0
	var mu sync.Mutex
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			mu.Lock()
			n++
			mu.Unlock()
		}

		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "c", URL: srv.URL}})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl, err := g.RequiredToolByName(testCtx(t), "echo")
			if err != nil {
				t.Error(err)
				return
			}
			if res, _ := tl.Call(testCtx(t), `{"text":"x"}`); res.Content != "echo: x" {
				t.Errorf("call: %+v", res)
			}
		}()
	}
	wg.Wait()
	ns := 0
	for range s.Sessions() {
		ns++
	}
	t.Logf("posts without session id %d, server sessions %d", n, ns)
	if ns != 1 {
		t.Errorf("%d sessions opened", ns)
	}
}
