package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// With mutual TLS on (tls.*), every call but grpc.health.v1 comes from a verified
// identity: the SPIFFE ID of the client certificate the handshake checked against the
// CA bundle. Workers register only under an identity trust.workers grants, for the
// groups and tools it grants; clients call OrchestratorService only under an identity
// trust.clients lists (any, when it lists none).

// authOptions are the interceptors that authorise callers; none without mutual TLS.
func authOptions(cfg config.Config, audit func(msg string, args ...any)) []grpc.ServerOption {
	if !cfg.TLS.Enabled() {
		return nil
	}
	a := &authorizer{trust: cfg.Trust, audit: audit}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := a.authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := a.authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

type authorizer struct {
	trust config.Trust
	audit func(msg string, args ...any)
}

var (
	registryPrefix     = "/" + toolpb.ToolRegistryService_ServiceDesc.ServiceName + "/"
	orchestratorPrefix = "/" + toolpb.OrchestratorService_ServiceDesc.ServiceName + "/"
)

func (a *authorizer) authorize(ctx context.Context, method string) error {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	id, ok := trust.PeerID(ctx)
	if !ok {
		return statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
			"mutual TLS is on: present a client certificate with a SPIFFE ID that the orchestrator's CA bundle vouches for", nil)
	}
	switch {
	case strings.HasPrefix(method, registryPrefix):
		if _, ok := a.trust.Grant(id.String()); !ok {
			a.audit("registration refused: identity not granted", "identity", id.String())
			return statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("identity %s may not register workers: trust.workers grants it nothing", id), nil)
		}
	case strings.HasPrefix(method, orchestratorPrefix):
		if len(a.trust.Clients) > 0 && !slices.Contains(a.trust.Clients, id.String()) {
			a.audit("client call refused: identity not listed", "identity", id.String(), "method", method)
			return statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("identity %s may not call the orchestrator: trust.clients does not list it", id), nil)
		}
	}
	return nil
}

// checkGrant refuses a registration outside the grant of the worker's identity: a group
// or a tool (or facade) it may not serve. "" without mutual TLS.
func (s *Server) checkGrant(ctx context.Context, reg *toolpb.Registration) (string, error) {
	if !s.cfg.TLS.Enabled() {
		return "", nil
	}
	id, ok := trust.PeerID(ctx)
	if !ok {
		return "", statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "a registration needs a verified worker identity", nil)
	}
	grant, _ := s.cfg.Trust.Grant(id.String())
	var outside []string
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		if !slices.Contains(grant.Groups, role) {
			outside = append(outside, "group "+role)
			continue
		}
		for _, t := range gr.GetTools() {
			if name := t.GetDefinition().GetName(); !grant.Allows(role, name) {
				outside = append(outside, "tool "+name)
			}
		}
		for _, f := range gr.GetFacades() {
			if name := f.GetDefinition().GetName(); !grant.Allows(role, name) {
				outside = append(outside, "facade "+name)
			}
		}
	}
	if len(outside) > 0 {
		if len(outside) > 10 {
			outside = append(outside[:10], fmt.Sprintf("and %d more", len(outside)-10))
		}
		s.audit("registration refused: outside the identity's grant", "identity", id.String(), "worker_id", wire.Truncate(reg.GetWorkerId(), 64), "outside", outside)
		return "", statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
			fmt.Sprintf("identity %s may not serve %s (trust.workers grants it groups %v)", id, strings.Join(outside, ", "), grant.Groups), nil)
	}
	return id.String(), nil
}

// audit logs a security event: who was refused what (event=audit, for log pipelines).
func (s *Server) audit(msg string, args ...any) {
	s.log.Warn(msg, append([]any{"event", "audit"}, args...)...)
}

// certExpiry is when the caller's certificate expires; zero without one.
func certExpiry(ctx context.Context) time.Time {
	if c, ok := trust.PeerCert(ctx); ok {
		return c.NotAfter
	}
	return time.Time{}
}
