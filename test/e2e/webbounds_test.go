package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	connectrpc "connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWebBodiesAreBounded: the HTTP side of the port (REST, Connect, gRPC-Web) reads a
// request's body before the gRPC server's bounds apply, and its transcoder decompresses
// it whole. A body of 256 KiB that decompresses to 256 MiB (no token needed: the body
// is read before the call is authenticated) took the orchestrator from 44 MiB to 1.3 GiB;
// now it is refused as it decompresses. Bodies sent in part and then left held their
// megabytes and their connection for as long as the client stayed, answered never; now
// a body must keep coming, each is counted against server.max_inflight_receive_bytes
// while it is read, and the stalled ones are ended: the peak memory stays bounded and
// the orchestrator answers.
func TestWebBodiesAreBounded(t *testing.T) {
	const limit = 384 << 20
	m := startMesh(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	before := peakRSS(t, m.orch.PID())

	// A decompression bomb, to Connect's GetRun.
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	_, _ = zw.Write([]byte(`{"runId":"`))
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range 256 {
		_, _ = zw.Write(chunk)
	}
	_, _ = zw.Write([]byte(`"}`))
	_ = zw.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/GetRun", bytes.NewReader(bomb.Bytes()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "larger than the 8388608 bytes") {
		t.Errorf("a body of %d KiB that decompresses to 256 MiB: HTTP %d %s; want it refused 413 as it decompresses", bomb.Len()>>10, resp.StatusCode, body)
	}

	// Bodies the gate reads itself (chunked, gzip) that stop coming: answered 504, where
	// they were answered 200 with nothing. They start first (the bodies below fill the
	// budget, and one that waits for room is refused 503 before it could stall).
	var z bytes.Buffer
	zw = gzip.NewWriter(&z)
	_, _ = zw.Write([]byte(`{"runId":"` + strings.Repeat("x", 1000) + `"}`))
	_ = zw.Close()
	stalled := map[string]net.Conn{}
	for name, req := range map[string]string{
		"REST, chunked":    "POST /v1/runs/x:cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
		"Connect, chunked": "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
		"gRPC-Web stream":  "POST /toolmesh.v1.OrchestratorService/WatchRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\nContent-Length: 20\r\n\r\n\x00\x00",
		"Connect stream":   "POST /toolmesh.v1.OrchestratorService/WatchRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 20\r\n\r\n\x00\x00",
		"Connect, gzip":    fmt.Sprintf("POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", z.Len()) + z.String()[:z.Len()/2],
	} {
		c, err := net.Dial("tcp", m.orch.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		stalled[name] = c
		_, _ = io.WriteString(c, req)
	}
	time.Sleep(500 * time.Millisecond)

	// 48 bodies of nearly 4 MiB (each within every bound) sent but for their last
	// bytes, then left.
	msg := `{"runId":"` + strings.Repeat("b", 4<<20-1024) + `"}`
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range 48 {
		c, err := net.Dial("tcp", m.orch.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		head := fmt.Sprintf("POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: %d\r\n\r\n", len(msg))
		go func() { _, _ = io.WriteString(c, head+msg[:len(msg)-5]) }()
	}
	// The orchestrator still answers, at once, while they hang.
	if _, err := m.c.ListTools(ctx); err != nil {
		t.Errorf("the orchestrator does not answer while bodies hang: %v", err)
	}
	answered, deadline := 0, time.Now().Add(45*time.Second)
	webStalledAnswered(t, stalled, deadline)
	for _, c := range conns[:48] {
		_ = c.SetReadDeadline(deadline)
		if n, _ := c.Read(make([]byte, 1)); n > 0 {
			answered++
		}
	}
	peak := peakRSS(t, m.orch.PID())
	t.Logf("peak RSS %d MiB before, %d MiB after; %d of 48 stalled bodies answered", before>>20, peak>>20, answered)
	if answered != 48 {
		t.Errorf("%d of 48 requests whose bodies stalled were answered (or closed with an answer) within 45 s; want all", answered)
	}
	if peak > limit {
		t.Errorf("the orchestrator's peak RSS was %d MiB, over the %d MiB bound", peak>>20, limit>>20)
	}
}

// TestWebReadsALargeAnswer: a run that ended with an answer of 5 MiB, whose JSON (its
// quotes and newlines escaped) is larger than server.max_receive_bytes, is read over REST
// and Connect JSON as over gRPC: the transcoder's bound on a message, which was the
// receive bound, applied to responses as well and answered 429.
func TestWebReadsALargeAnswer(t *testing.T) {
	text := strings.Repeat(`{"k":"v","x":"y"}`+"\n", 5<<20/18)
	script := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(script, []byte("name: big\nrules:\n  - name: answer\n    when: {turn: 1}\n    reply:\n      text: "+strconv.Quote(text)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A receive bound of 2 MiB: the answer is more than twice it.
	m := startMesh(t, "", "provider: {name: scripted, script: "+strconv.Quote(script)+"}\nserver: {max_receive_bytes: 2097152}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The test's gRPC client takes 4 MiB at most: it starts the run, which goes on
	// when the client cannot read the answer, and it is read over HTTP.
	if _, err := m.run(ctx, &toolpb.RunRequest{Prompt: "big", RunId: "big-1"}, nil); err != nil && status.Code(err) != codes.ResourceExhausted {
		t.Fatal(err)
	}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.orch.Addr+"/v1/runs/big-1", nil)
		var got struct {
			State string `json:"state"`
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&got)
			_ = resp.Body.Close()
		}
		if got.State == "RUN_STATE_SUCCEEDED" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run did not succeed: %q", got.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write([]byte(`{"runId":"big-1"}`))
	_ = zw.Close()
	for _, tc := range []struct {
		method, path, body string
		gzip               bool
	}{
		{http.MethodGet, "/v1/runs/big-1", "", false},
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/GetRun", `{"runId":"big-1"}`, false},
		// Sent compressed, the answer (compressed by the gRPC server as the request was)
		// was refused 429 past twice max_receive_bytes: the bound of a request's
		// decompression applied to the answer.
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/GetRun", zipped.String(), true},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, "http://"+m.orch.Addr+tc.path, strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
		}
		if tc.gzip {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			FinalText string `json:"finalText"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || got.FinalText != text {
			t.Errorf("%s %s: HTTP %d, %d bytes of final text (%v); want the run's %d", tc.method, tc.path, resp.StatusCode, len(got.FinalText), err, len(text))
		}
	}
}

// TestWebBadRequestsAreTheClients: a body or a query parameter the transcoder cannot read
// is answered as a toolmesh handler answers a bad request — 400, invalid_argument, the
// reason INVALID_REQUEST — where it was 500 unknown (malformed JSON, a value of the wrong
// type, text that is not UTF-8); an enum value the API does not have is refused where it
// was dropped (a misspelt state filter listed every run); a query parameter it does not
// have (a browser library's cache buster) is ignored where it was 500; a Content-Type
// with its parameter written without a space, or in capitals, is read where it was 415.
func TestWebBadRequestsAreTheClients(t *testing.T) {
	m := startMesh(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connectAs := func(method, contentType, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/"+method, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		return webDo(t, req)
	}
	connect := func(method, body string) (int, string) { return connectAs(method, "application/json", body) }
	rest := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.orch.Addr+path, nil)
		return webDo(t, req)
	}
	for _, tc := range []struct {
		name string
		do   func() (int, string)
		want int
	}{
		{"malformed JSON", func() (int, string) { return connect("GetRun", `{`) }, http.StatusBadRequest},
		{"a number for a string", func() (int, string) { return connect("GetRun", `{"runId":5}`) }, http.StatusBadRequest},
		{"text that is not UTF-8", func() (int, string) { return connect("GetRun", "{\"runId\":\"\xff\"}") }, http.StatusBadRequest},
		{"an unknown state", func() (int, string) { return connect("ListRuns", `{"state":"RUN_STATE_RUNNIN"}`) }, http.StatusBadRequest},
		{"an unknown field", func() (int, string) { return connect("ListRuns", `{"bogus":1}`) }, http.StatusBadRequest},
		{"a page size that is not a number", func() (int, string) { return rest("/v1/runs?page_size=abc") }, http.StatusBadRequest},
		{"a cache buster", func() (int, string) { return rest("/v1/runs?_=1733580000000") }, http.StatusOK},
		{"application/json;charset=UTF-8", func() (int, string) { return connectAs("ListRuns", "application/json;charset=UTF-8", `{}`) }, http.StatusOK},
		{"Application/JSON", func() (int, string) { return connectAs("ListRuns", "Application/JSON", `{}`) }, http.StatusOK},
	} {
		code, body := tc.do()
		if code != tc.want || (tc.want == http.StatusBadRequest && !strings.Contains(body, "INVALID_REQUEST") && !strings.Contains(body, "invalid parameter")) {
			t.Errorf("%s: HTTP %d %s; want %d, a bad request with its reason", tc.name, code, body, tc.want)
		}
	}
}

// webDo sends req and returns the status and the first 4 KiB of the body.
func webDo(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// TestWebSlowBodiesHoldLittle: a body counted at the largest a body may be while it was
// read let two connections that trickled chunked bodies (no credentials) fill the port's
// budget, and eight the MCP endpoint's: every other request with a body was refused 503
// for as long as they trickled (up to two minutes). A body now holds what it delivered.
func TestWebSlowBodiesHoldLittle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, mcpAddr := startMeshWithMCP(ctx, t)
	trickle := func(addr, head string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, head+"1\r\n{\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		trickle(m.orch.Addr, "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
		trickle(m.orch.Addr, "POST /v1/runs/x:cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	}
	for range 16 {
		trickle(mcpAddr, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	}
	// Connections that sent a head and nothing more (a body's first chunk was taken at
	// once: 520 of them held the port's budget).
	for range 520 {
		c, err := net.Dial("tcp", m.orch.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_, _ = io.WriteString(c, "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
	}
	// And connections that declared a body of the bound and sent a byte of it: memory
	// follows what came (the whole length was allocated: 450 of them, 1.2 GiB).
	// Three waves, each left before the next: memory used again is zeroed, resident.
	before := peakRSS(t, m.orch.PID())
	for range 3 {
		var wave []net.Conn
		for range 150 {
			c, err := net.Dial("tcp", m.orch.Addr)
			if err != nil {
				t.Fatal(err)
			}
			wave = append(wave, c)
			_, _ = io.WriteString(c, "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 8388608\r\n\r\n{")
		}
		time.Sleep(time.Second)
		for _, c := range wave {
			_ = c.Close()
		}
	}
	if peak := peakRSS(t, m.orch.PID()); peak > 384<<20 {
		t.Errorf("3 x 150 connections that declared 8 MiB and sent a byte: peak RSS %d MiB (before %d MiB), over 384 MiB", peak>>20, before>>20)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/ListWorkers", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if code, body := webDo(t, req); code != http.StatusOK {
		t.Errorf("ListWorkers over Connect while 8 bodies trickle and 520 wait: HTTP %d %.200s; want 200", code, body)
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+mcpAddr+"/mcp", strings.NewReader(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if code, body := webDo(t, req); code != http.StatusOK {
		t.Errorf("MCP initialize while 16 bodies trickle: HTTP %d %.200s; want 200", code, body)
	}
}

// TestWebBodyBounds: a body past its bound sent chunked (its size unknown until it is
// read) was answered 503 unavailable, which clients retry, and one of exactly the bound
// refused; on the MCP endpoint 400. Now 413, in the protocol's form, and the bound
// itself taken. 48 gzip bodies of 8 KiB that decompress to 8 MiB each (every one within
// the bounds) were counted at their compressed size, and took the orchestrator to
// 1.6 GiB; now what they decompress to is counted.
func TestWebBodyBounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, mcpAddr := startMeshWithMCP(ctx, t)
	chunked := func(addr, head string, body []byte) (int, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		go func() {
			_, _ = io.WriteString(c, head)
			for len(body) > 0 {
				n := min(len(body), 1<<20)
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", n, body[:n]); err != nil {
					return
				}
				body = body[n:]
				time.Sleep(10 * time.Millisecond)
			}
			_, _ = io.WriteString(c, "0\r\n\r\n")
		}()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return resp.StatusCode, string(b)
	}
	const limit = 8 << 20
	connect := "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	rest := "POST /v1/runs/x:cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	over := []byte(`{"runId":"` + strings.Repeat("a", limit) + `"}`)
	exact := append(bytes.Repeat([]byte(" "), limit-len(`{"runId":"nope"}`)), `{"runId":"nope"}`...)
	for _, tc := range []struct {
		name, addr, head string
		body             []byte
		code             int
		has              string
	}{
		{"Connect, past the bound", m.orch.Addr, connect, over, http.StatusRequestEntityTooLarge, `"code":"resource_exhausted"`},
		{"REST, past the bound", m.orch.Addr, rest, over, http.StatusRequestEntityTooLarge, `"code":8`},
		{"Connect, the bound", m.orch.Addr, connect, exact, http.StatusNotFound, `no such run`},
		{"MCP, past the bound", mcpAddr, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", over[:5<<20], http.StatusRequestEntityTooLarge, "4194304"},
	} {
		if code, body := chunked(tc.addr, tc.head, tc.body); code != tc.code || !strings.Contains(body, tc.has) {
			t.Errorf("%s, chunked: HTTP %d %.200s; want %d with %s", tc.name, code, body, tc.code, tc.has)
		}
	}
	// A body whose chunks are malformed is the client's error (it was 499 canceled).
	for _, head := range []string{connect, rest} {
		c, err := net.Dial("tcp", m.orch.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, head+"2\r\n{}\r\nzz\r\n")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		_ = resp.Body.Close()
		_ = c.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "chunk") {
			t.Errorf("a malformed chunked body: HTTP %d %.200s; want 400 naming the chunk", resp.StatusCode, b)
		}
	}
	webStreamsRefused(ctx, t, m.orch.Addr)
	webEmptyAndTextBodies(ctx, t, m.orch.Addr)
	// A gzip body the transcoder cannot read is the client's error, not a failure to read.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/GetRun", strings.NewReader("not gzip at all"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Content-Encoding", "gzip")
	if code, body := webDo(t, req); code != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") {
		t.Errorf("a body that is not gzip, sent as gzip: HTTP %d %.200s; want 400 invalid_argument", code, body)
	}

	webDecompressionBounded(ctx, t, m, limit)
}

// webStreamsRefused: a stream's request past the bound is refused as each protocol
// refuses, gRPC-Web in its headers, Connect's stream as its end (both got Connect's unary
// JSON, which their clients cannot read); a compressed one is read.
func webStreamsRefused(ctx context.Context, t *testing.T, addr string) {
	// Refused as each protocol refuses: gRPC-Web in its headers, Connect's stream as its
	// end (both got Connect's unary JSON, which their clients cannot read).
	for _, opt := range []struct {
		name string
		o    []connectrpc.ClientOption
	}{{"gRPC-Web", []connectrpc.ClientOption{connectrpc.WithGRPCWeb()}}, {"Connect", []connectrpc.ClientOption{connectrpc.WithProtoJSON()}}} {
		cl := connectrpc.NewClient[toolpb.WatchRunRequest, toolpb.RunResponse](http.DefaultClient, "http://"+addr+"/toolmesh.v1.OrchestratorService/WatchRun", opt.o...)
		st, err := cl.CallServerStream(ctx, connectrpc.NewRequest(&toolpb.WatchRunRequest{RunId: strings.Repeat("a", 9_000_000)}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
		}
		if connectrpc.CodeOf(err) != connectrpc.CodeResourceExhausted {
			t.Errorf("%s, a request past the bound: %v; want resource_exhausted", opt.name, err)
		}
		// Compressed, a stream's request is read (the gate decompresses it).
		cl = connectrpc.NewClient[toolpb.WatchRunRequest, toolpb.RunResponse](http.DefaultClient, "http://"+addr+"/toolmesh.v1.OrchestratorService/WatchRun", append(opt.o, connectrpc.WithSendGzip(), connectrpc.WithCompressMinBytes(1))...)
		st, err = cl.CallServerStream(ctx, connectrpc.NewRequest(&toolpb.WatchRunRequest{RunId: "no-such-run-" + strings.Repeat("z", 100)}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
		}
		if connectrpc.CodeOf(err) != connectrpc.CodeNotFound {
			t.Errorf("%s, a compressed request: %v; want not_found (the request read)", opt.name, err)
		}
	}
}

// webDecompressionBounded: bodies of 8 KiB that decompress to 8 MiB each, 96 of them, 48
// at a time, hold the orchestrator's memory to its bound.
func webDecompressionBounded(ctx context.Context, t *testing.T, m *mesh, limit int) {
	// Bodies of 8 KiB that decompress to 8 MiB each, 96 of them, 48 at a time: a unary
	// call's (Content-Encoding, once and twice: the transcoder decompressed the second
	// itself) and a stream's message (Connect-Content-Encoding).
	zip := func(b string) []byte {
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		_, _ = zw.Write([]byte(b))
		_ = zw.Close()
		return z.Bytes()
	}
	unary := zip(`{"runId":"` + strings.Repeat("a", limit-20) + `"}`)
	msg := zip(`{"prompt":"` + strings.Repeat("a", limit-20) + `"}`)
	envelope := append(binary.BigEndian.AppendUint32([]byte{1}, uint32(len(msg))), msg...)
	for _, mode := range []string{"Content-Encoding", "Content-Encoding twice", "Connect-Content-Encoding"} {
		newReq := func() *http.Request {
			if mode == "Connect-Content-Encoding" {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/Run", bytes.NewReader(envelope))
				req.Header.Set("Content-Type", "application/connect+json")
				req.Header.Set("Connect-Protocol-Version", "1")
				req.Header.Set("Connect-Content-Encoding", "gzip")
				return req
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/GetRun", bytes.NewReader(unary))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Add("Content-Encoding", "gzip")
			if mode == "Content-Encoding twice" {
				req.Header.Add("Content-Encoding", "gzip")
			}
			return req
		}
		before := peakRSS(t, m.orch.PID())
		var wg sync.WaitGroup
		for range 48 {
			wg.Go(func() {
				for range 2 {
					webDo(t, newReq())
				}
			})
		}
		wg.Wait()
		if peak := peakRSS(t, m.orch.PID()); peak > 384<<20 {
			t.Errorf("%s: 96 bodies of %d KiB that decompress to 8 MiB: peak RSS %d MiB (before %d MiB), over 384 MiB", mode, len(unary)>>10, peak>>20, before>>20)
		} else {
			t.Logf("%s: 96 bodies of %d KiB that decompress to 8 MiB: peak RSS %d MiB (before %d MiB)", mode, len(unary)>>10, peak>>20, before>>20)
		}
	}
}

// TestWebSmallestBudget: with the smallest budget the configuration allows, a body of the
// bound itself (or a compressed message that decompresses to nearly it) was refused 503
// every time with nothing else in flight (the last chunk took one byte more than the
// bound; a stream's message counted as it came and as it decompressed); and a request
// that finds the budget spent is refused 503 with Retry-After, on the MCP endpoint too
// (it was 400 "failed to read body", which blames the client).
func TestWebSmallestBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, mcpAddr := startMeshWithMCP(ctx, t, "server: {max_receive_bytes: 2097152, max_inflight_receive_bytes: 2097152}")
	const limit = 4 << 20
	pad := func(size int, tail string) []byte {
		return append(bytes.Repeat([]byte(" "), size-len(tail)), tail...)
	}
	post := func(url, ctype string, body []byte, header ...string) (int, string, http.Header) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return resp.StatusCode, string(b), resp.Header
	}
	getRun := "http://" + m.orch.Addr + "/toolmesh.v1.OrchestratorService/GetRun"
	for _, size := range []int{limit - 28000, limit} {
		if code, body, _ := post(getRun, "application/json", pad(size, `{"runId":"nope"}`)); code != http.StatusNotFound {
			t.Errorf("Connect, a body of %d bytes (the bound %d): HTTP %d %.150s; want 404 no such run", size, limit, code, body)
		}
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(pad(limit-60000, `{"runId":"nope"}`))
	_ = zw.Close()
	envelope := append(binary.BigEndian.AppendUint32([]byte{1}, uint32(z.Len())), z.Bytes()...)
	if _, body, _ := post("http://"+m.orch.Addr+"/toolmesh.v1.OrchestratorService/WatchRun", "application/connect+json", envelope, "Connect-Content-Encoding", "gzip"); !strings.Contains(body, "not_found") {
		t.Errorf("a Connect stream's message that decompresses to nearly the bound: %q; want not_found", body)
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	mcpHead := "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
	// While another client has sent a byte of its body (the MCP endpoint's budget was
	// one body: the other's first chunk kept this one out).
	other, err := net.Dial("tcp", mcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	_, _ = io.WriteString(other, mcpHead+"Content-Length: 100000\r\n\r\n{")
	time.Sleep(300 * time.Millisecond)
	if code, body, _ := post("http://"+mcpAddr+"/mcp", "application/json", pad(limit-1000, initialize)); code != http.StatusOK {
		t.Errorf("MCP, a body of nearly the bound while another comes: HTTP %d %.150s; want 200", code, body)
	}
	_ = other.Close()
	time.Sleep(300 * time.Millisecond)

	// Bodies sent but for their last byte hold the budgets: the port's, two bodies of the
	// bound and four chunks; the MCP endpoint's, two bodies of its bound.
	connectHead := "POST /toolmesh.v1.OrchestratorService/GetRun HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\n"
	for _, to := range []struct {
		addr, head string
		size       int
	}{
		{m.orch.Addr, connectHead, limit},
		{m.orch.Addr, connectHead, limit},
		{m.orch.Addr, connectHead, 128 << 10},
		{mcpAddr, mcpHead, limit},
		{mcpAddr, mcpHead, limit},
	} {
		c, err := net.Dial("tcp", to.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		go func() {
			_, _ = fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", to.head, to.size, bytes.Repeat([]byte(" "), to.size-1))
		}()
	}
	time.Sleep(2 * time.Second) // they fill the budgets exactly: nobody waits for room
	for name, to := range map[string]struct{ url, body string }{"Connect": {"http://" + m.orch.Addr + "/toolmesh.v1.OrchestratorService/ListWorkers", "{}"}, "MCP": {"http://" + mcpAddr + "/mcp", initialize}} {
		if code, body, h := post(to.url, "application/json", []byte(to.body)); code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Errorf("%s, the budget spent: HTTP %d (Retry-After %q) %.150s; want 503 with Retry-After", name, code, h.Get("Retry-After"), body)
		}
	}
}

// webStalledAnswered: each of the requests whose bodies stalled (the gate reads them) is
// answered, by deadline, DEADLINE_EXCEEDED in its protocol.
func webStalledAnswered(t *testing.T, stalled map[string]net.Conn, deadline time.Time) {
	t.Helper()
	for name, c := range stalled {
		_ = c.SetReadDeadline(deadline)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("%s, stalled: no answer: %v", name, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		_ = resp.Body.Close()
		// A stream is refused in its protocol: gRPC-Web in its headers, Connect's as
		// its end (they were UNKNOWN and canceled, as the transcoder read them).
		want := resp.StatusCode == http.StatusGatewayTimeout && strings.Contains(string(b), "stopped coming")
		if strings.HasSuffix(name, "stream") {
			want = resp.Header.Get("Grpc-Status") == "4" || strings.Contains(string(b), `"code":"deadline_exceeded"`)
		}
		if !want {
			t.Errorf("%s, stalled: HTTP %d grpc-status %q %q; want deadline exceeded", name, resp.StatusCode, resp.Header.Get("Grpc-Status"), b)
		}
	}
}

// startMeshWithMCP starts a mesh whose orchestrator serves MCP too, with the config
// lines given, and returns the MCP endpoint's address once it listens.
func startMeshWithMCP(ctx context.Context, t *testing.T, config ...string) (*mesh, string) {
	t.Helper()
	mcpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", append(config, "mcp_serve:\n  listen: "+mcpAddr+"\n")...)
	waitListening(ctx, t, mcpAddr)
	return m, mcpAddr
}

// webEmptyAndTextBodies: an empty body sent as gzip is an empty message (it was 500: the
// gRPC server failed to decompress nothing); gRPC-Web's text form, which the transcoder
// does not serve, is answered so whatever its encoding (its base64 was read as frames, 200
// with an error).
func webEmptyAndTextBodies(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	for _, chunk := range []bool{false, true} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/toolmesh.v1.OrchestratorService/ListRuns", bytes.NewReader(nil))
		if chunk {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader("")), -1
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Content-Encoding", "gzip")
		if code, body := webDo(t, req); code != http.StatusOK {
			t.Errorf("an empty body sent as gzip (chunked %v): HTTP %d %.200s; want 200", chunk, code, body)
		}
	}
	textCode := func(header ...string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/toolmesh.v1.OrchestratorService/ListRuns", strings.NewReader("AAAAAAA="))
		req.Header.Set("Content-Type", "application/grpc-web-text")
		req.Header.Set("X-Grpc-Web", "1")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Grpc-Status")
	}
	if plain, gz := fmt.Sprint(textCode()), fmt.Sprint(textCode("Grpc-Encoding", "gzip")); plain != gz {
		t.Errorf("gRPC-Web text: %s plain, %s with grpc-encoding gzip; want the same answer", plain, gz)
	}
}
