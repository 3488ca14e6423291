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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
		Catalog: func(ctx context.Context) []tool.Tool { return s.runs.CatalogFor(ctx, tenantOf(ctx)) },
		Session: func(ctx context.Context) (func(tool.Tool) tool.Tool, toolctx.Context) {
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
			return wrap, fixed
		},
		// Each request is granted the tools its own token's scopes grant: neither listed
		// nor callable are the others (the scopes do not narrow the session itself,
		// which a step-up to more scopes goes on using).
		Grant:    s.requestGrant,
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

// scopeGrant is which tools a caller with a token of scopes (space-separated) may list
// and call (mcp_serve.scopes), or nil when scopes do not limit it: none are configured.
func (s *Server) scopeGrant(scopes string) func(name string) bool {
	if len(s.cfg.MCPServe.Scopes) == 0 {
		return nil
	}
	var patterns []string
	for _, scope := range strings.Fields(scopes) {
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

// requestGrant is which tools an MCP request (extra, as the SDK hands it on) may list
// and call: those its token's scopes grant (mcpAuth hands them on as the SDK's token
// info); nil, all, for a request without a token (a certificate's, or an endpoint
// without authentication). A request that brings a bearer token whose grant did not
// reach the SDK is granted nothing.
func (s *Server) requestGrant(extra *sdk.RequestExtra) func(name string) bool {
	if len(s.cfg.MCPServe.Scopes) == 0 || extra == nil {
		return nil
	}
	if extra.TokenInfo == nil {
		if bearerOf(extra.Header.Values("Authorization")) != "" {
			return func(string) bool { return false }
		}
		return nil
	}
	return s.scopeGrant(strings.Join(extra.TokenInfo.Scopes, " "))
}

// requiredScopes are the scopes of mcp_serve.scopes that grant the tool name, sorted.
func (s *Server) requiredScopes(name string) []string {
	var out []string
	for scope, patterns := range s.cfg.MCPServe.Scopes {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, name); ok {
				out = append(out, scope)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// catalogueHolds reports whether the tenant's catalogue holds a tool of that name, at its top or
// under facades that unfold without a worker.
func catalogueHolds(ts []tool.Tool, name string, depth int) bool {
	for _, t := range ts {
		if t.Definition().Name == name {
			return true
		}
		if f, ok := tool.As[tool.Facade](t); ok && f.Kind() != tool.FacadeSelectable && depth < 32 && catalogueHolds(f.Children(), name, depth+1) {
			return true
		}
	}
	return false
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
	// server is the orchestrator's: its catalogue and scopes, for a step-up's 403.
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
	// A session is its opener's: the same tenant and who. Its requests are granted what
	// their own tokens' scopes grant (a step-up's retry goes on in the session).
	c := mcpCaller{key: p.tenant + "\x00" + p.who, subject: p.who, tenant: p.tenant}
	r = r.WithContext(ctx)
	if p.token {
		if m.stepUp(w, r, p) {
			return
		}
		r = withTokenInfo(r, raw, p)
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
