package server

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// MCPHandler serves the mesh's tools to MCP clients over streamable HTTP: the tools of
// the worker and MCP groups, each session with its own unfolding, calls through the
// run's decorator chain (spans, metrics, bounds) and the groups' converters.
//
// With tls, auth.jwt or tenants configured, every request is authenticated as a call of
// OrchestratorService is — a bearer token, or the client certificate the handshake
// verified (the listener must then be TLS: cmd/orchestrator serves it over HTTPS with
// the orchestrator's certificate) — and a session is its tenant's: it is offered only
// the tenant's groups, its calls carry the verified tenant (in the call's own field, shown
// under toolctx.TenantKey, and as tenant_id) and are held to the tenant's tool-call
// budget, and no other caller may use it.
func (s *Server) MCPHandler() (http.Handler, error) {
	h := mcp.NewHandler(mcp.ServeOptions{
		Catalog:  func(ctx context.Context) []tool.Tool { return s.runs.CatalogFor(ctx, tenantOf(ctx)) },
		Session:  s.mcpView,
		Tenant:   tenantOf,
		Decorate: s.runs.Decorate, ContextHeaders: s.cfg.MCPServe.ContextHeaders, Logger: s.log,
		ProtocolVersions: s.cfg.MCPServe.ProtocolVersions,
	})
	sessions := newMCPSessions(h, func(msg string, kv ...any) { s.auth.audit(msg, kv...) })
	if !s.auth.enabled() {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sessions.serve(w, r, mcpCaller{}) }), nil
	}
	auth := &mcpAuth{a: s.auth, sessions: sessions, server: s}
	resource := s.cfg.MCPServe.Resource
	if resource == "" || s.auth.tokens == nil {
		return auth, nil
	}
	// A protected resource (RFC 9728): its metadata at the well-known paths, public; the
	// rest authenticated, with tokens issued for it.
	prm := map[string]any{
		"resource": resource, "authorization_servers": []string{s.cfg.Auth.JWT.Issuer},
		"bearer_methods_supported": []string{"header"}, "resource_name": "toolmesh",
	}
	if len(s.cfg.MCPServe.Scopes) > 0 {
		prm["scopes_supported"] = slices.Sorted(maps.Keys(s.cfg.MCPServe.Scopes))
	}
	meta, err := json.Marshal(prm)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(resource)
	if err != nil {
		return nil, err
	}
	auth.audience = resource
	auth.metadataURL = u.Scheme + "://" + u.Host + wellKnownPRM + strings.TrimSuffix(u.Path, "/")
	auth.scopes = strings.Join(slices.Sorted(maps.Keys(s.cfg.MCPServe.Scopes)), " ")
	mux := http.NewServeMux()
	serveMeta := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(meta)
	}
	mux.HandleFunc("GET "+wellKnownPRM, serveMeta)
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		mux.HandleFunc("GET "+wellKnownPRM+p, serveMeta)
	}
	mux.Handle("/", auth)
	return mux, nil
}

// mcpView is what the MCP session of ctx's caller gets: wrap, which every tool it is
// offered goes through (its tenant's grants, its call policies, its token's scopes; nil
// keeps a tool out), and the context entries that override those its calls bring.
func (s *Server) mcpView(ctx context.Context) (func(tool.Tool) tool.Tool, toolctx.Context) {
	wrap, fixed := s.runs.TenantView(tenantOf(ctx))
	if s.cfg.HasPolicies() {
		policy, tenantWrap := s.runs.PolicyView(tenantOf(ctx), runCaller(ctx)), wrap
		wrap = func(t tool.Tool) tool.Tool {
			if t = tenantWrap(t); t == nil {
				return nil
			}
			return policy(t) // nil: the policy denies the caller every call of it
		}
	}
	if granted := s.scopeGrant(ctx); granted != nil {
		tenantWrap := wrap
		wrap = func(t tool.Tool) tool.Tool {
			if !granted(t.Definition().Name) {
				return nil // not granted to the token's scopes: neither listed nor callable
			}
			return tenantWrap(t)
		}
	}
	return wrap, fixed
}

// scopeGrant is which tools the session of ctx's caller may list and call by its token's
// scopes (mcp_serve.scopes), or nil when scopes do not limit it: none are configured, or
// the caller came without a token (a certificate).
func (s *Server) scopeGrant(ctx context.Context) func(name string) bool {
	p := callerOf(ctx)
	if len(s.cfg.MCPServe.Scopes) == 0 || !p.token {
		return nil
	}
	var patterns []string
	for _, scope := range strings.Fields(p.scopes) {
		patterns = append(patterns, s.cfg.MCPServe.Scopes[scope]...)
	}
	return func(name string) bool {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, name); ok {
				return true
			}
		}
		return false
	}
}

// wellKnownPRM is where a protected resource publishes its metadata (RFC 9728): at the
// origin's root, or with the resource's path after it.
const wellKnownPRM = "/.well-known/oauth-protected-resource"

// mcpSessionHeader is the header of streamable HTTP that names a session.
const mcpSessionHeader = "Mcp-Session-Id"

// mcpAuth authenticates the requests of the MCP endpoint and binds each session to the
// caller that opened it.
type mcpAuth struct {
	a        *authorizer
	sessions *mcpSessions
	// audience is what a bearer token must be issued for (mcp_serve.resource; "":
	// auth.jwt.audience), metadataURL where the endpoint's protected resource metadata is
	// (named in a 401's challenge; "": none).
	audience, metadataURL string
	// scopes are the scopes that grant tools (mcp_serve.scopes), space-separated, named
	// in a 401's challenge ("": none).
	scopes string
	// server is the orchestrator's: what a session is offered, for a step-up's 403.
	server *Server
}

// challenge is a 401's WWW-Authenticate: the realm, where the resource's metadata is
// (so that an MCP client finds its authorization server), and invalid_token when the
// request brought one that was refused.
func (m *mcpAuth) challenge(hadToken bool) string {
	c := `Bearer realm="toolmesh"`
	if m.metadataURL != "" {
		c += `, resource_metadata="` + m.metadataURL + `"`
	}
	if m.scopes != "" {
		c += `, scope="` + m.scopes + `"` // what a client asks its authorization server for
	}
	if hadToken {
		c += `, error="invalid_token"`
	}
	return c
}

func (m *mcpAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var id spiffeid.ID
	hasID := false
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		// Verified against the CA bundle by the handshake (trust.Source.ServerTLS).
		if x, err := x509svid.IDFromCert(r.TLS.PeerCertificates[0]); err == nil {
			id, hasID = x, true
		}
	}
	raw := bearerOf(r.Header.Values("Authorization"))
	p, err := m.a.clientFor(id, hasID, raw, "MCP "+r.Method, true, m.audience)
	if err != nil {
		st := status.Convert(err)
		code := http.StatusForbidden
		if st.Code() == codes.Unauthenticated {
			code = http.StatusUnauthorized
			if m.a.tokens != nil {
				w.Header().Set("WWW-Authenticate", m.challenge(raw != ""))
			}
		}
		http.Error(w, st.Message(), code)
		return
	}
	ctx := r.Context()
	if p != (principal{}) {
		ctx = withCaller(ctx, p)
	}
	// A session is its opener's: the same tenant, who, and scopes (a narrower token
	// does not use a session a wider one opened, nor the session of a token it refreshed
	// under other grants).
	c := mcpCaller{key: p.tenant + "\x00" + p.who + "\x00" + p.scopes, subject: p.who, tenant: p.tenant}
	r = r.WithContext(ctx)
	if p.token && m.stepUp(w, r, p, c) {
		return
	}
	m.sessions.serve(w, r, c, "tenant", p.tenant, "caller", p.who)
}

// sessionOpener hands open the session id of a response that opens a session, before
// the response's header is written: the client cannot use the session before it is
// bound.
type sessionOpener struct {
	http.ResponseWriter
	open   func(sid string)
	opened bool
}

func (s *sessionOpener) WriteHeader(code int) {
	if !s.opened {
		s.opened = true
		if sid := s.Header().Get(mcpSessionHeader); sid != "" && code < 300 {
			s.open(sid)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionOpener) Write(b []byte) (int, error) {
	if !s.opened {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

// Flush keeps server-sent events flowing through the wrapper.
func (s *sessionOpener) Flush() {
	if !s.opened {
		s.WriteHeader(http.StatusOK)
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *sessionOpener) Unwrap() http.ResponseWriter { return s.ResponseWriter }
