package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// workerStatus returns the registered worker with the given id, if any.
func workerStatus(t *testing.T, c *client.Client, id string) (*toolpb.WorkerStatus, bool) {
	t.Helper()
	ws, err := c.ListWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.GetWorkerId() == id {
			return w, true
		}
	}
	return nil, false
}

// TestLiveWorkerIDIsNotOrphaned: a second process that registers with the id of a live
// worker is refused, keeps retrying, and the real worker keeps its place and its calls,
// while the impostor runs and after it is killed.
func TestLiveWorkerIDIsNotOrphaned(t *testing.T) {
	m := startMesh(t, "onecall.yaml")
	real := m.startWorker("math-x", "math")
	m.waitWorkers("math-x")
	serving, err := real.WaitLog(context.Background(), "worker serving")
	if err != nil {
		t.Fatal(err)
	}
	realAddr, _ := serving["advertise"].(string)

	impostor, err := harness.StartWorker("impostor", "math-x", "math", m.orch.Addr, nil, "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	m.workers["impostor"] = impostor
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := impostor.WaitLine(ctx, func(l string) bool {
		return strings.Contains(l, "orchestrator refused registration") && strings.Contains(l, "still open")
	}); err != nil {
		m.dump()
		t.Fatalf("the impostor was not refused: %v", err)
	}
	// The orchestrator's line may be read after the impostor's: wait for it.
	if _, err := m.orch.WaitLine(ctx, func(l string) bool {
		return strings.Contains(l, `"msg":"registration refused"`) && strings.Contains(l, `"reason":"WORKER_ID_IN_USE"`)
	}); err != nil {
		t.Errorf("the orchestrator did not log the refusal with its reason: %v", err)
	}
	check := func(when string) {
		t.Helper()
		w, ok := workerStatus(t, m.c, "math-x")
		if !ok || w.GetAddress() != realAddr || w.GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Fatalf("%s: math-x = %v, want the real worker at %s, READY", when, w, realAddr)
		}
		evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "go", Tools: []string{"add"}}, nil)
		if err != nil {
			t.Fatalf("%s: run: %v", when, err)
		}
		if f := finished(evs, 1); len(f) != 1 || f[0].GetWorkerId() != "math-x" || f[0].GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
			t.Errorf("%s: call = %v", when, f)
		}
	}
	check("while the impostor retries")
	if err := impostor.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * gracePeriod) // long enough for a wrongly ended lease to be removed
	check("after the impostor was killed")
}

// TestOversizedAndLongResults: results over the limit of a result become error results
// the model reads, without a failover or an ejection, however often it happens; a result
// longer than the model may read is cut, and says so.
func TestOversizedAndLongResults(t *testing.T) {
	m := startMesh(t, "bigresults.yaml")
	m.startWorker("faults-1", "faults")
	m.startWorker("faults-2", "faults")
	m.waitWorkers("faults-1", "faults-2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"faults"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if text := finalText(t, evs); text != "done" {
		t.Errorf("final text %q", text)
	}
	over := finished(evs, 1)
	if len(over) != 3 {
		t.Fatalf("turn 1 finished %d calls, want 3", len(over))
	}
	for _, f := range over {
		if f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR || f.GetAttempts() != 1 || f.GetWorkerId() == "" ||
			!strings.Contains(f.GetContent(), "ran, but its result is") || !strings.Contains(f.GetContent(), "Call it again in a way that returns less") {
			t.Errorf("oversized call = %s on %s after %d attempts: %.200s", f.GetOutcome(), f.GetWorkerId(), f.GetAttempts(), f.GetContent())
		}
	}
	long := finished(evs, 2)
	if len(long) != 1 {
		t.Fatalf("turn 2 finished %d calls, want 1", len(long))
	}
	if c := long[0].GetContent(); len(c) > 32<<10 || !strings.Contains(c, "[truncated: the tool returned 40000 bytes") {
		t.Errorf("long result: %d bytes, ending %q", len(c), c[max(0, len(c)-100):])
	}
	calls := workerCalls(t, m.c)
	if calls["faults-1"]+calls["faults-2"] != 4 {
		t.Errorf("worker calls = %v, want 4 in all: nothing is sent twice", calls)
	}
	for _, id := range []string{"faults-1", "faults-2"} {
		if w, ok := workerStatus(t, m.c, id); !ok || w.GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("%s = %v, want READY", id, w)
		}
	}
}

// TestRegistrationOfAnAddressThatServesAnotherService: a worker that advertises an
// address serving something else (here the orchestrator's own) is refused, says why,
// and never enters the routing table.
func TestRegistrationOfAnAddressThatServesAnotherService(t *testing.T) {
	m := startMesh(t, "")
	w := m.startWorker("math-1", "math", "--advertise", m.orch.Addr, "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := w.WaitLine(ctx, func(l string) bool {
		return strings.Contains(l, "orchestrator refused registration") && strings.Contains(l, "does not serve toolmesh.v1.ToolWorkerService")
	}); err != nil {
		m.dump()
		t.Fatalf("the registration was not refused: %v", err)
	}
	if _, ok := workerStatus(t, m.c, "math-1"); ok {
		t.Error("a worker whose address serves another service is in the routing table")
	}
	if n := m.orch.CountLogs("registration refused", map[string]string{"reason": "WORKER_WRONG_SERVICE"}); n == 0 {
		t.Error("the orchestrator did not log the refusal with its reason")
	}
}

// TestReRegistrationAfterALongOutage: after an orchestrator outage far longer than the
// worker's reconnect cap, the worker is registered within the cap plus a second of the
// orchestrator serving again (gRPC's own reconnect backoff, 120 s at most by default,
// must not be in the way).
func TestReRegistrationAfterALongOutage(t *testing.T) {
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "")
	_ = m.orch.Kill() // to serve on a known address instead
	m.startOrchestrator(addr)
	const capDelay = time.Second
	m.startWorker("math-1", "math", "--reconnect-min", "100ms", "--reconnect-max", capDelay.String())
	m.waitWorkers("math-1")

	if err := m.orch.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(18500 * time.Millisecond) // by now gRPC's default backoff would wait about 10 s
	m.startOrchestrator(addr)
	back := time.Now()
	deadline := back.Add(20 * time.Second)
	for {
		if w, ok := workerStatus(t, m.c, "math-1"); ok && w.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
			break
		}
		if time.Now().After(deadline) {
			m.dump()
			t.Fatal("the worker did not register again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(back)
	t.Logf("re-registered %s after the orchestrator served again (cap %s)", took.Round(time.Millisecond), capDelay)
	if took > capDelay+time.Second {
		t.Errorf("re-registration took %s, want at most %s", took, capDelay+time.Second)
	}
}

// sharedCodec sends one encoded request, the same bytes for every call, so that the
// test can keep hundreds of large requests in flight without holding a copy of each;
// it decodes responses as protobuf does.
type sharedCodec struct{ req []byte }

func (c sharedCodec) Marshal(any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(c.req)}, nil
}

func (sharedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func (sharedCodec) Name() string { return "proto" }

// peakRSS is a process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestMemoryBoundedUnderLargeRequests: 600 concurrent runs with 4 MB prompts (each over
// the 1 MiB bound of a run's text) are refused, as too long or as overloaded, and the
// orchestrator's peak memory stays bounded (without the bound it grew to gigabytes).
func TestMemoryBoundedUnderLargeRequests(t *testing.T) {
	const (
		runs       = 600
		promptSize = 4_000_000
		limit      = 512 << 20
	)
	m := startMesh(t, "")
	before := peakRSS(t, m.orch.PID())
	req, err := proto.Marshal(&toolpb.RunRequest{Prompt: strings.Repeat("x", promptSize)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var conns []*grpc.ClientConn
	for range 8 {
		cc, err := grpc.NewClient(m.orch.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(sharedCodec{req: req})))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		conns = append(conns, cc)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	byCode := map[codes.Code]int{}
	for i := range runs {
		wg.Go(func() {
			c := toolpb.NewOrchestratorServiceClient(conns[i%len(conns)])
			stream, err := c.Run(ctx, &toolpb.RunRequest{})
			if err == nil {
				_, err = stream.Recv()
			}
			mu.Lock()
			byCode[status.Code(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := peakRSS(t, m.orch.PID())
	t.Logf("peak RSS %d MiB before, %d MiB after %d runs of %d-byte prompts; outcomes %v", before>>20, peak>>20, runs, promptSize, byCode)
	if byCode[codes.InvalidArgument]+byCode[codes.ResourceExhausted] != runs {
		t.Errorf("outcomes %v, want every run refused as too long or overloaded", byCode)
	}
	if peak > limit {
		t.Errorf("the orchestrator's peak RSS was %d MiB, over the %d MiB bound", peak>>20, limit>>20)
	}
	if _, err := m.c.ListTools(ctx); err != nil {
		t.Errorf("the orchestrator does not answer after the burst: %v", err)
	}

}

// TestOversizedIdentifiersAreRefused: megabyte identifiers and reasons in every request
// that carries one are refused with INVALID_ARGUMENT naming the field, and none is
// echoed, not in the status, not in the rejections, not in a log line.
func TestOversizedIdentifiersAreRefused(t *testing.T) {
	m := startMesh(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := func(n int) string { return strings.Repeat("a", n) }
	check := func(what string, err error, field string) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != codes.InvalidArgument || !errors.Is(err, client.ErrInvalidRequest) || ce.Field != field {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", what, err, field)
			return
		}
		if len(ce.Message) > 512 {
			t.Errorf("%s: the message is %d bytes: the value was echoed", what, len(ce.Message))
		}
	}
	_, err := m.c.GetRun(ctx, huge(3<<20))
	check("GetRun with a 3 MiB run id", err, "run_id")
	_, err = m.c.CancelRun(ctx, huge(3<<20), "")
	check("CancelRun with a 3 MiB run id", err, "run_id")
	_, err = m.c.CancelRun(ctx, "run_1", huge(2<<20))
	check("CancelRun with a 2 MiB reason", err, "reason")
	_, err = m.run(ctx, &toolpb.RunRequest{Prompt: "hi", RunId: huge(3 << 20)}, nil)
	check("Run with a 3 MiB run id", err, "run_id")
	_, err = m.run(ctx, &toolpb.RunRequest{Prompt: "hi", Llm: &toolpb.LlmOptions{Model: huge(1 << 20)}}, nil)
	check("Run with a 1 MiB model", err, "llm.model")

	// Registrations with a 1 MiB worker id and with a 3 MiB version, over raw streams.
	cc, err := grpc.NewClient(m.orch.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	group := []*toolpb.GroupRegistration{{Group: &toolpb.ToolGroupInfo{Role: "x"}}}
	for _, tc := range []struct {
		reg  *toolpb.Registration
		want string
	}{
		{&toolpb.Registration{WorkerId: huge(1 << 20), Address: "127.0.0.1:1", Groups: group}, "worker_id is 1048576 bytes"},
		{&toolpb.Registration{WorkerId: "w", Version: huge(3 << 20), Address: "127.0.0.1:1", Groups: group}, "version is 3145728 bytes"},
	} {
		stream, err := toolpb.NewToolRegistryServiceClient(cc).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: tc.reg}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rejections := resp.GetAck().GetRejections()
		if resp.GetAck().GetAccepted() || len(rejections) == 0 {
			t.Fatalf("ack = %v, want a refusal", resp.GetAck())
		}
		var reasons []string
		for _, r := range rejections {
			reasons = append(reasons, r.GetReason())
			if len(r.GetReason())+len(r.GetGroup())+len(r.GetTool()) > 512 {
				t.Errorf("a rejection of %d bytes echoes the value", len(r.GetReason()))
			}
		}
		if all := strings.Join(reasons, "; "); !strings.Contains(all, tc.want) {
			t.Errorf("rejections %q do not say %q", all, tc.want)
		}
		_, err = stream.Recv()
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(st.Message()) > 8<<10 {
			t.Errorf("the stream ended with %v (%d bytes of message), want a short INVALID_ARGUMENT", st.Code(), len(st.Message()))
		}
	}
	for _, line := range m.orch.Lines() {
		if len(line) > 8<<10 {
			t.Errorf("the orchestrator logged a line of %d bytes: %.200s", len(line), line)
		}
	}
}
