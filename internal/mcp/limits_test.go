package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
)

func TestCloseKillsChild(t *testing.T) {
	exe, _ := os.Executable()
	pidfile := filepath.Join(t.TempDir(), "pid")
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "stdio", Command: "sh",
		Args: []string{"-c", `echo $$ > "$0"; exec "$1"`, pidfile, exe},
		Env:  map[string]string{"TOOLMESH_MCP_TEST_SERVER": "stdio"}}})
	byName(t, g, "echo")
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	start := time.Now()
	_ = g.Close() // returns once the child has exited and been reaped
	t.Logf("close took %s", time.Since(start))
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("child %d alive after Close", pid)
	}
}

func TestTooManyTools(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "x", Version: "v1"}, nil)
	for i := 0; i <= 100; i++ {
		sdk.AddTool(s, &sdk.Tool{Name: fmt.Sprintf("t%05d", i)}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{}, nil, nil
		})
	}
	var lists atomic.Int32
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "x", URL: srv.URL}, MaxTools: 100})
	for i := 0; i < 3; i++ {
		_, err := g.Tools(testCtx(t))
		if err == nil || !strings.Contains(err.Error(), "it offers more than 100 tools") {
			t.Errorf("use %d: %v, want the server refused for offering too many tools", i+1, err)
		}
	}
	// The refusal is a failure like any other: the uses within the backoff list nothing.
	if n, first := lists.Load(), int32(1); n > first+1 {
		t.Errorf("tools/list asked %d times in 3 quick uses", n)
	}
	if g.Connected() {
		t.Error("the refused session was kept")
	}
}
