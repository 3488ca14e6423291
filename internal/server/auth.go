package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// With mutual TLS on (tls.*), every call but grpc.health.v1 comes from a verified
// identity: the SPIFFE ID of the client certificate the handshake checked against the
// CA bundle. Workers register only under an identity trust.workers grants, for the
// groups and tools it grants; clients call OrchestratorService only under an identity
// trust.clients lists (any, when it lists none).

// serverOptions are the interceptors that authenticate and authorise callers: with
// mutual TLS, bearer tokens (auth.jwt) or tenants configured; none otherwise.
func (a *authorizer) serverOptions() []grpc.ServerOption {
	if !a.enabled() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := a.authorize(ctx, info.FullMethod)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := a.authorize(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			return h(srv, ctxStream{ServerStream: ss, ctx: ctx})
		}),
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

type authorizer struct {
	cfg    config.Config
	tokens *tokens
	audit  func(msg string, args ...any)
}

// newAuthorizer reads (or fetches) the key set of auth.jwt, if any.
func newAuthorizer(cfg config.Config, log *slog.Logger, audit func(msg string, args ...any)) (*authorizer, error) {
	a := &authorizer{cfg: cfg, audit: audit}
	if cfg.Auth.JWT.Enabled() {
		t, err := newTokens(cfg.Auth.JWT, log)
		if err != nil {
			return nil, err
		}
		a.tokens = t
	}
	return a, nil
}

// refreshKeys fetches the key set of auth.jwt.jwks_url again every refresh interval
// until ctx ends; it returns at once for any other key set.
func (a *authorizer) refreshKeys(ctx context.Context) {
	if a.tokens == nil {
		return
	}
	if r, ok := a.tokens.keys.(*remoteKeys); ok {
		r.run(ctx)
	}
}

// enabled reports whether callers are authenticated at all.
func (a *authorizer) enabled() bool {
	return a.cfg.TLS.Enabled() || a.cfg.Auth.JWT.Enabled() || len(a.cfg.Tenants) > 0
}

// principal is a verified client: its tenant ("" without tenancy) and who it is (its
// SPIFFE ID, or the issuer and subject of its token; "" when nothing says).
type principal struct {
	tenant, who string
	// scopes are its bearer token's (sorted, space-separated); token says it came with one.
	scopes string
	token  bool
	// claims are its bearer token's claims, a JSON object ("" without a token).
	claims string
	// bearer is that token as the client presented it: the subject token a group's token
	// exchange trades for one of its own. Kept in memory with the call only (never
	// journaled, logged or put on a span).
	bearer string
}

var (
	registryPrefix     = "/" + toolpb.ToolRegistryService_ServiceDesc.ServiceName + "/"
	orchestratorPrefix = "/" + toolpb.OrchestratorService_ServiceDesc.ServiceName + "/"
)

// callerKey carries the verified principal of a client call.
type callerKey struct{}

// withCaller is ctx carrying the verified principal of its call, and its bearer token
// for the calls made on its behalf (a run's, an MCP session's: toolinternal.SubjectFrom).
func withCaller(ctx context.Context, p principal) context.Context {
	if p.bearer != "" {
		ctx = toolinternal.WithSubject(ctx, p.bearer)
	}
	return context.WithValue(ctx, callerKey{}, p)
}

// callerOf is the verified principal of the call (zero when nothing authenticated it).
func callerOf(ctx context.Context) principal {
	p, _ := ctx.Value(callerKey{}).(principal)
	return p
}

// runCaller is the verified caller of the call as a run keeps it, for call policies.
func runCaller(ctx context.Context) run.Caller {
	p := callerOf(ctx)
	c := run.Caller{ID: p.who, Scopes: strings.Fields(p.scopes)}
	if p.claims != "" {
		c.Claims = json.RawMessage(p.claims)
	}
	return c
}

// tenantOf is the verified tenant of the call ("" without tenancy).
func tenantOf(ctx context.Context) string { return callerOf(ctx).tenant }

// whoOf is who the verified client of the call is: its SPIFFE ID, or its token's
// issuer#subject; "" when nothing authenticated it.
func whoOf(ctx context.Context) string { return callerOf(ctx).who }

func (a *authorizer) authorize(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	id, hasID := trust.PeerID(ctx)
	if strings.HasPrefix(method, registryPrefix) {
		if !a.cfg.TLS.Enabled() {
			return ctx, nil
		}
		if !hasID {
			return nil, unauthenticated()
		}
		if _, ok := a.cfg.Trust.Grant(id.String()); !ok {
			a.audit("registration refused: identity not granted", "identity", id.String())
			return nil, statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("identity %s may not register workers: trust.workers grants it nothing", id), nil)
		}
		return ctx, nil
	}
	p, err := a.client(id, hasID, bearer(ctx), method, strings.HasPrefix(method, orchestratorPrefix) || method == "")
	if err != nil {
		return nil, err
	}
	if p == (principal{}) {
		return ctx, nil
	}
	return withCaller(ctx, p), nil
}

// client authenticates a client by its bearer token (raw, "" for none) or its
// certificate's identity (id, when hasID), for method (what it calls, for the audit
// log), and finds its tenant. listed says whether trust.clients applies to the call.
func (a *authorizer) client(id spiffeid.ID, hasID bool, raw, method string, listed bool) (principal, error) {
	return a.clientFor(id, hasID, raw, method, listed, "")
}

// clientFor is client with the audience a bearer token must be for ("": auth.jwt.audience).
func (a *authorizer) clientFor(id spiffeid.ID, hasID bool, raw, method string, listed bool, audience string) (principal, error) {
	var p principal
	hasToken := false
	if raw != "" && a.tokens != nil {
		if audience == "" {
			audience = a.tokens.cfg.Audience
		}
		v, err := a.tokens.verifyFor(raw, audience)
		if err != nil {
			a.audit("client call refused: bad bearer token", "method", method, "error", wire.Truncate(err.Error(), 256))
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED, err.Error(), nil)
		}
		p, hasToken = principal{tenant: v.tenant, who: v.who, scopes: v.scopes, token: true, claims: v.claims, bearer: raw}, true
	}
	if !hasToken {
		switch {
		case a.cfg.TLS.Enabled() && !hasID:
			return p, unauthenticated()
		case a.tokens != nil && !hasID:
			// Bearer tokens are how callers authenticate here: a call without one (and
			// without a certificate) is nobody's, and is not served.
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
				"this orchestrator authenticates its callers (auth.jwt): present a bearer token", nil)
		case a.cfg.TLS.Enabled() && len(a.cfg.Trust.Clients) > 0 && !slices.Contains(a.cfg.Trust.Clients, id.String()) && listed:
			a.audit("client call refused: identity not listed", "identity", id.String(), "method", method)
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("identity %s may not call the orchestrator: trust.clients does not list it", id), nil)
		}
		if hasID {
			p.who = id.String()
			p.tenant, _ = a.cfg.TenantOfClient(id.String())
		}
	}
	tenant := p.tenant
	if len(a.cfg.Tenants) > 0 {
		switch _, ok := a.cfg.Tenants[tenant]; {
		case tenant == "" && hasID:
			a.audit("client call refused: identity of no tenant", "identity", id.String(), "method", method)
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("identity %s acts for no tenant (tenants.<name>.clients)", id), nil)
		case tenant == "":
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
				"this orchestrator serves tenants: present a bearer token with a tenant claim, or a tenant's client certificate", nil)
		case !ok:
			a.audit("client call refused: unknown tenant", "tenant", wire.Truncate(tenant, 128), "method", method)
			return p, statusError(toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
				fmt.Sprintf("tenant %q is not one this orchestrator serves", wire.Truncate(tenant, 128)), nil)
		}
	}
	return p, nil
}

func unauthenticated() error {
	return statusError(toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
		"mutual TLS is on: present a client certificate with a SPIFFE ID that the orchestrator's CA bundle vouches for", nil)
}

// bearer is the call's bearer token, if any. It reads the one key rather than copying
// the call's whole metadata (FromIncomingContext), which every call would pay for.
func bearer(ctx context.Context) string {
	return bearerOf(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// bearerOf is the token of the first "Bearer <token>" among Authorization values.
func bearerOf(values []string) string {
	for _, v := range values {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// runKey is the id under which the run service and the journal know the run a client of
// tenant calls id: with tenancy, the tenant's name and the id, so that the run ids of
// one tenant's clients are theirs alone. A client that names another tenant's run id
// starts a run of its own; it learns nothing of the other (it used to be refused as if
// the run were its own). Run ids have no slash (wire.RunIDRE): the key's last one
// separates the id.
func runKey(tenant, id string) string {
	if tenant == "" {
		return id
	}
	return tenant + "/" + id
}

// keyTenant is the tenant of a run key (see runKey): "" without tenancy.
func (s *Server) keyTenant(key string) string {
	if len(s.cfg.Tenants) == 0 {
		return ""
	}
	t, _, _ := strings.Cut(key, "/")
	return t
}

// clientRunID is the run id a client knows a run key by (see runKey).
func clientRunID(key string) string {
	return key[strings.LastIndexByte(key, '/')+1:]
}

// resolveRun is the key of the run the caller calls id, or NOT_FOUND when it has none
// of that id: its tenant's run, or one it knows by its key (a run of a journal written
// before run ids were the tenant's, or a nested run, whose id the run service gives).
func (s *Server) resolveRun(ctx context.Context, id string) (string, error) {
	if tenant := tenantOf(ctx); tenant != "" {
		key := runKey(tenant, id)
		if owner, err := s.runs.TenantOf(ctx, key); err == nil && owner == tenant {
			return key, nil
		}
	}
	if err := s.ownRun(ctx, id); err != nil {
		return "", err
	}
	return id, nil
}

// ownRun refuses a run of another tenant as if it did not exist.
func (s *Server) ownRun(ctx context.Context, id string) error {
	caller := tenantOf(ctx)
	if caller == "" && len(s.cfg.Tenants) == 0 {
		return nil
	}
	owner, err := s.runs.TenantOf(ctx, id)
	switch {
	case errors.Is(err, run.ErrNotFound):
		return notFound(err).status()
	case err != nil:
		return statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	case owner != caller:
		return notFound(fmt.Errorf("%w %q", run.ErrNotFound, id)).status()
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

// usable reports which tools the caller's tenant may see and use: those of its groups
// its tools patterns match (tenants.<name>.tools), and the orchestrator's own.
func (s *Server) usable(ctx context.Context) func(role, name string) bool {
	t, ok := s.cfg.Tenants[tenantOf(ctx)]
	if !ok {
		return func(string, string) bool { return true }
	}
	return func(role, name string) bool {
		_, builtin := process.Groups[role]
		return builtin || t.Allows(role, name)
	}
}

// overTenantSize refuses a request larger than the caller's tenant may send
// (tenants.<name>.max_request_bytes).
func (s *Server) overTenantSize(ctx context.Context, req proto.Message) *fieldError {
	t, ok := s.cfg.Tenants[tenantOf(ctx)]
	if !ok || t.MaxRequestBytes <= 0 {
		return nil
	}
	if n := proto.Size(req); n > t.MaxRequestBytes {
		return &fieldError{reason: toolpb.ErrorReason_ERROR_REASON_TENANT_QUOTA, field: "request",
			desc: fmt.Sprintf("is %d bytes; tenant %q's requests are at most %d (tenants.%s.max_request_bytes)", n, tenantOf(ctx), t.MaxRequestBytes, tenantOf(ctx))}
	}
	return nil
}

// visible reports which tool groups the caller's tenant may see and use: every group
// without a tenant grant, else the tenant's groups and the orchestrator's own.
func (s *Server) visible(ctx context.Context) func(role string) bool {
	t, ok := s.cfg.Tenants[tenantOf(ctx)]
	if !ok {
		return func(string) bool { return true }
	}
	return func(role string) bool {
		_, builtin := process.Groups[role]
		return builtin || slices.Contains(t.Groups, role)
	}
}
