package orchestrator_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/orchestrator"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestShutdownEndsWebStreamsWithTheirStatus: runs streamed over HTTP/1.1 (Connect) when
// the orchestrator shuts down end with the status their handler returns (the run stopped
// by the shutdown: unavailable), as they do over gRPC. The gRPC server's stop closed the
// transcoder's streams at once, so that one ending just then lost its status: the
// client read "protocol error: missing trailer header Grpc-Status", an internal error.
// Their WatchRun streams end too, with SHUTTING_DOWN and the sequence to watch again
// after: they waited for more records of runs the shutdown left unfinished until the
// stop cut them, with that same internal error.
func TestShutdownEndsWebStreamsWithTheirStatus(t *testing.T) {
	const streams = 24
	script := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(script, []byte("name: slow\nrules:\n  - reply:\n      delay: 1h\n      text: late\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Provider.Script = script
	cfg.Loop.RunTimeout = config.Duration(2 * time.Hour)
	o, ctx, stop := serving(t, orchestrator.Options{Config: cfg, Logger: quiet(), ShutdownTimeout: 100 * time.Millisecond})

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ends := make([]string, streams)
	var started, ended sync.WaitGroup
	base := "http://" + o.Addr().String()
	for i := range streams {
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			ends[i] = webStreamEnd(ctx, hc, base, "Run", &toolpb.RunRequest{RunId: fmt.Sprintf("web-%d", i), Prompt: "wait"}, started.Done)
		}()
	}
	started.Wait() // every run has started: its first event came
	watchEnds := make([]string, streams)
	for i := range streams {
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			watchEnds[i] = webStreamEnd(ctx, hc, base, "WatchRun", &toolpb.WatchRunRequest{RunId: fmt.Sprintf("web-%d", i)}, started.Done)
		}()
	}
	started.Wait() // every watch has its first event
	stop()
	ended.Wait()
	for i, end := range ends {
		if !strings.Contains(end, `"code":"unavailable"`) {
			t.Errorf("stream %d ended with %s; want its run's status, unavailable (shutting down)", i, end)
		}
	}
	for i, end := range watchEnds {
		if !strings.Contains(end, `"code":"unavailable"`) || !strings.Contains(end, "watch the run again after sequence") {
			t.Errorf("watch %d ended with %s; want unavailable (shutting down), naming the sequence to watch again after", i, end)
		}
	}
}

// webStreamEnd calls a server-streaming method of OrchestratorService over Connect (JSON
// envelopes) on base, calls started once its first event came, and returns its
// end-of-stream message, or what broke the stream.
func webStreamEnd(ctx context.Context, hc *http.Client, base, method string, m proto.Message, started func()) string {
	once := sync.OnceFunc(started)
	defer once()
	msg, _ := protojson.Marshal(m)
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/toolmesh.v1.OrchestratorService/"+method, strings.NewReader(string(append(body, msg...))))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(req)
	if err != nil {
		return "request: " + err.Error()
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return "stream broke: " + err.Error()
		}
		m := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, m); err != nil {
			return "stream broke: " + err.Error()
		}
		if head[0]&2 != 0 {
			var end json.RawMessage = m
			return string(end)
		}
		once()
	}
}
