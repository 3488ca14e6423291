package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestAdmissionBoundsConcurrentReads: the budget admits as many reads at once as it has
// room for; the next waits, and is refused as overloaded after admissionWait; a read that
// ends gives its room back, and one that takes longer than admissionHold stops counting.
func TestAdmissionBoundsConcurrentReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const per = 4 << 20
		a := newAdmissionOf(per, 2)
		release := make(chan struct{})
		results := make(chan error, 4)
		for range 2 {
			go func() { results <- a.recv(t.Context(), func() error { <-release; return nil }) }()
		}
		synctest.Wait()
		start := time.Now()
		err := a.recv(t.Context(), func() error { return nil })
		if reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_OVERLOADED || time.Since(start) != admissionWait {
			t.Fatalf("third read = %v after %s, want OVERLOADED after %s", err, time.Since(start), admissionWait)
		}
		// The two reads still run; past admissionHold they no longer count.
		time.Sleep(admissionHold)
		if err := a.recv(t.Context(), func() error { return nil }); err != nil {
			t.Errorf("a read after the others' hold ran out = %v", err)
		}
		close(release)
		for range 2 {
			if err := <-results; err != nil {
				t.Error(err)
			}
		}
		// A caller that goes away while it waits for room stops waiting at once, with its
		// context's error.
		held := make(chan struct{})
		for range 2 {
			go func() { results <- a.recv(t.Context(), func() error { <-held; return nil }) }()
		}
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() { waited <- a.recv(ctx, func() error { return errors.New("read without room") }) }()
		synctest.Wait()
		start = time.Now()
		cancel()
		if err := <-waited; status.Code(err) != codes.Canceled || time.Since(start) != 0 {
			t.Errorf("a caller cancelled while waiting = %v after %s, want Canceled at once", err, time.Since(start))
		}
		close(held)
		for range 2 {
			if err := <-results; err != nil {
				t.Error(err)
			}
		}
		// A caller gone before it asks gets its context's error.
		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		if err := a.recv(ctx, func() error { return errors.New("read after cancel") }); err == nil || reasonOf(err) == toolpb.ErrorReason_ERROR_REASON_OVERLOADED {
			t.Errorf("a cancelled caller's read = %v", err)
		}
	})
}

// TestIdleRegistrationStreamsDoNotHoldTheBudget: only the first message of a stream is
// counted, so that open registration streams waiting for their next heartbeat, however
// many, never keep runs out.
func TestIdleRegistrationStreamsDoNotHoldTheBudget(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	slots := e.cfg.Server.MaxInflightReceiveBytes / e.cfg.Server.MaxReceiveBytes
	for i := range 2 * slots {
		e.registerRaw(ctx, registration(fmt.Sprintf("w-%d", i), examplegroups.TextGroup()))
	}
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi"}, nil); err != nil {
		t.Fatalf("a run with %d registration streams open: %v", 2*slots, err)
	}
	if _, err := e.cl.ListTools(ctx); errors.Is(err, client.ErrOverloaded) {
		t.Fatal(err)
	}
}

// TestOpenCallsAreBounded: past server.max_open_calls client calls, a client call is
// refused at once as overloaded, while workers still register; past twice
// registry.max_workers registration streams, a registration is refused while clients
// are still served; a call that ends makes room.
func TestOpenCallsAreBounded(t *testing.T) {
	const maxOpen, maxWorkers = 16, 8
	e := newEnv(t, envOptions{script: slowScript(), configure: func(c *config.Config) {
		c.Server.MaxOpenCalls = maxOpen
		c.Registry.MaxWorkers = maxWorkers
		c.Loop.MaxConcurrentRuns = maxOpen
	}})
	ctx := testContext(t)

	// Client calls: maxOpen slow runs fill the pool.
	runCtx, cancelRuns := context.WithCancel(ctx)
	defer cancelRuns()
	var started []<-chan struct{}
	for range maxOpen {
		ch := make(chan struct{})
		started = append(started, ch)
		go func() {
			// Leaving the loop would cancel the run: it ranges until the run ends.
			var once sync.Once
			for ev, err := range e.cl.Run(runCtx, &toolpb.RunRequest{Prompt: "slow down"}) {
				if ev.GetStarted() != nil || err != nil {
					once.Do(func() { close(ch) })
				}
			}
		}()
	}
	for _, ch := range started {
		<-ch
	}
	start := time.Now()
	if _, err := e.cl.ListTools(ctx); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("ListTools with %d runs open = %v, want ErrOverloaded", maxOpen, err)
	}
	if d := time.Since(start); d > admissionWait {
		t.Errorf("the refusal took %s: it must not wait", d)
	}
	// ... and workers register all the same.
	for i := range maxWorkers {
		e.registerRaw(ctx, registration(fmt.Sprintf("w-%d", i), examplegroups.TextGroup()))
	}
	cancelRuns()
	// Each run's call leaves the pool before its handler returns.
	e.calls.waitEnded(t, toolpb.OrchestratorService_Run_FullMethodName, maxOpen)
	if _, err := e.cl.ListTools(ctx); err != nil {
		t.Fatalf("a client call after the runs ended: %v", err)
	}

	// Registration streams: with maxWorkers registered, maxWorkers+1 more streams that
	// send nothing overfill their pool of twice maxWorkers: one of them (whichever the
	// server takes last) is refused at once, the others wait for their registration
	// until the lease TTL.
	refused := make(chan error, maxWorkers+1)
	for range maxWorkers + 1 {
		s, err := e.reg.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, err := s.Recv(); refused <- err }()
	}
	select {
	case err := <-refused:
		if reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_OVERLOADED {
			t.Errorf("the first silent stream to end ended with %v, want OVERLOADED", err)
		}
	case <-time.After(e.cfg.Registry.LeaseTTL.D() / 2):
		t.Error("no silent stream past the pool was refused")
	}
	if _, err := e.cl.ListTools(ctx); err != nil {
		t.Errorf("ListTools with the registration pool full = %v", err)
	}
}

// TestSilentClientsDoNotKeepWorkersOut: client calls that open and send nothing hold
// the clients' receive budget for a while, never the workers'.
func TestSilentClientsDoNotKeepWorkersOut(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	slots := e.cfg.Server.MaxInflightReceiveBytes / e.cfg.Server.MaxReceiveBytes
	for range 2 * slots {
		if _, err := e.conn.NewStream(ctx, &toolpb.OrchestratorService_ServiceDesc.Streams[0], toolpb.OrchestratorService_Run_FullMethodName); err != nil {
			t.Fatal(err)
		}
	}
	// The server takes them: as many as the budget admits read their request within it
	// (the others wait for room).
	e.calls.waitAdmitted(t, toolpb.OrchestratorService_Run_FullMethodName, slots)
	e.registerRaw(ctx, registration("w-after-silence", examplegroups.TextGroup()))
}

// TestSilentCallsEnd: a call whose request message does not arrive within
// firstMessageTimeout is ended, and gives its room back.
func TestSilentCallsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const per = 4 << 20
		a := newAdmissionOf(per, 1)
		never := make(chan struct{})
		defer close(never)
		start := time.Now()
		err := a.recv(t.Context(), func() error { <-never; return nil })
		if reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_REQUEST_TIMEOUT || time.Since(start) != firstMessageTimeout {
			t.Fatalf("silent read = %v after %s, want REQUEST_TIMEOUT after %s", err, time.Since(start), firstMessageTimeout)
		}
		if !a.tryAcquire() {
			t.Error("the silent read still holds the receive budget")
		}
	})
}

// rawCodec sends []byte as the message itself, so that a test can send bytes no
// protobuf library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestUndecodableRequestIsTheClientsMistake: a message that is not valid protobuf (a
// string field of invalid UTF-8, which only a hand-rolled client can send) is refused
// with INVALID_ARGUMENT and reason INVALID_REQUEST, not INTERNAL, on unary calls, on the
// first message of a stream and on a later one.
func TestUndecodableRequestIsTheClientsMistake(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	badString := []byte{0x0a, 0x01, 0xff} // field 1, a string of one byte: 0xff

	check := func(what string, err error, mentions string) {
		t.Helper()
		st, info, _ := statusDetails(t, err)
		if st.Code() != codes.InvalidArgument || info.GetReason() != "INVALID_REQUEST" || !strings.Contains(st.Message(), mentions) {
			t.Errorf("%s: %v (%v), want InvalidArgument INVALID_REQUEST mentioning %q", what, err, info, mentions)
		}
	}
	raw := grpc.ForceCodec(rawCodec{})

	var reply []byte
	check("GetRun", e.conn.Invoke(ctx, toolpb.OrchestratorService_GetRun_FullMethodName, badString, &reply, raw), "UTF-8")

	run, err := e.conn.NewStream(ctx, &toolpb.OrchestratorService_ServiceDesc.Streams[0], toolpb.OrchestratorService_Run_FullMethodName, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.SendMsg(badString); err != nil {
		t.Fatal(err)
	}
	_ = run.CloseSend()
	check("Run", run.RecvMsg(&reply), "UTF-8")

	// A registration, then a heartbeat that does not decode: field 2 of ConnectRequest
	// holds a Heartbeat whose field 1, an int, is a truncated varint.
	conn, err := e.conn.NewStream(ctx, &toolpb.ToolRegistryService_ServiceDesc.Streams[0], toolpb.ToolRegistryService_Connect_FullMethodName, raw)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := proto.Marshal(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: registration("w-bad", examplegroups.TextGroup())}})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.SendMsg(reg); err != nil {
		t.Fatal(err)
	}
	var ack toolpb.ConnectResponse
	if err := conn.RecvMsg(&reply); err != nil || proto.Unmarshal(reply, &ack) != nil || !ack.GetAck().GetAccepted() {
		t.Fatalf("registration: %v, ack %v", err, &ack)
	}
	if err := conn.SendMsg([]byte{0x12, 0x02, 0x08, 0x80}); err != nil {
		t.Fatal(err)
	}
	check("heartbeat", conn.RecvMsg(&reply), "protobuf")

	// A bad request followed by a second message, where Run takes one: grpc-go decodes
	// the first, then fails the read. Nothing of either may stay behind.
	twice, err := e.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, toolpb.OrchestratorService_Run_FullMethodName, raw)
	if err != nil {
		t.Fatal(err)
	}
	_ = twice.SendMsg(badString)
	_ = twice.SendMsg(badString)
	_ = twice.CloseSend()
	if err := twice.RecvMsg(&reply); err == nil {
		t.Error("Run with two messages succeeded")
	}
	// grpc-go writes the status of a failed read before RecvMsg returns, so the client
	// may read it a moment before the server's read takes the entry: wait for the read to
	// end, and with it the handler, of both Run calls (the other calls' statuses follow
	// their handlers' return).
	e.calls.waitEnded(t, toolpb.OrchestratorService_Run_FullMethodName, 2)
	if n := keptDecodeErrors(); n != 0 {
		t.Errorf("%d decode errors are still kept after the calls ended", n)
	}
}

// keptDecodeErrors counts the decode errors the server codec kept and no read took.
func keptDecodeErrors() int {
	n := 0
	requestCodec.failed.Range(func(any, any) bool { n++; return true })
	return n
}
