package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/wire"
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
		return errShuttingDown()
	}
	defer r.remove(sess)
	ttl := r.s.cfg.Registry.LeaseTTL.D()
	msgs, recvErr := receive(ctx, stream)
	reg, err := awaitRegister(ctx, ttl, msgs, recvErr)
	if err != nil {
		return err
	}
	lease, identity, err := r.register(ctx, stream, reg)
	if err != nil {
		return err
	}
	defer lease.End()
	ack := &toolpb.RegistrationAck{Accepted: true, HeartbeatInterval: durationpb.New(r.s.cfg.Registry.HeartbeatInterval.D()), LeaseId: lease.ID()}
	if err := stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: ack}}); err != nil {
		return err
	}
	// A worker whose certificate expires loses its lease then: its tools leave the table,
	// and it cannot register again with that certificate.
	switch err := lease.Hold(ctx, ttl, certExpiry(ctx), msgs, recvErr); {
	case err == nil:
		return nil
	case errors.Is(err, router.ErrCertificateExpired):
		r.s.audit("worker lease ended: its certificate expired", "worker_id", lease.WorkerID(), "identity", identity)
		return statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "the worker's certificate expired", nil)
	case errors.Is(err, router.ErrLeaseExpired):
		return statusError(toolpb.ErrorReason_ERROR_REASON_LEASE_EXPIRED, strings.TrimPrefix(err.Error(), router.ErrLeaseExpired.Error()+": "), nil)
	case errors.Is(err, router.ErrUnexpectedMessage):
		return statusError(toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID, err.Error(), nil)
	case ctx.Err() != nil:
		return errShuttingDown()
	default:
		return err
	}
}

func errShuttingDown() error {
	return statusError(toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN, "orchestrator is shutting down", nil)
}

// receive reads the stream's messages into msgs until it fails (the error on recvErr) or
// ctx ends.
func receive(ctx context.Context, stream toolpb.ToolRegistryService_ConnectServer) (<-chan *toolpb.ConnectRequest, <-chan error) {
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
	return msgs, recvErr
}

// awaitRegister waits, no longer than ttl, for the stream's first message, which must be
// a register.
func awaitRegister(ctx context.Context, ttl time.Duration, msgs <-chan *toolpb.ConnectRequest, recvErr <-chan error) (*toolpb.Registration, error) {
	timer := time.NewTimer(ttl)
	defer timer.Stop()
	var first *toolpb.ConnectRequest
	select {
	case first = <-msgs:
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return nil, statusError(toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID, "the registration stream was closed before a register message", nil)
		}
		return nil, err
	case <-timer.C:
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_LEASE_EXPIRED, fmt.Sprintf("no registration within %s", ttl), nil)
	case <-ctx.Done():
		return nil, errShuttingDown()
	}
	reg := first.GetRegister()
	if reg == nil {
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID, fmt.Sprintf("the first message of a registration stream must be register, got %T", first.GetMessage()), nil)
	}
	return reg, nil
}

// register checks the worker's certificate and grant and enters it in the routing table;
// a refusal is sent to the worker as an ack with its rejections, and returned as the
// stream's status.
func (r *registryServer) register(ctx context.Context, stream toolpb.ToolRegistryService_ConnectServer, reg *toolpb.Registration) (*router.Lease, string, error) {
	if exp := certExpiry(ctx); !exp.IsZero() && !time.Now().Before(exp) {
		// A connection outlives its handshake: its certificate may have expired since.
		r.s.audit("registration refused: the certificate of its connection expired", "worker_id", wire.Truncate(reg.GetWorkerId(), 64), "not_after", exp.UTC().Format(time.RFC3339))
		return nil, "", statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "the certificate this connection was made with expired at "+exp.UTC().Format(time.RFC3339)+"; connect again with a valid one", nil)
	}
	identity, err := r.s.checkGrant(ctx, reg)
	if err != nil {
		_ = stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: &toolpb.RegistrationAck{Accepted: false,
			Rejections: []*toolpb.Rejection{{Reason: status.Convert(err).Message()}}}}})
		return nil, "", err
	}
	lease, rejections, err := r.s.router.RegisterAs(reg, identity)
	if err == nil {
		return lease, identity, nil
	}
	for sentinel, what := range map[error]string{
		router.ErrRepinned:    "registration refused: definition changed under the same version",
		router.ErrQuarantined: "registration refused: definition quarantined pending approval",
		router.ErrNotYours:    "registration refused: held by another identity",
	} {
		if errors.Is(err, sentinel) {
			r.s.audit(what, "identity", identity, "worker_id", wire.Truncate(reg.GetWorkerId(), 64), "error", wire.Truncate(err.Error(), 1024))
		}
	}
	reason := registrationReason(err)
	r.s.log.Warn("registration refused", "worker_id", wire.Truncate(reg.GetWorkerId(), 64), "address", wire.Truncate(reg.GetAddress(), 64),
		"reason", wire.ReasonName(reason), "error", wire.Truncate(err.Error(), 1024))
	_ = stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: &toolpb.RegistrationAck{Accepted: false, Rejections: rejections}}})
	we := wire.Error{Reason: reason, Message: wire.Truncate(err.Error(), 4096)}
	if reason == toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE {
		// Soon: the holder may be this same worker, reconnecting before its old stream is
		// seen to end; a stream that is gone without a word loses its lease within the
		// TTL, and the worker keeps retrying until then.
		we.RetryAfter = min(r.s.cfg.Registry.LeaseTTL.D(), time.Second)
	}
	return nil, "", we.Err()
}

// registrationReason is the reason of a refused registration.
func registrationReason(err error) toolpb.ErrorReason {
	switch {
	case errors.Is(err, router.ErrInvalidRegistration):
		return toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID
	case errors.Is(err, router.ErrWorkerIDInUse):
		return toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE
	case errors.Is(err, router.ErrUnreachable):
		return toolpb.ErrorReason_ERROR_REASON_WORKER_UNREACHABLE
	case errors.Is(err, router.ErrWrongService):
		return toolpb.ErrorReason_ERROR_REASON_WORKER_WRONG_SERVICE
	case errors.Is(err, router.ErrTableFull):
		return toolpb.ErrorReason_ERROR_REASON_REGISTRY_FULL
	case errors.Is(err, router.ErrClosed):
		return toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN
	case errors.Is(err, router.ErrNotYours):
		return toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED
	case errors.Is(err, router.ErrQuarantined):
		return toolpb.ErrorReason_ERROR_REASON_DEFINITION_QUARANTINED
	default:
		return toolpb.ErrorReason_ERROR_REASON_REGISTRATION_CONFLICT
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
