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
