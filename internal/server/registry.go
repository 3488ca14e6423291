package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// registryServer serves ToolRegistryService: each Connect stream is one worker's lease.
type registryServer struct {
	toolpb.UnimplementedToolRegistryServiceServer
	s *Server

	mu       sync.Mutex
	closing  bool
	sessions map[*registrySession]struct{}
}

type registrySession struct{ cancel context.CancelFunc }

// Connect registers a worker and holds its lease until the stream ends, the worker stops
// sending (no message within the lease TTL), or the orchestrator shuts down.
func (r *registryServer) Connect(stream toolpb.ToolRegistryService_ConnectServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sess := &registrySession{cancel: cancel}
	if !r.add(sess) {
		return status.Error(codes.Unavailable, "orchestrator is shutting down")
	}
	defer r.remove(sess)

	cfg := r.s.cfg.Registry
	ttl := cfg.LeaseTTL.D()
	msgs := make(chan *toolpb.ConnectRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	timer := time.NewTimer(ttl)
	defer timer.Stop()
	var first *toolpb.ConnectRequest
	select {
	case first = <-msgs:
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "the registration stream was closed before a register message")
		}
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "no registration within %s", ttl)
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "orchestrator is shutting down")
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Errorf(codes.InvalidArgument, "the first message of a registration stream must be register, got %T", first.GetMessage())
	}
	lease, rejections, err := r.s.router.Register(reg)
	if err != nil {
		r.s.log.Warn("registration refused", "worker_id", reg.GetWorkerId(), "address", reg.GetAddress(), "error", err)
		_ = stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: &toolpb.RegistrationAck{Accepted: false, Rejections: rejections}}})
		code := codes.FailedPrecondition
		if errors.Is(err, router.ErrInvalidRegistration) {
			code = codes.InvalidArgument
		}
		return status.Error(code, err.Error())
	}
	defer lease.End()
	ack := &toolpb.RegistrationAck{Accepted: true, HeartbeatInterval: durationpb.New(cfg.HeartbeatInterval.D()), LeaseId: lease.ID()}
	if err := stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: ack}}); err != nil {
		return err
	}

	for {
		timer.Reset(ttl)
		select {
		case m := <-msgs:
			switch x := m.GetMessage().(type) {
			case *toolpb.ConnectRequest_Heartbeat:
				lease.Heartbeat(x.Heartbeat.GetInFlight())
			case *toolpb.ConnectRequest_Draining:
				lease.Drain()
			case *toolpb.ConnectRequest_Register:
				return status.Error(codes.InvalidArgument, "register may only be the first message of a registration stream")
			default:
				return status.Errorf(codes.InvalidArgument, "unexpected message %T", m.GetMessage())
			}
		case <-recvErr:
			return nil // io.EOF or a broken stream: the lease ends either way
		case <-timer.C:
			r.s.log.Warn("worker lease expired: no heartbeat", "worker_id", lease.WorkerID(), "ttl", ttl)
			return status.Errorf(codes.DeadlineExceeded, "no heartbeat within the lease TTL of %s", ttl)
		case <-ctx.Done():
			return status.Error(codes.Unavailable, "orchestrator is shutting down")
		}
	}
}

func (r *registryServer) add(s *registrySession) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return false
	}
	if r.sessions == nil {
		r.sessions = map[*registrySession]struct{}{}
	}
	r.sessions[s] = struct{}{}
	return true
}

func (r *registryServer) remove(s *registrySession) {
	r.mu.Lock()
	delete(r.sessions, s)
	r.mu.Unlock()
}

// closeAll ends every registration stream; workers reconnect by themselves.
func (r *registryServer) closeAll() {
	r.mu.Lock()
	r.closing = true
	for s := range r.sessions {
		s.cancel()
	}
	r.mu.Unlock()
}
