//go:build everything

// These tests run MCP groups against the reference server of the MCP project,
// @modelcontextprotocol/server-everything (npm), over stdio and over streamable HTTP.
// `make test-mcp-everything` installs it at its pinned version and runs them; they need
// TOOLMESH_MCP_EVERYTHING, the path of its mcp-server-everything command.
package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func everythingCommand(t *testing.T) string {
	t.Helper()
	cmd := os.Getenv("TOOLMESH_MCP_EVERYTHING")
	if cmd == "" {
		t.Fatal("TOOLMESH_MCP_EVERYTHING is not set: run make test-mcp-everything")
	}
	return cmd
}

// everythingHTTP starts the server over streamable HTTP and returns its URL.
func everythingHTTP(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	cmd := exec.Command(everythingCommand(t), "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("server-everything did not start")
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

func everythingGroups(t *testing.T) map[string]*mcp.Group {
	return map[string]*mcp.Group{
		"stdio": newGroup(t, mcp.Options{Server: mcp.Server{Name: "everything", Command: everythingCommand(t), Args: []string{"stdio"}}}),
		"http":  newGroup(t, mcp.Options{Server: mcp.Server{Name: "everything", URL: everythingHTTP(t)}}),
	}
}

// TestEverything: list, a call with arguments, structured content, an error result, a
// tool that reports progress, and a long tool cancelled mid-call, over both transports.
func TestEverything(t *testing.T) {
	for transport, g := range everythingGroups(t) {
		t.Run(transport, func(t *testing.T) {
			ctx := testCtx(t)
			ts, err := g.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			names := strings.Join(names(ts), ",")
			for _, want := range []string{"echo", "get-sum", "get-structured-content", "trigger-long-running-operation"} {
				if !strings.Contains(","+names+",", ","+want+",") {
					t.Errorf("tools %s lack %s", names, want)
				}
			}
			if res := call(t, ctx, byName(t, g, "echo"), `{"message":"hi"}`); res.IsError() || res.Content != "Echo: hi" {
				t.Errorf("echo: %+v", res)
			}
			if res := call(t, ctx, byName(t, g, "get-sum"), `{"a":2,"b":3}`); res.IsError() || !strings.Contains(res.Content, "5") {
				t.Errorf("get-sum: %+v", res)
			}
			res := call(t, ctx, byName(t, g, "get-structured-content"), `{"location":"Chicago"}`)
			if res.Kind != tool.KindArtifact || res.Artifact.TypeName != "mcp.get-structured-content" || !strings.Contains(string(res.Artifact.JSON), "temperature") {
				t.Errorf("structured content: %+v", res)
			}
			if res := call(t, ctx, byName(t, g, "get-sum"), `{"a":"two","b":3}`); !res.IsError() {
				t.Errorf("get-sum with a string: %+v, want an error result", res)
			}

			var mu sync.Mutex
			var reports []string
			pctx := toolcall.WithProgress(ctx, func(s string) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, s)
			})
			long := byName(t, g, "trigger-long-running-operation")
			if res := call(t, pctx, long, `{"duration":1,"steps":3}`); res.IsError() {
				t.Errorf("long operation: %+v", res)
			}
			// Reports arrive in order; one the client library hands over only after the
			// result (seen over HTTP) is dropped rather than shown after the call ended.
			mu.Lock()
			want := []string{"1 of 3", "2 of 3", "3 of 3"}
			if len(reports) == 0 || len(reports) > 3 || strings.Join(reports, ",") != strings.Join(want[:len(reports)], ",") {
				t.Errorf("progress reports %q, want a prefix of %q", reports, want)
			}
			mu.Unlock()

			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			start := time.Now()
			if res := call(t, cctx, long, `{"duration":20,"steps":5}`); !res.IsError() || !strings.Contains(res.Content, "was cancelled") || time.Since(start) > 5*time.Second {
				t.Errorf("cancelled long operation: %+v after %s", res, time.Since(start))
			}
			if res := call(t, ctx, byName(t, g, "echo"), `{"message":"after"}`); res.Content != "Echo: after" {
				t.Errorf("after the cancellation: %+v", res)
			}
		})
	}
}
