package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// ServeOptions configure the orchestrator's MCP endpoint.
type ServeOptions struct {
	// Catalog returns the mesh's tools as a new session first sees them: worker tools,
	// MCP-group tools and facades.
	Catalog func(ctx context.Context) []tool.Tool
	// Decorate wraps every tool a session calls (the orchestrator's decorator chain:
	// spans, metrics, bounds).
	Decorate func(tool.Tool) tool.Tool
	// ContextHeaders are HTTP headers whose values join the ToolCallContext of the calls,
	// under the header's name in lower case; _meta entries with string values join it
	// too, except under those names: a header's entry comes from the header alone.
	ContextHeaders []string
	// Session, when set, is asked once per session, with the context of the request that
	// opened it, what the session's caller gets: wrap, which every tool the session is
	// offered goes through (its tenant's grants; nil keeps a tool out of the session),
	// and the context entries that override those the calls bring (its verified tenant).
	Session func(ctx context.Context) (wrap func(tool.Tool) tool.Tool, fixed toolctx.Context)
	// Tenant, when set, is asked once per session, with the context of the request that
	// opened it, for the tenant the session's caller was verified as ("" for none). Every
	// call of the session carries it (toolinternal.WithTenant): to a worker in its own
	// request field, to an MCP server under TenantMetaKey, shown to tools under
	// toolctx.TenantKey. Nothing the caller sends can change it.
	Tenant func(ctx context.Context) string
	// ProtocolVersions are the MCP revisions served (of ProtocolVersions); empty serves
	// 2026-07-28 and every earlier revision the go-sdk speaks.
	ProtocolVersions []string
	Logger           *slog.Logger
}

// NewHandler serves the mesh's tools over MCP streamable HTTP. Every MCP session has its
// own view of the catalogue: calling a facade replaces it with its children for that
// session alone, and the session hears notifications/tools/list_changed.
func NewHandler(opts ServeOptions) http.Handler {
	if opts.Decorate == nil {
		opts.Decorate = func(t tool.Tool) tool.Tool { return t }
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// The SDK's own guard against DNS rebinding (a request to a loopback address whose
	// Host is not a loopback name is refused) is left to the orchestrator's, which takes
	// the names it was told it answers to (server.allowed_hosts) and is not needed where
	// every request must bring credentials: the SDK's refused a reverse proxy on the same
	// machine that passes the public Host on.
	stateful := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		return newSessionServer(r.Context(), opts, false)
	}, &sdk.StreamableHTTPOptions{DisableLocalhostProtection: true})
	if len(opts.ProtocolVersions) > 0 && !slices.Contains(opts.ProtocolVersions, Protocol20260728) {
		return stateful
	}
	// A 2026-07-28 request is stateless: it names its revision in the MCP-Protocol-Version
	// header (as the revision requires) and is served by a server of its own; the rest
	// (initialize, and the requests of a 2025-11-25 session) are the stateful handler's.
	stateless := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		return newSessionServer(r.Context(), opts, true)
	}, &sdk.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true, DisableLocalhostProtection: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= Protocol20260728 {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
}

// sessionServer is the MCP server of one session.
type sessionServer struct {
	opts ServeOptions
	srv  *sdk.Server
	// wrap and fixed are the session caller's: see ServeOptions.Session.
	wrap  func(tool.Tool) tool.Tool
	fixed toolctx.Context
	// tenant is the session caller's verified tenant: see ServeOptions.Tenant.
	tenant string
	mu     sync.Mutex
	// offered are the tools the session sees, by name.
	offered map[string]tool.Tool
	// pass is what the session reaches of the MCP groups behind the endpoint besides
	// their tools (passthrough.go).
	pass passthrough
}

// newSessionServer is the server of a session or, stateless, of one request: there is
// then no session to unfold facades in, and the catalog is offered unfolded (flat).
func newSessionServer(ctx context.Context, opts ServeOptions, stateless bool) *sdk.Server {
	s := &sessionServer{opts: opts, offered: map[string]tool.Tool{}, wrap: func(t tool.Tool) tool.Tool { return t }}
	if opts.Session != nil {
		s.wrap, s.fixed = opts.Session(ctx)
	}
	if opts.Tenant != nil {
		s.tenant = opts.Tenant(ctx)
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "toolmesh", Version: "v1"}, &sdk.ServerOptions{
		// The MCP groups' resources, prompts and completions are passed through
		// (passthrough.go), and their tools' log messages.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true},
			Prompts: &sdk.PromptCapabilities{}, Resources: &sdk.ResourceCapabilities{Subscribe: true},
			Completions: &sdk.CompletionCapabilities{}, Logging: &sdk.LoggingCapabilities{}}, //nolint:staticcheck // logging is deprecated in 2026-07-28, not gone
		CompletionHandler: s.complete, SubscribeHandler: s.subscribe, UnsubscribeHandler: s.unsubscribe,
		// What a session lists depends on its caller (its tenant's tools) and on the
		// session itself (facades unfold per session): no one else may cache it, and it
		// changes with every unfolding.
		SetCacheable:              func(_ context.Context, _ sdk.Request, c *sdk.Cacheable) { c.CacheScope, c.TTLMs = "private", 0 },
		SupportedProtocolVersions: opts.ProtocolVersions,
	})
	s.srv.AddReceivingMiddleware(s.middleware)
	catalog := opts.Catalog(ctx)
	if stateless {
		catalog = flatten(catalog, 0)
	}
	s.add(catalog...)
	return s.srv
}

// flatten is ts with each facade that unfolds without a worker replaced by its
// children, and each selectable facade (whose selection binds state to a session) left
// out: what a stateless request is offered.
func flatten(ts []tool.Tool, depth int) []tool.Tool {
	var out []tool.Tool
	for _, t := range ts {
		f, ok := tool.As[tool.Facade](t)
		switch {
		case !ok:
			out = append(out, t)
		case f.Kind() != tool.FacadeSelectable && depth < maxFacadeDepth:
			out = append(out, flatten(f.Children(), depth+1)...)
		}
	}
	return out
}

// maxFacadeDepth bounds the facades flatten opens, one inside another.
const maxFacadeDepth = 32

// add offers ts to the session (a name already offered keeps its tool).
func (s *sessionServer) add(ts ...tool.Tool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		def := t.Definition()
		if _, dup := s.offered[def.Name]; dup {
			continue
		}
		wt := s.wrap(t)
		if wt == nil {
			continue // the session may not use it
		}
		s.reach(t, 0)
		dt := s.opts.Decorate(wt)
		s.offered[def.Name] = dt
		s.srv.AddTool(&sdk.Tool{Name: def.Name, Description: def.Description, InputSchema: json.RawMessage(def.InputSchema.JSON())}, s.handler(dt))
	}
}

// remove stops offering the tool of that name.
func (s *sessionServer) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.offered, name)
	s.srv.RemoveTools(name)
}

func (s *sessionServer) handler(t tool.Tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		ctx = toolctx.NewContext(ctx, s.callContext(req))
		asker := clientAsker(req)
		if asker != nil { // a tool's questions go to the client that declared elicitation
			ctx = toolinternal.WithAsker(ctx, asker)
		}
		if s.tenant != "" {
			ctx = toolinternal.WithTenant(ctx, s.tenant)
		}
		ctx = withRelay(ctx, req, s.pass.wantsLogs(req)) // progress and log messages to the client (notify.go)
		args := "{}"
		if len(req.Params.Arguments) > 0 {
			args = string(req.Params.Arguments)
		}
		if f, ok := tool.As[tool.Facade](t); ok {
			return s.unfold(ctx, f, args), nil
		}
		canonical, err := t.Definition().InputSchema.Validate(args)
		if err != nil {
			return errorResult(fmt.Sprintf("invalid arguments for tool '%s': %v", t.Definition().Name, err)), nil
		}
		res, err := toolcall.Invoke(ctx, s.opts.Logger, t, canonical)
		if q := inputRequired(asker); q != nil { // the tool asked what the client answers next round
			return q, nil
		}
		if err != nil {
			// A control-flow signal has no meaning outside a run: say what it asked.
			return errorResult(fmt.Sprintf("tool '%s' signalled: %v", t.Definition().Name, err)), nil
		}
		return resultFor(res), nil
	}
}

// unfold answers a call of a facade: the tools it selects join the session and the facade
// leaves it (the session hears tools/list_changed), and the answer is the unfold text. A
// selectable facade's selector runs once, on a worker, and the tools it selects are bound
// to the state it returns, for this session alone.
func (s *sessionServer) unfold(ctx context.Context, f tool.Facade, args string) *sdk.CallToolResult {
	canonical, err := f.Definition().InputSchema.Validate(args)
	if err != nil {
		return errorResult(fmt.Sprintf("invalid arguments for tool '%s': %v", f.Definition().Name, err))
	}
	selected, err := f.Select(ctx, canonical)
	if err != nil {
		return errorResult(err.Error())
	}
	var names []string
	for _, t := range selected {
		if t != nil {
			names = append(names, t.Definition().Name)
		}
	}
	if len(names) == 0 {
		return errorResult(fmt.Sprintf("facade '%s' selected no tools", f.Definition().Name))
	}
	s.add(selected...)
	s.remove(f.Definition().Name)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: toolinternal.UnfoldMessage(names, f.Options().UsageNotes)}}}
}

// callContext is the ToolCallContext of an MCP call: the string entries of _meta, then
// the allow-listed headers, then the session's fixed entries (which win over both). An
// entry named after an allow-listed header comes from that header only, never from
// _meta: a gateway in front of the endpoint sets the header, and a client must not
// override it, nor fill it in when the gateway left it out. Reserved keys are left out,
// and so are toolmesh's own _meta keys (MetaPrefix).
func (s *sessionServer) callContext(req *sdk.CallToolRequest) toolctx.Context {
	m := map[string]string{}
	for k, v := range req.Params.Meta {
		if str, ok := v.(string); ok && k != "progressToken" && !strings.HasPrefix(k, MetaPrefix) && !strings.HasPrefix(k, ProtocolMetaPrefix) {
			m[k] = str
		}
	}
	for _, h := range s.opts.ContextHeaders {
		key := strings.ToLower(h)
		delete(m, key)
		if req.Extra != nil {
			if v := req.Extra.Header.Get(h); v != "" {
				m[key] = v
			}
		}
	}
	return toolctx.FromMap(m).WithoutReserved().Merge(s.fixed)
}

func errorResult(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}

// resultFor maps a tool result to MCP: an error is isError, an artifact's JSON is the
// structured content beside its text.
func resultFor(res tool.Result) *sdk.CallToolResult {
	if res.IsError() {
		return errorResult(res.Content)
	}
	out := &sdk.CallToolResult{Content: contentOf(res)} // images, audio and resources as they came
	if a := res.Artifact; a != nil && len(a.JSON) > 0 {
		var v any
		if json.Unmarshal(a.JSON, &v) == nil {
			if _, isObject := v.(map[string]any); isObject { // MCP wants an object
				out.StructuredContent = v
			}
		}
	}
	return out
}
