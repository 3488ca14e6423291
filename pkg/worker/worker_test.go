package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/logtest"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestNewValidates(t *testing.T) {
	opts := Options{Orchestrator: "127.0.0.1:7070"}
	tests := []struct {
		name   string
		opts   Options
		groups []Group
		want   error
		reason string
	}{
		{"no orchestrator", Options{}, []Group{group(echo())}, ErrNoOrchestrator, ""},
		{"no groups", opts, nil, ErrInvalidGroup, "no groups"},
		{"bad role", opts, []Group{{Role: "a b", Tools: []tool.Tool{echo()}}}, ErrInvalidGroup, "role"},
		{"empty role", opts, []Group{{Tools: []tool.Tool{echo()}}}, ErrInvalidGroup, "role"},
		{"role twice", opts, []Group{group(echo()), {Role: "text", Tools: []tool.Tool{tool.WithName(echo(), "echo2")}}}, ErrInvalidGroup, "given twice"},
		{"group without tools", opts, []Group{{Role: "text"}}, ErrInvalidGroup, "no tools"},
		{"tool twice", opts, []Group{group(echo()), {Role: "more", Tools: []tool.Tool{echo()}}}, ErrInvalidGroup, `tool "echo" given twice`},
		{"negative capacity", Options{Orchestrator: "x:1", Capacity: -1}, []Group{group(echo())}, nil, "capacity"},
		{"plaintext on all interfaces", Options{Orchestrator: "x:1", Listen: ":7171"}, []Group{group(echo())}, nil, "not a loopback address"},
		{"plaintext on a pod address", Options{Orchestrator: "x:1", Listen: "10.1.2.3:7171"}, []Group{group(echo())}, nil, "Plaintext"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(tc.opts, tc.groups...)
			if err == nil || w != nil {
				t.Fatalf("New = %v, %v; want an error", w, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err %q does not mention %q", err, tc.reason)
			}
		})
	}
}

// TestNewServesPlaintextOnlyWhereTold: without TLS a worker listens on loopback, or
// anywhere once Plaintext says it is meant.
func TestNewServesPlaintextOnlyWhereTold(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		if _, err := New(Options{Orchestrator: "x:1", Listen: listen}, group(echo())); err != nil {
			t.Errorf("Listen %s without TLS: %v", listen, err)
		}
	}
	if _, err := New(Options{Orchestrator: "x:1", Listen: ":0", Plaintext: true}, group(echo())); err != nil {
		t.Errorf("Listen :0 with Plaintext: %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	w, err := New(Options{Orchestrator: "127.0.0.1:7070"}, group(echo()))
	if err != nil {
		t.Fatal(err)
	}
	if w.ID() == "" || w.opts.Listen != "127.0.0.1:0" || w.opts.DrainTimeout != 20*time.Second ||
		w.opts.MinBackoff != 100*time.Millisecond || w.opts.MaxBackoff != 5*time.Second {
		t.Errorf("defaults: id %q %+v", w.ID(), w.opts)
	}
	other, _ := New(Options{Orchestrator: "127.0.0.1:7070"}, group(echo()))
	if other.ID() == w.ID() {
		t.Errorf("two workers got the same default id %q", w.ID())
	}
}

func TestBackoffStaysWithinBoundsAndGrowsToMax(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 5 * time.Second
	for failures := range 12 {
		d := min(lo<<failures, hi)
		var seenLow, seenHigh bool
		for range 2000 {
			got := backoff(failures, lo, hi)
			if got < d/2 || got > d {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", failures, got, d/2, d)
			}
			seenLow = seenLow || got < d/2+d/8
			seenHigh = seenHigh || got > d-d/8
		}
		if !seenLow || !seenHigh {
			t.Errorf("backoff(%d) is not jittered across [%s, %s]", failures, d/2, d)
		}
	}
	for _, failures := range []int{6, 7, 50, 1000} {
		if got := backoff(failures, lo, hi); got < hi/2 || got > hi {
			t.Errorf("backoff(%d) = %s, want capped at %s", failures, got, hi)
		}
	}
	// A huge maximum must not overflow into zero or negative delays.
	const huge = time.Duration(1<<63 - 1)
	for _, failures := range []int{62, 63, 64, 100} {
		if got := backoff(failures, time.Nanosecond, huge); got < huge/4 {
			t.Errorf("backoff(%d, 1ns, max) = %s: overflowed", failures, got)
		}
	}
	if got := backoff(3, time.Second, time.Second); got < time.Second/2 || got > time.Second {
		t.Errorf("backoff with min == max = %s", got)
	}
}

func TestRegistersAndHeartbeats(t *testing.T) {
	reg := startRegistry(t, 10*time.Millisecond)
	add := tool.New("add", "Adds.", schema.Params(schema.Integer("a", "a"), schema.Integer("b", "b")),
		func(context.Context, string) (tool.Result, error) { return tool.Text("3"), nil }, tool.Idempotent(), tool.Timeout(time.Second))
	w := start(t, Options{ID: "w1", Orchestrator: reg.addr, Capacity: 3, Version: "v9"},
		Group{Role: "math", Description: "Math", UsageNotes: "Add things.", Version: "1", Permissions: []Permission{InternetAccess}, Tools: []tool.Tool{echo(), add}})

	eventually(t, "registration", func() bool { ok, _ := w.Registered(); return ok })
	eventually(t, "three heartbeats", func() bool { _, hb, _ := reg.counts(); return hb >= 3 })

	reg.mu.Lock()
	got := reg.regs[0]
	reg.mu.Unlock()
	addr, _ := w.Addr(testContext(t))
	want := &toolpb.Registration{
		WorkerId: "w1", Address: addr.String(), Capacity: 3, Version: "v9",
		Groups: []*toolpb.GroupRegistration{{
			Group: &toolpb.ToolGroupInfo{Role: "math", Description: "Math", UsageNotes: "Add things.", Version: "1", Permissions: []toolpb.Permission{InternetAccess}},
			Tools: []*toolpb.RegisteredTool{ // sorted by name
				{Definition: wire.DefinitionToProto(add.Definition(), add.Metadata()), ContentHash: wire.Hash(add.Definition(), add.Metadata())},
				{Definition: wire.DefinitionToProto(echo().Definition(), echo().Metadata()), ContentHash: wire.Hash(echo().Definition(), echo().Metadata())},
			},
		}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("registration (-want +got):\n%s", diff)
	}
}

func TestHeartbeatReportsCallsInFlight(t *testing.T) {
	ctx := testContext(t)
	reg := startRegistry(t, 5*time.Millisecond)
	started, release := newGate(), newGate()
	slow := tool.New("slow", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		started.open()
		return tool.Text("done"), release.wait(ctx)
	})
	w := start(t, Options{Orchestrator: reg.addr}, group(slow))
	go func() { _, _ = w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`}) }()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a heartbeat reporting the call", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.heartbeats) > 0 && reg.heartbeats[len(reg.heartbeats)-1] == 1
	})
	release.open()
}

func TestDrainWaitsForCallsInFlightAndRefusesNewOnes(t *testing.T) {
	ctx := testContext(t)
	reg := startRegistry(t, time.Hour)
	started, release := newGate(), newGate()
	var runs atomic.Int32
	slow := tool.New("slow", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		runs.Add(1)
		started.open()
		if err := release.wait(ctx); err != nil {
			return tool.Result{}, err
		}
		return tool.Text("finished"), nil
	})
	w := start(t, Options{Orchestrator: reg.addr}, group(slow))
	eventually(t, "registration", func() bool { ok, _ := w.Registered(); return ok })

	held := make(chan *toolpb.InvokeResponse, 1)
	go func() {
		resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
		if err != nil {
			t.Errorf("held call: %v", err)
		}
		held <- resp
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.stop()

	eventually(t, "NOT_SERVING", func() bool {
		for _, svc := range []string{"", toolpb.ToolWorkerService_ServiceDesc.ServiceName} {
			resp, err := w.health().Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				return false
			}
		}
		return true
	})
	eventually(t, "the orchestrator to hear about the drain", func() bool { _, _, d := reg.counts(); return d == 1 })

	_, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
	if !isDraining(err) {
		t.Errorf("new call during drain: err = %v, want UNAVAILABLE with reason %s", err, wire.ReasonName(toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING))
	}
	select {
	case err := <-w.done:
		t.Fatalf("Run returned (%v) with a call in flight", err)
	default:
	}

	release.open()
	if resp := <-held; resp.GetText() != "finished" {
		t.Errorf("held call = %v", resp)
	}
	if err := w.wait(t); err != nil {
		t.Errorf("Run = %v after a clean drain", err)
	}
	if runs.Load() != 1 {
		t.Errorf("tool ran %d times, want 1", runs.Load())
	}
}

// A draining worker goes on sending heartbeats, the calls it still runs counted, until
// it leaves: its lease must outlive them. It stopped once it had sent Draining, and the
// orchestrator, once the lease expired, probed it, found it NOT_SERVING (it drains) and
// failed the calls it was finishing.
func TestDrainKeepsTheLeaseAlive(t *testing.T) {
	ctx := testContext(t)
	reg := startRegistry(t, 5*time.Millisecond)
	started, release := newGate(), newGate()
	slow := tool.New("slow", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		started.open()
		return tool.Text("finished"), release.wait(ctx)
	})
	w := start(t, Options{Orchestrator: reg.addr}, group(slow))
	held := make(chan error, 1)
	go func() {
		_, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
		held <- err
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.stop()
	eventually(t, "the orchestrator to hear about the drain", func() bool { _, _, d := reg.counts(); return d == 1 })
	_, before, _ := reg.counts()
	eventually(t, "heartbeats during the drain, reporting the call", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.heartbeats) >= before+3 && reg.heartbeats[len(reg.heartbeats)-1] == 1
	})
	release.open()
	if err := <-held; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	if err := w.wait(t); err != nil {
		t.Errorf("Run = %v after a clean drain", err)
	}
}

// Calls keep arriving while the worker drains: each is either answered or refused as
// draining, none is lost, and Run ends cleanly.
func TestDrainUnderLoad(t *testing.T) {
	ctx := testContext(t)
	w := start(t, Options{}, group(echo()))
	var answered, refused atomic.Int32
	stopCalls := make(chan struct{})
	callers := make(chan struct{})
	go func() {
		defer close(callers)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stopCalls:
						return
					default:
					}
					resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{"text":"x"}`})
					switch {
					case err == nil && resp.GetText() != "":
						answered.Add(1)
					case isDraining(err):
						refused.Add(1)
					case status.Code(err) == codes.Unavailable:
						return // the server has stopped
					default:
						t.Errorf("call during drain: %v, %v", resp, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}()
	eventually(t, "some calls", func() bool { return answered.Load() > 20 })
	w.stop()
	if err := w.wait(t); err != nil {
		t.Errorf("Run = %v", err)
	}
	close(stopCalls)
	<-callers
}

func TestOrchestratorDrainRequestEndsRun(t *testing.T) {
	reg := startRegistry(t, time.Hour)
	w := start(t, Options{Orchestrator: reg.addr}, group(echo()))
	eventually(t, "registration", func() bool { ok, _ := w.Registered(); return ok })
	close(reg.drain)
	if err := w.wait(t); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestInvokeOutcomes(t *testing.T) {
	ctx := testContext(t)
	fails := tool.New("fails", "Fails.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, errors.New("disk full")
	})
	panicsInFunc := tool.New("panics", "Panics.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		panic("boom")
	})
	who := tool.New("who", "Tells who called.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		info, _ := tool.CallInfoFrom(ctx)
		return tool.Text(info.RunID + "/" + info.LoopID + "/" + info.CallID), nil
	})
	artifact := tool.New("artifact", "Returns a value.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.ArtifactResult("here", tool.Artifact{TypeName: "Point", Value: map[string]int{"x": 1}}), nil
	})
	unsendable := tool.New("unsendable", "Returns what cannot be encoded.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.ArtifactResult("here", tool.Artifact{TypeName: "Chan", Value: make(chan int)}), nil
	})
	badText := tool.New("bad_text", "Returns text that is not UTF-8.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text("caf\xe9"), nil
	})
	badError := tool.New("bad_error", "Fails with a message that is not UTF-8.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, errors.New("no such file: \xff.txt")
	})
	badArtifact := tool.New("bad_artifact", "Returns an artifact named in bytes that are not UTF-8.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.ArtifactResult("here", tool.Artifact{TypeName: "P\xffoint", Value: 1}), nil
	})
	huge := tool.New("huge", "Returns 5 MiB.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text(strings.Repeat("x", 5<<20)), nil
	})
	w := start(t, Options{ID: "w1"}, group(echo(), fails, panicsInFunc, panicky{}, who, artifact, unsendable, badText, badError, badArtifact, huge))

	tests := []struct {
		name string
		req  *toolpb.InvokeRequest
		want *toolpb.InvokeResponse
		// fragment of the error message, when the outcome is an error
		fragment string
	}{
		{"text", &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{"text":"hi"}`},
			&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: `{"text":"hi"}`}}, ""},
		{"arguments not JSON", &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), "invalid arguments for tool 'echo'"},
		{"arguments against the schema", &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{"text":3}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), "invalid arguments for tool 'echo'"},
		{"missing argument", &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), "text"},
		{"returned error", &toolpb.InvokeRequest{Tool: "fails", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED), "disk full"},
		{"panic in a function tool", &toolpb.InvokeRequest{Tool: "panics", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_PANIC), "boom"},
		{"panic in a tool type", &toolpb.InvokeRequest{Tool: "panicky", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_PANIC), "tool 'panicky' panicked: kaboom"},
		{"call info reaches the tool", &toolpb.InvokeRequest{Tool: "who", ArgumentsJson: `{}`, RunId: "r", LoopId: "l", CallId: "c"},
			&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "r/l/c"}}, ""},
		{"artifact", &toolpb.InvokeRequest{Tool: "artifact", ArgumentsJson: `{}`},
			&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Artifact{Artifact: &toolpb.ArtifactResult{
				Content: "here", Artifact: &toolpb.Artifact{TypeName: "Point", Payload: &toolpb.Artifact_Json{Json: `{"x":1}`}},
			}}}, ""},
		{"result that cannot be sent", &toolpb.InvokeRequest{Tool: "unsendable", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED), "cannot be sent"},
		// Protocol buffers' strings are UTF-8 (a bare INTERNAL status would read as a worker
		// that failed, to be ejected, and an idempotent call would be sent again): a
		// result's text is repaired, each bad byte a U+FFFD, as the orchestrator repairs an
		// in-process tool's; so is an error's message, which says what failed.
		{"text that is not UTF-8", &toolpb.InvokeRequest{Tool: "bad_text", ArgumentsJson: `{}`},
			&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "caf\uFFFD"}}, ""},
		{"an error message that is not UTF-8", &toolpb.InvokeRequest{Tool: "bad_error", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED), "no such file: \uFFFD.txt"},
		// What is not text for the model is not repaired: the call says it cannot be sent.
		{"an artifact's type that is not UTF-8", &toolpb.InvokeRequest{Tool: "bad_artifact", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED), "tool 'bad_artifact' returned a result that cannot be sent: artifact.artifact.type_name: not valid UTF-8"},
		// Bounded on this side: the orchestrator would refuse a 5 MiB message.
		{"result over the size limit", &toolpb.InvokeRequest{Tool: "huge", ArgumentsJson: `{}`},
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED), "ran, but its result is 5242885 bytes, over the 4128768 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := w.client().Invoke(ctx, tc.req)
			if err != nil {
				t.Fatalf("Invoke: gRPC error %v; outcomes must come back as responses", err)
			}
			if tc.fragment != "" {
				if !strings.Contains(resp.GetError().GetMessage(), tc.fragment) {
					t.Errorf("message %q does not mention %q", resp.GetError().GetMessage(), tc.fragment)
				}
				resp.GetError().Message = ""
			}
			if diff := cmp.Diff(tc.want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}

	// A tool the worker does not serve did not run: a gRPC refusal the orchestrator
	// fails over on, not a result.
	_, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "nope", ArgumentsJson: `{}`})
	if r, _, _, ok := wire.StatusReason(status.Convert(err)); status.Code(err) != codes.NotFound || !ok || r != toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL ||
		!strings.Contains(status.Convert(err).Message(), "tool 'nope' is not served by worker w1") {
		t.Errorf("Invoke of an unserved tool = %v, want NOT_FOUND with reason UNKNOWN_TOOL", err)
	}
}

func errorResponse(code toolpb.ToolErrorCode) *toolpb.InvokeResponse {
	return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{Code: code}}}
}

// panicky is a tool type of its own (not tool.New) whose Call panics: the SDK must catch it.
type panicky struct{}

func (panicky) Definition() tool.Definition {
	return tool.Definition{Name: "panicky", Description: "Panics."}
}
func (panicky) Metadata() tool.Metadata { return tool.Metadata{} }
func (panicky) Call(context.Context, string) (tool.Result, error) {
	panic("kaboom")
}

func TestCapacityBoundsConcurrency(t *testing.T) {
	ctx := testContext(t)
	var running, peak, started atomic.Int32
	release := newGate()
	slow := tool.New("slow", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		started.Add(1)
		return tool.Text("done"), release.wait(ctx)
	})
	w := start(t, Options{Capacity: 2}, group(slow))

	results := make(chan error, 4)
	for range 4 {
		go func() {
			resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
			if err == nil && resp.GetText() != "done" {
				err = errors.New("unexpected response " + resp.String())
			}
			results <- err
		}()
	}
	eventually(t, "four calls at the worker, two running", func() bool { return w.callsInFlight() == 4 && started.Load() == 2 })
	if got := w.active.Load(); got != 2 {
		t.Errorf("active = %d, want 2", got)
	}
	release.open()
	for range 4 {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	if peak.Load() != 2 || started.Load() != 4 {
		t.Errorf("peak concurrency %d, started %d; want 2 and 4", peak.Load(), started.Load())
	}
}

// A call waiting for a free slot when the drain starts never ran: it is refused as
// draining, so that the orchestrator can send it elsewhere.
func TestDrainRefusesCallsWaitingForASlot(t *testing.T) {
	ctx := testContext(t)
	started, release := newGate(), newGate()
	var runs atomic.Int32
	slow := tool.New("slow", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		runs.Add(1)
		started.open()
		return tool.Text("done"), release.wait(ctx)
	})
	w := start(t, Options{Capacity: 1}, group(slow))
	first := make(chan error, 1)
	go func() {
		_, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
		first <- err
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "slow", ArgumentsJson: `{}`})
		second <- err
	}()
	eventually(t, "the second call to wait for a slot", func() bool { return w.callsInFlight() == 2 })
	w.stop()
	if err := <-second; !isDraining(err) {
		t.Errorf("waiting call: err = %v, want draining", err)
	}
	release.open()
	if err := <-first; err != nil {
		t.Errorf("running call: %v", err)
	}
	if err := w.wait(t); err != nil {
		t.Errorf("Run = %v", err)
	}
	if runs.Load() != 1 {
		t.Errorf("tool ran %d times", runs.Load())
	}
}

// TestIdleDrainTellsTheOrchestrator: a worker with nothing in flight still sends its
// Draining message before its registration stream goes away, so the orchestrator drops it
// at once rather than after the grace period. (Drain waits for the message to leave; the
// loop repeats the check because losing it was a matter of scheduling.)
func TestIdleDrainTellsTheOrchestrator(t *testing.T) {
	for i := range 5 { // the race this guards against is a matter of scheduling: try a few times
		reg := startRegistry(t, time.Hour)
		w := start(t, Options{ID: fmt.Sprintf("idle-%d", i), Orchestrator: reg.addr}, group(echo()))
		eventually(t, "registration", func() bool { ok, _ := w.Registered(); return ok })
		w.stop()
		if err := w.wait(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		eventually(t, "the draining message", func() bool { _, _, d := reg.counts(); return d == 1 })
	}
}

// TestRefusalRetryDelayIsHonoured: a registration refused with a RetryInfo (a worker id
// still held by an open stream, say) is tried again after that delay, not at the
// backoff's shortest, and never later than the backoff's cap.
func TestRefusalRetryDelayIsHonoured(t *testing.T) {
	reg := startRegistry(t, time.Second)
	reg.mu.Lock()
	reg.refuse = wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE, Message: "in use", RetryAfter: 300 * time.Millisecond}.Err()
	reg.mu.Unlock()
	w := start(t, Options{Orchestrator: reg.addr, MinBackoff: 5 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}, group(echo()))
	eventually(t, "three attempts", func() bool { n, _, _ := reg.counts(); return n >= 3 })
	w.stop()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for i := 1; i < len(reg.times); i++ {
		if gap := reg.times[i].Sub(reg.times[i-1]); gap < 250*time.Millisecond {
			t.Errorf("attempt %d came %s after the previous one, want about the 300ms the refusal asked for", i+1, gap)
		}
	}
}

// TestRunTwice: a Worker runs once; a second Run returns ErrAlreadyRun instead of
// panicking or serving twice, while the first goes on.
func TestRunTwice(t *testing.T) {
	w := start(t, Options{}, group(echo()))
	if err := w.Run(testContext(t)); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("second Run = %v, want ErrAlreadyRun", err)
	}
	resp, err := w.client().Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: `{"text":"still"}`})
	if err != nil || resp.GetText() == "" {
		t.Errorf("the first Run stopped serving: %v, %v", resp, err)
	}
	reg := w.Registration()
	if reg.GetWorkerId() != w.ID() || len(reg.GetGroups()) != 1 || reg.GetAddress() == "" {
		t.Errorf("Registration() = %v", reg)
	}
}

// TestUnreachableOrchestratorIsSaid: a worker whose orchestrator cannot be reached (a
// wrong address, an orchestrator that is down) says so in its log, and keeps trying.
func TestUnreachableOrchestratorIsSaid(t *testing.T) {
	var buf logtest.Buffer
	start(t, Options{Orchestrator: deadAddress(t), Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, group(echo()))
	eventually(t, "the notice", func() bool { return strings.Contains(buf.String(), "cannot reach the orchestrator; still trying") })
}

// TestAdmitRefusesACallerGone: a call whose caller has left is never admitted, with a
// slot free or without a bound: a select between a free slot and the caller's end took
// either, and about half the calls whose caller had left ran.
func TestAdmitRefusesACallerGone(t *testing.T) {
	for _, capacity := range []int32{0, 1} {
		w, err := New(Options{ID: "w", Orchestrator: "127.0.0.1:1", Capacity: capacity}, group(tool.New("t", "T.", schema.Empty(),
			func(context.Context, string) (tool.Result, error) { return tool.Text("ran"), nil })))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(testContext(t))
		cancel()
		admitted := 0
		for range 200 {
			if release, err := w.admit(ctx); err == nil {
				admitted++
				release()
			} else if status.Code(err) != codes.Canceled {
				t.Fatalf("capacity %d: %v, want CANCELED", capacity, err)
			}
		}
		if admitted > 0 || w.active.Load() != 0 {
			t.Errorf("capacity %d: %d of 200 calls whose caller had left were admitted (%d active)", capacity, admitted, w.active.Load())
		}
	}
}
