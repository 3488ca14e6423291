package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"testing/synctest"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// fakeConnect is a registration stream served in memory, so that lease timing can run
// on synctest's clock.
type fakeConnect struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *toolpb.ConnectRequest
	out chan *toolpb.ConnectResponse
}

func newFakeConnect(ctx context.Context) *fakeConnect {
	return &fakeConnect{ctx: ctx, in: make(chan *toolpb.ConnectRequest), out: make(chan *toolpb.ConnectResponse, 16)}
}

func (f *fakeConnect) Context() context.Context             { return f.ctx }
func (f *fakeConnect) SetHeader(metadata.MD) error          { return nil }
func (f *fakeConnect) SendHeader(metadata.MD) error         { return nil }
func (f *fakeConnect) SetTrailer(metadata.MD)               {}
func (f *fakeConnect) Send(m *toolpb.ConnectResponse) error { f.out <- m; return nil }
func (f *fakeConnect) Recv() (*toolpb.ConnectRequest, error) {
	select {
	case m, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

// newLeaseServer returns a Server whose router never dials (registry-only tests).
func newLeaseServer(t *testing.T, cfg config.Config) (*Server, *router.Router) {
	t.Helper()
	model, err := scripted.New(echoScript())
	if err != nil {
		t.Fatal(err)
	}
	rt := router.New(router.Options{
		GracePeriod: cfg.Registry.GracePeriod.D(), Logger: discard(),
		Dial:  func(string) (*grpc.ClientConn, error) { return nil, nil },
		Probe: func(context.Context, *grpc.ClientConn) error { return nil },
	})
	srv, err := newServer(compose.Options{Router: rt, Provider: model, Config: cfg, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	return srv, rt
}

// serveConnect runs Connect on a fake stream; like gRPC, it ends the stream's context
// when the handler returns.
func serveConnect(srv *Server) (*fakeConnect, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	fs := newFakeConnect(ctx)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- srv.registry.Connect(fs)
	}()
	return fs, done
}

func workerState(rt *router.Router, id string) (toolpb.WorkerState, bool) {
	for _, w := range rt.ListWorkers() {
		if w.GetWorkerId() == id {
			return w.GetState(), true
		}
	}
	return 0, false
}

func TestLeaseExpiresWithoutHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config.Default()
		ttl, grace, beat := cfg.Registry.LeaseTTL.D(), cfg.Registry.GracePeriod.D(), cfg.Registry.HeartbeatInterval.D()
		srv, rt := newLeaseServer(t, cfg)
		defer rt.Close()
		fs, done := serveConnect(srv)

		fs.in <- &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: registration("w1", examplegroups.Math())}}
		ack := (<-fs.out).GetAck()
		if !ack.GetAccepted() || ack.GetLeaseId() == "" || ack.GetHeartbeatInterval().AsDuration() != beat {
			t.Fatalf("ack = %v", ack)
		}

		// Heartbeats keep the lease for much longer than its TTL.
		for range 10 {
			time.Sleep(beat)
			fs.in <- &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Heartbeat{Heartbeat: &toolpb.Heartbeat{InFlight: 1}}}
		}
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("lease ended while heartbeating: %v", err)
		default:
		}

		// Silence: the stream ends exactly one TTL after the last message.
		start := time.Now()
		err := <-done
		if got := time.Since(start); got != ttl {
			t.Errorf("lease ended %v after the last heartbeat, want the TTL %v", got, ttl)
		}
		if codeOf(err) != codes.DeadlineExceeded {
			t.Fatalf("Connect = %v, want DeadlineExceeded", err)
		}

		// The worker takes no calls but keeps its place for the grace period, then leaves.
		if st, ok := workerState(rt, "w1"); !ok || st != toolpb.WorkerState_WORKER_STATE_DISCONNECTED {
			t.Errorf("worker state right after expiry = %v (listed %v), want DISCONNECTED", st, ok)
		}
		time.Sleep(grace - time.Millisecond)
		synctest.Wait()
		if _, ok := workerState(rt, "w1"); !ok {
			t.Error("worker left before the end of the grace period")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if _, ok := workerState(rt, "w1"); ok {
			t.Error("worker still listed after the grace period")
		}
		if _, _, err := rt.Group("math"); !errors.Is(err, router.ErrUnknownGroup) {
			t.Errorf("Group(math) after the worker left = %v, want ErrUnknownGroup", err)
		}
	})
}

func TestLeaseNoRegistrationWithinTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config.Default()
		srv, rt := newLeaseServer(t, cfg)
		defer rt.Close()
		start := time.Now()
		_, done := serveConnect(srv)
		err := <-done
		if codeOf(err) != codes.DeadlineExceeded || time.Since(start) != cfg.Registry.LeaseTTL.D() {
			t.Errorf("Connect = %v after %v, want DeadlineExceeded after %v", err, time.Since(start), cfg.Registry.LeaseTTL.D())
		}
	})
}

func TestLeaseDrainingWorkerLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, rt := newLeaseServer(t, config.Default())
		defer rt.Close()
		fs, done := serveConnect(srv)
		fs.in <- &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: registration("w1", examplegroups.Math())}}
		<-fs.out
		fs.in <- &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Draining{Draining: &toolpb.Draining{Reason: "bye"}}}
		synctest.Wait()
		if st, _ := workerState(rt, "w1"); st != toolpb.WorkerState_WORKER_STATE_DRAINING {
			t.Errorf("state after draining = %v", st)
		}
		close(fs.in) // the worker closes its side
		if err := <-done; err != nil {
			t.Errorf("Connect after the worker closed = %v, want nil", err)
		}
		synctest.Wait()
		if _, ok := workerState(rt, "w1"); ok {
			t.Error("a draining worker whose stream ended is still listed")
		}
	})
}

// connectStatus opens a raw registration stream, sends msgs, and returns the responses
// and the status the stream ended with.
func connectStatus(t *testing.T, ctx context.Context, e *env, closeSend bool, msgs ...*toolpb.ConnectRequest) ([]*toolpb.ConnectResponse, error) {
	t.Helper()
	stream, err := e.reg.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if closeSend {
		_ = stream.CloseSend()
	}
	var out []*toolpb.ConnectResponse
	for {
		m, err := stream.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestConnectRefusals(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	e.registerRaw(ctx, registration("w-math", examplegroups.Math()))

	register := func(reg *toolpb.Registration) *toolpb.ConnectRequest {
		return &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: reg}}
	}
	heartbeat := &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Heartbeat{Heartbeat: &toolpb.Heartbeat{}}}
	add := examplegroups.MathOperations()[0] // "add", already registered by w-math in group math
	if add.Definition().Name != "add" {
		t.Fatalf("first math tool is %q", add.Definition().Name)
	}

	cases := []struct {
		name      string
		closeSend bool
		msgs      []*toolpb.ConnectRequest
		code      codes.Code
		// rejected is a substring of one rejection of a refused registration; empty when
		// no ack is expected.
		rejected string
	}{
		{"first message is a heartbeat", false, []*toolpb.ConnectRequest{heartbeat}, codes.InvalidArgument, ""},
		{"closed before registering", true, nil, codes.InvalidArgument, ""},
		{"invalid registration", false, []*toolpb.ConnectRequest{register(&toolpb.Registration{Address: "127.0.0.1:1", Groups: registration("x", examplegroups.TextGroup()).Groups})},
			codes.InvalidArgument, "worker_id is empty"},
		{"tool of another group", false, []*toolpb.ConnectRequest{register(registration("w-other", worker.Group{Role: "other", Tools: []tool.Tool{add}}))},
			codes.FailedPrecondition, `tool "add" is already registered by group "math"`},
		{"group with another description", false, []*toolpb.ConnectRequest{register(registration("w-math2", worker.Group{Role: "math", Description: "different", Version: examplegroups.Math().Version, Tools: examplegroups.MathOperations()}))},
			codes.FailedPrecondition, `group "math" is already registered with a different description`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := connectStatus(t, ctx, e, tc.closeSend, tc.msgs...)
			if codeOf(err) != tc.code {
				t.Fatalf("stream ended with %v, want %v", err, tc.code)
			}
			if tc.rejected == "" {
				if len(out) != 0 {
					t.Errorf("got responses %v, want none", out)
				}
				return
			}
			if len(out) != 1 || out[0].GetAck() == nil || out[0].GetAck().GetAccepted() {
				t.Fatalf("responses %v, want one refusing ack", out)
			}
			found := false
			for _, r := range out[0].GetAck().GetRejections() {
				found = found || strings.Contains(r.GetReason(), tc.rejected)
			}
			if !found {
				t.Errorf("rejections %v do not mention %q", out[0].GetAck().GetRejections(), tc.rejected)
			}
		})
	}

	// The refusals left the table as it was.
	groups, err := e.cl.ListToolGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	groups = withWorkers(groups) // the orchestrator's own groups are always listed
	if len(groups) != 1 || groups[0].GetGroup().GetRole() != "math" || groups[0].GetGroup().GetDescription() != examplegroups.MathDescription {
		t.Errorf("groups after refusals = %v", groups)
	}

	// The id of a worker whose stream is open is refused, soon to be retried (the holder
	// may be the same worker reconnecting), and the holder's address is not disclosed.
	out, err := connectStatus(t, ctx, e, false, register(registration("w-math", examplegroups.Math())))
	st, info, _ := statusDetails(t, err)
	if st.Code() != codes.AlreadyExists || info.GetReason() != "WORKER_ID_IN_USE" {
		t.Fatalf("registration under a held id = %v (%v), want AlreadyExists WORKER_ID_IN_USE", err, info)
	}
	if d := retryDelay(st); d <= 0 || d > time.Second {
		t.Errorf("RetryInfo delay = %v, want at most 1s", d)
	}
	if len(out) != 1 || len(out[0].GetAck().GetRejections()) != 1 || strings.Contains(out[0].GetAck().GetRejections()[0].GetReason(), fakeAddress) || strings.Contains(st.Message(), fakeAddress) {
		t.Errorf("refusal %v / %q discloses the holder's address", out, st.Message())
	}

	// A second register on an accepted stream is refused.
	stream, _ := e.registerRaw(ctx, registration("w-text", examplegroups.TextGroup()))
	if err := stream.Send(register(registration("w-text", examplegroups.TextGroup()))); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); codeOf(err) != codes.InvalidArgument {
		t.Errorf("second register = %v, want InvalidArgument", err)
	}
}

// retryDelay returns the delay of a status's RetryInfo, or 0.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

func TestListings(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	e.registerRaw(ctx, registration("w-b", examplegroups.Math()))
	e.registerRaw(ctx, registration("w-a", examplegroups.Math(), examplegroups.TextGroup()))

	ws, err := e.cl.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].GetWorkerId() != "w-a" || ws[1].GetWorkerId() != "w-b" || strings.Join(ws[0].GetGroups(), ",") != "math,text" {
		t.Errorf("workers = %v", ws)
	}
	groups, err := e.cl.ListToolGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 5 || groups[0].GetGroup().GetRole() != "agent_process" || len(groups[0].GetWorkerIds()) != 0 {
		t.Errorf("groups = %v, want the built-in groups first", groups)
	}
	groups = withWorkers(groups)
	if len(groups) != 2 || groups[0].GetGroup().GetRole() != "math" || strings.Join(groups[0].GetWorkerIds(), ",") != "w-a,w-b" || strings.Join(groups[1].GetWorkerIds(), ",") != "w-a" {
		t.Errorf("groups = %v", groups)
	}
	tools, err := e.cl.ListTools(ctx, "text")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range tools {
		names = append(names, ti.GetDefinition().GetName())
		if ti.GetGroup() != "text" {
			t.Errorf("tool %s of group %s in a text listing", ti.GetDefinition().GetName(), ti.GetGroup())
		}
	}
	if strings.Join(names, ",") != "lowercase,reverse,uppercase,word_count" {
		t.Errorf("text tools = %v", names)
	}
	all, err := e.cl.ListTools(ctx)
	// Ten math operations, the math facade, four text tools, and the built-in
	// agent_process, blackboard, communicate and progress.
	if err != nil || len(all) != 19 {
		t.Errorf("ListTools() = %d tools, %v; want 19", len(all), err)
	}
	own, err := e.cl.ListTools(ctx, "blackboard", "communication")
	var ownNames []string
	for _, ti := range own {
		ownNames = append(ownNames, ti.GetGroup()+"/"+ti.GetDefinition().GetName())
	}
	if err != nil || strings.Join(ownNames, ",") != "blackboard/blackboard,communication/communicate,communication/progress" {
		t.Errorf("ListTools(blackboard, communication) = %v, %v", ownNames, err)
	}
}

// withWorkers keeps the groups some worker serves.
func withWorkers(groups []*toolpb.ToolGroupStatus) []*toolpb.ToolGroupStatus {
	var out []*toolpb.ToolGroupStatus
	for _, g := range groups {
		if len(g.GetWorkerIds()) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// TestRegistrationReasons: each refusal of the router reaches the worker with its own
// reason.
func TestRegistrationReasons(t *testing.T) {
	for err, want := range map[error]toolpb.ErrorReason{
		router.ErrInvalidRegistration: toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID,
		router.ErrConflict:            toolpb.ErrorReason_ERROR_REASON_REGISTRATION_CONFLICT,
		router.ErrWorkerIDInUse:       toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE,
		router.ErrUnreachable:         toolpb.ErrorReason_ERROR_REASON_WORKER_UNREACHABLE,
		router.ErrWrongService:        toolpb.ErrorReason_ERROR_REASON_WORKER_WRONG_SERVICE,
		router.ErrTableFull:           toolpb.ErrorReason_ERROR_REASON_REGISTRY_FULL,
		router.ErrClosed:              toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN,
	} {
		if got := registrationReason(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("registrationReason(%v) = %s, want %s", err, got, want)
		}
	}
}

// TestUnexpectedMessageOnALease: a held lease takes heartbeats and a draining notice;
// another register, or a message with nothing in it, ends the stream with
// REGISTRATION_INVALID saying what came.
func TestUnexpectedMessageOnALease(t *testing.T) {
	for _, tc := range []struct {
		msg  *toolpb.ConnectRequest
		want string
	}{
		{&toolpb.ConnectRequest{}, "unexpected message <nil>"},
		{&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: registration("w1", examplegroups.Math())}},
			"register may only be the first message of a registration stream"},
	} {
		synctest.Test(t, func(t *testing.T) {
			srv, rt := newLeaseServer(t, config.Default())
			defer rt.Close()
			fs, done := serveConnect(srv)
			fs.in <- &toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: registration("w1", examplegroups.Math())}}
			if ack := (<-fs.out).GetAck(); !ack.GetAccepted() {
				t.Fatalf("ack = %v", ack)
			}
			fs.in <- tc.msg
			err := <-done
			if st, info, _ := statusDetails(t, err); info.GetReason() != "REGISTRATION_INVALID" || st.Message() != tc.want {
				t.Errorf("the stream ended with %v, want REGISTRATION_INVALID %q", err, tc.want)
			}
		})
	}
}
