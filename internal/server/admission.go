package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The orchestrator bounds the memory requests can take while they are received: no
// message is larger than config.Server.MaxReceiveBytes (gRPC refuses a larger one after
// reading its five-byte header, before any of its body), and messages are read and
// decoded only while a budget of config.Server.MaxInflightReceiveBytes allows, each
// counted at the largest size it may have, since its size is not known before it is
// read. Client calls and registration streams each have a budget of their own (see
// Server.Register). A request that waits for the budget longer than admissionWait is
// refused as OVERLOADED. A waiting request costs no more than its HTTP/2 stream's flow-control
// window, which PortOptions fixes at 64 KiB (grpc-go's dynamic windows would let a
// stream buffer megabytes).

// admissionWait bounds the wait for the receive budget.
const admissionWait = 2 * time.Second

// admissionHold is how long one read may count against the budget, so that a client
// that trickles its message in does not keep others out for long. Past it the read goes
// on uncounted, holding what has arrived so far, until the message is complete or
// firstMessageTimeout ends the call: slow reads are admitted at most a budget's worth
// per admissionHold and last at most firstMessageTimeout, so at most
// messages × (firstMessageTimeout/admissionHold + 1) of them (32 with the defaults)
// are in progress at once, besides the counted ones.
const admissionHold = 10 * time.Second

// firstMessageTimeout bounds the wait for a request's message (a unary request, the
// first message of a stream): a call whose message has not arrived by then is ended, so
// that calls opened and left silent do not hold their place for ever.
const firstMessageTimeout = 30 * time.Second

// streamWindow is the fixed HTTP/2 flow-control window of each stream; a connection's
// is sixteen times that (its window is acknowledged as data arrives, not as it is read,
// so it paces throughput rather than bounding memory).
const streamWindow = 64 << 10

// PortOptions are the gRPC server options of the orchestrator's port: what it receives
// is bounded, its flow-control windows are fixed, and workers' keepalive pings (every
// 10 s on a registration stream, on which the orchestrator sends nothing for long
// stretches) are welcome, while a silent client is pinged in turn. A handler that panics
// answers INTERNAL and is logged (as under RecoveryInterceptors), and each stream's
// context is marked as one of a server that sends encoded events as they are
// (requestCodec). The streams have one interceptor for both: a Run stream's goroutine
// waits for the run's model under every interceptor's frames, and with fewer of them it
// keeps a stack of half the size.
func PortOptions(cfg config.Config, log *slog.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.MaxRecvMsgSize(cfg.Server.MaxReceiveBytes),
		grpc.ForceServerCodecV2(requestCodec),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(16 * streamWindow),
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer recovered(log, info.FullMethod, &err)
			return h(srv, marked(ss))
		}),
	}
}

// AuthOptions are the interceptors that authenticate every caller (its client
// certificate with mutual TLS on, the server's credentials coming from the caller; its
// bearer token with auth.jwt) and authorise it (trust.*, tenants.*); none without any of
// these. Refusals are logged as audit events. The MCP endpoint (MCPHandler) shares them,
// and their key set.
func (s *Server) AuthOptions() []grpc.ServerOption { return s.auth.serverOptions() }

// admission is the budget of bytes being received, shared by every call: room for
// messages messages of perMessage bytes at most, a slot of slots each. A read that finds
// no room waits in a select on the slots, its call's context and a timer: the wait
// leaves nothing behind in the call's context (a child context would leave it a map of
// its children for as long as the call lasts, a run's whole life), and waiters get room
// in the order they came.
type admission struct {
	slots      chan struct{}
	perMessage int64
	messages   int64 // how many messages the budget admits at once
}

func newAdmission(cfg config.Server) *admission {
	return newAdmissionOf(int64(cfg.MaxReceiveBytes), int64(cfg.MaxInflightReceiveBytes)/int64(cfg.MaxReceiveBytes))
}

// newAdmissionOf is a budget of messages messages of per bytes (at least one).
func newAdmissionOf(per, messages int64) *admission {
	messages = max(messages, 1)
	return &admission{slots: make(chan struct{}, messages), perMessage: per, messages: messages}
}

// tryAcquire takes room for a message if there is some now.
func (a *admission) tryAcquire() bool {
	select {
	case a.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// release gives back the room of a message.
func (a *admission) release() { <-a.slots }

// openCalls bounds the calls of one service open at once. Each service has its own, so
// that clients opening calls cannot keep workers from registering, nor the reverse.
type openCalls struct {
	what string // what the calls are, for the refusal
	n    atomic.Int64
	max  int64
}

// enter counts a call open; it refuses one over the bound at once, as OVERLOADED. A call
// that entered must leave.
func (o *openCalls) enter() error {
	if o.n.Add(1) > o.max {
		o.n.Add(-1)
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_OVERLOADED,
			Message: fmt.Sprintf("the orchestrator has its maximum of %d %s open; retry later", o.max, o.what)}.Err()
	}
	return nil
}

func (o *openCalls) leave() { o.n.Add(-1) }

// recv runs one read of a request message within the budget, and within
// firstMessageTimeout of its room in the budget: past it, recv returns and the caller
// ends the call, which ends the read. The read runs on a goroutine of its own, started
// only once the budget has room for it: calls that wait for room (many opened at once)
// wait on their own goroutines, not on one more each.
func (a *admission) recv(ctx context.Context, read func() error) error {
	if !a.tryAcquire() {
		if err := a.acquireWaiting(ctx); err != nil {
			return err
		}
	}
	timer := time.NewTimer(firstMessageTimeout)
	defer timer.Stop()
	done := make(chan error, 1)
	go func() {
		// Outside the handler's goroutine, so outside the recovery interceptors.
		defer func() {
			if p := recover(); p != nil {
				done <- wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_INTERNAL, Message: fmt.Sprintf("internal error reading the request: %v", p)}.Err()
			}
		}()
		done <- a.holding(read)
	}()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_REQUEST_TIMEOUT,
			Message: fmt.Sprintf("the request message, and the end of the client's stream where a call takes one message, did not arrive within %s of the call's start", firstMessageTimeout)}.Err()
	}
}

// holding runs read holding room in the budget (taken by the caller), which it gives
// back once read returns, or after admissionHold if read takes longer.
func (a *admission) holding(read func() error) error {
	var once sync.Once
	release := func() { once.Do(a.release) }
	hold := time.AfterFunc(admissionHold, release)
	defer func() {
		hold.Stop()
		release()
	}()
	return read()
}

// acquireWaiting waits up to admissionWait for room for a message, or until ctx ends.
func (a *admission) acquireWaiting(ctx context.Context) error {
	timer := time.NewTimer(admissionWait)
	defer timer.Stop()
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-timer.C:
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_OVERLOADED,
			Message: fmt.Sprintf("the orchestrator is receiving its maximum of %d requests at once; retry later", a.messages)}.Err()
	}
}

// codecMarked marks the context of a stream whose server runs requestCodec (PortOptions),
// which sends an already encoded event (encodedEvent) as it is: a server built without
// PortOptions (an embedder's, a test's) has grpc-go's codec, which encodes only protobuf
// messages, and its events are sent decoded.
type codecMarked struct{}

// marked is ss with its context marked.
//
//go:noinline
func marked(ss grpc.ServerStream) grpc.ServerStream {
	return markedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), codecMarked{}, true)}
}

type markedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (m markedStream) Context() context.Context { return m.ctx }

// sendEvent sends b, the encoding of a RunResponse, on stream: as it is where the
// server's codec is requestCodec, decoded otherwise.
func sendEvent(stream grpc.ServerStream, b []byte) error {
	if marked, _ := stream.Context().Value(codecMarked{}).(bool); marked {
		return stream.SendMsg(&encodedEvent{b: b})
	}
	ev := &toolpb.RunResponse{}
	if err := proto.Unmarshal(b, ev); err != nil {
		return fmt.Errorf("an event of the run's journal: %w", err)
	}
	return stream.SendMsg(ev)
}

// requestCodec is the server's codec: grpc-go's protobuf codec, except that a toolmesh
// request that does not decode (invalid UTF-8 in a string field, a malformed varint) is
// not reported as grpc-go reports it, an INTERNAL status the client would read as the
// server's fault. The decode error is kept aside for the message and returned by the
// gated read that asked for it (every toolmesh request is read through one) as what it
// is: INVALID_ARGUMENT with reason INVALID_REQUEST.
var requestCodec = &keepingCodec{base: encoding.GetCodecV2(grpcproto.Name)}

type keepingCodec struct {
	base   encoding.CodecV2
	failed sync.Map // message pointer → decode error, until its read takes it
}

func (c *keepingCodec) Name() string { return c.base.Name() }

func (c *keepingCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedEvent); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.base.Marshal(v)
}

func (c *keepingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok || m.ProtoReflect().Descriptor().ParentFile().Package() != "toolmesh.v1" {
		return err
	}
	c.failed.Store(v, err)
	return nil
}

// decodeError returns the decode error kept for m, if any.
func (c *keepingCodec) decodeError(m any) error {
	v, ok := c.failed.LoadAndDelete(m)
	if !ok {
		return nil
	}
	return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST,
		Message: "the request is not a valid protobuf message: " + wire.Truncate(v.(error).Error(), 512)}.Err()
}

// decoded reads m with read and returns the error of reading it, or of decoding it. It
// takes the kept decode error whatever read returns: grpc-go may decode m and then fail
// the read (a second message where one is allowed, a reset), and the entry, which holds
// m, must not outlive the read.
func decoded(m any, read func() error) error {
	err := read()
	derr := requestCodec.decodeError(m)
	if err != nil {
		return err
	}
	return derr
}

// gate returns desc with the request of every call counted against the budget: unary
// handlers decode it through the function they are given, streaming handlers through
// their stream's first RecvMsg (a run's request, a worker's registration). A stream's
// later messages are not counted: a registration stream waits most of its life for its
// next heartbeat, and a read that waits would hold the budget while it waits.
func (a *admission) gate(desc *grpc.ServiceDesc, open *openCalls) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			if err := open.enter(); err != nil {
				return nil, err
			}
			defer open.leave()
			return h(srv, ctx, func(v any) error {
				return a.recv(ctx, func() error { return decoded(v, func() error { return dec(v) }) })
			}, in)
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		h := sd.Handler
		sd.Handler = func(srv any, ss grpc.ServerStream) error {
			if err := open.enter(); err != nil {
				return err
			}
			defer open.leave()
			return h(srv, &gatedStream{ServerStream: ss, a: a})
		}
		out.Streams[i] = sd
	}
	return &out
}

// gatedStream reads its first message within the budget. A stream's RecvMsg is not
// called from two goroutines at once, so read needs no lock.
type gatedStream struct {
	grpc.ServerStream
	a    *admission
	read bool // the first message was read
}

func (s *gatedStream) RecvMsg(m any) error {
	read := func() error { return decoded(m, func() error { return s.ServerStream.RecvMsg(m) }) }
	if s.read {
		return read()
	}
	s.read = true
	return s.a.recv(s.Context(), read)
}
