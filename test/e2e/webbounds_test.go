package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
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
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), "decompresses to more than") {
		t.Errorf("a body of %d KiB that decompresses to 256 MiB: HTTP %d %s; want it refused as it decompresses", bomb.Len()>>10, resp.StatusCode, body)
	}

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
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if n, _ := c.Read(make([]byte, 1)); n > 0 {
			answered++
		}
	}
	peak := peakRSS(t, m.orch.PID())
	t.Logf("peak RSS %d MiB before, %d MiB after; %d of %d stalled bodies answered", before>>20, peak>>20, answered, len(conns))
	if answered != len(conns) {
		t.Errorf("%d of %d requests whose bodies stalled were answered (or closed with an answer) within 45 s; want all", answered, len(conns))
	}
	if peak > limit {
		t.Errorf("the orchestrator's peak RSS was %d MiB, over the %d MiB bound", peak>>20, limit>>20)
	}
}

// TestWebReadsALargeAnswer: a run that ended with an answer of 3 MiB, whose JSON (its
// quotes and newlines escaped) is larger than server.max_receive_bytes, is read over REST
// and Connect JSON as over gRPC: the transcoder's bound on a message, which was the
// receive bound, applied to responses as well and answered 429.
func TestWebReadsALargeAnswer(t *testing.T) {
	text := strings.Repeat(`{"k":"v","x":"y"}`+"\n", 3<<20/18)
	script := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(script, []byte("name: big\nrules:\n  - name: answer\n    when: {turn: 1}\n    reply:\n      text: "+strconv.Quote(text)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", "provider: {name: scripted, script: "+strconv.Quote(script)+"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := m.run(ctx, &toolpb.RunRequest{Prompt: "big", RunId: "big-1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/runs/big-1", ""},
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/GetRun", `{"runId":"big-1"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, "http://"+m.orch.Addr+tc.path, strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
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
