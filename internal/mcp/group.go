// Package mcp connects MCP servers to the mesh: a server (stdio or streamable HTTP,
// through the official go-sdk) becomes a tool group whose tools the loop calls like any
// other.
//
// A Group connects lazily, on first use, and keeps its session; a session that breaks is
// dropped and the next use connects again (no sooner than a backoff after the last
// failure). A streamable-HTTP server that authenticates each caller takes headers from
// the call's ToolCallContext (Server.ContextHeaders, after the group's converter): the
// group then keeps one session per distinct set of those values, so one caller's token
// never serves another caller's call, and closes a session that stays idle. Before every call the group's ToolCallContext converter is applied and what
// survives travels as the request's _meta (absent when the context is empty; an empty
// object when the converter keeps nothing). The call's deadline and cancellation reach the
// server as MCP cancellation; progress notifications become the call's progress reports;
// isError results become error results, structured content an artifact with its JSON.
//
// It sits beside internal/router (both turn remote tools into tool.Tool values for the run
// service) and imports no gRPC.
package mcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Server says how to reach an MCP server: a command to run (stdio) or a URL (streamable
// HTTP).
type Server struct {
	// Name identifies the server in logs and errors.
	Name string
	// Command, Args, Env and Dir start a stdio server; Env adds to the orchestrator's
	// environment.
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// URL and Headers reach a streamable-HTTP server.
	URL     string
	Headers map[string]string
	// ContextHeaders name ToolCallContext keys (as the group's converter leaves them)
	// whose values become HTTP headers of that name, such as "Authorization": calls with
	// different values use different sessions.
	ContextHeaders []string
	// Timeout bounds one tool call; zero means DefaultTimeout.
	Timeout time.Duration
	// TLS, when set, is the TLS configuration of an https URL: the CA bundle the server
	// is verified against, the client certificate it may ask for.
	TLS *tls.Config
	// ProtocolVersion pins the MCP revision (one of ProtocolVersions): a server that
	// does not speak it is refused. Empty: the newest both sides speak (2026-07-28 when
	// the server answers server/discover, else the initialize handshake's).
	ProtocolVersion string
}

// DefaultTimeout bounds a tool call of a server that sets no timeout.
const DefaultTimeout = 30 * time.Second

// connectTimeout bounds connecting and listing the tools.
const connectTimeout = 20 * time.Second

// Backoff between failed connections: it doubles with each failure in a row, from
// reconnectBackoff to maxBackoff, and starts again after a success. A stdio server that
// keeps dying is so restarted, on use, ever less often.
const (
	reconnectBackoff = time.Second
	maxBackoff       = 30 * time.Second
)

// Options configure a Group.
type Options struct {
	Server Server
	// Role is the role of the tool group the server's tools form; default the server's
	// name.
	Role string
	// Filter keeps the tools it is true for; nil keeps all.
	Filter func(ToolInfo) bool
	// Converter chooses what of the ToolCallContext travels as _meta; nil passes all.
	Converter ctxconv.Converter
	// Credentials, when set, gives a call's own credentials for the group (a token
	// exchanged for the caller's, a tenant's secret): ToolCallContext entries, which
	// replace the run's of those keys and pass the converter (which must forward them) to
	// _meta or, for a key of Server.ContextHeaders, a header; and headers of the session,
	// which is kept per set of their values. Its error, written for the model, keeps the
	// call from being sent.
	Credentials func(ctx context.Context) (entries, headers map[string]string, err error)
	// MaxTools bounds the tools the server may offer; zero means DefaultMaxTools. A server
	// that offers more is refused, as one that cannot be reached is.
	MaxTools int
	Logger   *slog.Logger
}

// Group is one MCP server as a tool group. It is safe for concurrent use.
type Group struct {
	opts Options
	log  *slog.Logger

	// orders are the sessions' log orders (logorder.go), by *sdk.ClientSession, while
	// they last.
	orders sync.Map

	mu       sync.Mutex
	closed   bool
	sessions map[string]*session           // by credential (see credentials); "" without ContextHeaders
	opening  map[string]*opening           // connections in progress, by credential
	calls    map[uint64]context.CancelFunc // calls in flight, ended by Close
	nextCall uint64
	tools    []tool.Tool // the filtered tools; nil until listed
	stale    bool        // the server said its tools changed
	failedAt time.Time
	failures int // failed connections (or sessions that ended) in a row
	lastErr  error

	progress sync.Map // progress token → func(*sdk.ProgressNotificationParams)
	nextTok  uint64
	// inflight are the calls in flight by session, for a server's questions (input.go).
	inflight inflight
	// version counts the server's tools/list_changed notifications.
	version atomic.Uint64

	// logging holds the sessions whose server was asked for its log messages, recent
	// the last call that ended on each session (notify.go).
	logging, recent sync.Map
	// subscribers are the endpoint's sessions subscribed to the server's resources
	// (passthrough.go).
	subscribers subscribers
}

// Version counts the times the server said its tools changed: a loop that offers the
// group compares it to see whether to refresh its tools.
func (g *Group) Version() uint64 { return g.version.Load() }

// New returns a group that connects on first use.
func New(opts Options) (*Group, error) {
	s := opts.Server
	if (s.Command == "") == (s.URL == "") {
		return nil, fmt.Errorf("mcp server %q: give exactly one of command and url", s.Name)
	}
	if v := s.ProtocolVersion; v != "" && !slices.Contains(ProtocolVersions, v) {
		return nil, fmt.Errorf("mcp server %q: protocol version %q is none of %s", s.Name, v, strings.Join(ProtocolVersions, ", "))
	}
	if opts.Converter == nil {
		opts.Converter = ctxconv.PassThrough()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Role == "" {
		opts.Role = s.Name
	}
	if opts.MaxTools <= 0 {
		opts.MaxTools = DefaultMaxTools
	}
	return &Group{opts: opts, log: opts.Logger.With("mcp_server", s.Name)}, nil
}

// Role is the role of the group.
func (g *Group) Role() string { return g.opts.Role }

// Globs returns a filter that keeps the names matching one of include (all when include is
// empty) and none of exclude; patterns are path.Match globs.
func Globs(include, exclude []string) func(ToolInfo) bool {
	match := func(pats []string, name string) bool {
		for _, p := range pats {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	return func(t ToolInfo) bool {
		return (len(include) == 0 || match(include, t.Name)) && !match(exclude, t.Name)
	}
}

// ToolInfo is what a filter sees of a server's tool.
type ToolInfo struct {
	Name, Description string
	// Annotations are the server's hints, by the names the config's filters use:
	// title, read_only, destructive, idempotent, open_world; a hint the server does not
	// give is absent.
	Annotations map[string]any
}

// infoOf is what a filter sees of t.
func infoOf(t *sdk.Tool) ToolInfo {
	info := ToolInfo{Name: t.Name, Description: t.Description, Annotations: map[string]any{}}
	if a := t.Annotations; a != nil {
		if a.Title != "" {
			info.Annotations["title"] = a.Title
		}
		info.Annotations["read_only"] = a.ReadOnlyHint
		info.Annotations["idempotent"] = a.IdempotentHint
		if a.DestructiveHint != nil {
			info.Annotations["destructive"] = *a.DestructiveHint
		}
		if a.OpenWorldHint != nil {
			info.Annotations["open_world"] = *a.OpenWorldHint
		}
	}
	return info
}

// session is one MCP session of the group and when it was last used.
type session struct {
	s        *sdk.ClientSession
	lastUsed time.Time
}

// Bounds of the sessions of a group that keeps one per credential.
const (
	maxSessions = 256
	idleAfter   = 5 * time.Minute
)

// Connected reports whether the group has a live session (for tests and listings).
func (g *Group) Connected() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions) > 0
}

// Sessions is the number of live sessions.
func (g *Group) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

// errClosed refuses the use of a closed group.
var errClosed = errors.New("the orchestrator closed its MCP sessions")

// Tools returns the server's tools the filter keeps, connecting first if need be (with
// the credentials of ctx's ToolCallContext, for a server that takes them). It waits for
// the connection at most as long as ctx lets it; the connection goes on for the next
// caller.
func (g *Group) Tools(ctx context.Context) ([]tool.Tool, error) {
	key, headers, err := g.credentials(ctx)
	if err != nil {
		// No credentials for this caller (a run taken over has not its caller's token):
		// the tools an earlier session listed, else those a session without credentials
		// lists. The calls themselves say why they fail.
		g.mu.Lock()
		known := slices.Clone(g.tools)
		g.mu.Unlock()
		if known != nil {
			return known, nil
		}
		key, headers = "", nil
	}
	if _, err := g.acquire(ctx, key, headers, true); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.tools), nil
}

// isHeader reports whether a context key travels as a header (Server.ContextHeaders).
func (g *Group) isHeader(key string) bool {
	for _, name := range g.opts.Server.ContextHeaders {
		if strings.EqualFold(name, key) {
			return true
		}
	}
	return false
}

// credentials is the session key and the headers of the call in ctx: the values of
// Server.ContextHeaders in its ToolCallContext (with the group's credentials) after the
// group's converter, and the headers of the group's credentials. Its error says why the
// call has no credentials, or that the converter drops them.
func (g *Group) credentials(ctx context.Context) (string, map[string]string, error) {
	names := g.opts.Server.ContextHeaders
	var entries, own map[string]string
	if g.opts.Credentials != nil {
		var err error
		if entries, own, err = g.opts.Credentials(ctx); err != nil {
			return "", nil, err
		}
	}
	if len(names) == 0 && len(own) == 0 && len(entries) == 0 {
		return "", nil, nil
	}
	bag := g.outgoingWith(ctx, entries)
	for k, v := range entries {
		if got, ok := bag.Get(k); !ok || got != v {
			return "", nil, fmt.Errorf("the converter of group '%s' does not forward its credential %q; an operator must list it in an allow-keys converter", g.opts.Role, k)
		}
	}
	headers := map[string]string{}
	var key strings.Builder
	for _, name := range names {
		for k, v := range bag.Map() {
			if strings.EqualFold(k, name) {
				headers[name] = v
				key.WriteString(name + "\x00" + v + "\x00")
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(own)) {
		headers[name] = own[name]
		key.WriteString(name + "\x00" + own[name] + "\x00")
	}
	return key.String(), headers, nil
}

// outgoing is the ToolCallContext the call in ctx carries to the server: the run's, with
// the group's credentials (Options.Credentials), through the group's converter.
func (g *Group) outgoing(ctx context.Context) toolctx.Context {
	var entries map[string]string
	if g.opts.Credentials != nil {
		entries, _, _ = g.opts.Credentials(ctx) // a call without them does not get this far
	}
	return g.outgoingWith(ctx, entries)
}

func (g *Group) outgoingWith(ctx context.Context, entries map[string]string) toolctx.Context {
	bag := toolcall.Carried(ctx)
	for k, v := range entries {
		bag = bag.With(k, v)
	}
	return g.opts.Converter.Convert(bag)
}

// ToolByName returns the tool of that exact name, or false.
func (g *Group) ToolByName(ctx context.Context, name string) (tool.Tool, bool) {
	ts, err := g.Tools(ctx)
	if err != nil {
		g.log.WarnContext(ctx, "mcp tools unavailable", "tool", name, "error", err.Error())
		return nil, false
	}
	for _, t := range ts {
		if t.Definition().Name == name {
			return t, true
		}
	}
	g.log.WarnContext(ctx, "mcp tool not found", "tool", name)
	return nil, false
}

// RequiredToolByName returns the tool of that exact name, or an error that lists the
// tools there are.
func (g *Group) RequiredToolByName(ctx context.Context, name string) (tool.Tool, error) {
	ts, err := g.Tools(ctx)
	var names []string
	for _, t := range ts {
		if t.Definition().Name == name {
			return t, nil
		}
		names = append(names, t.Definition().Name)
	}
	if len(names) == 0 {
		if err != nil { // why there are none is the operator's to read, in the log
			g.log.WarnContext(ctx, "mcp tools unavailable", "tool", name, "error", err.Error())
		}
		msg := fmt.Sprintf("MCP tool '%s' not found. No MCP tools are available - check MCP client connections.", name)
		return nil, errors.New(msg)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("MCP tool '%s' not found. Available tools: %s", name, strings.Join(names, ", "))
}

// Close ends the sessions and the calls in flight, and refuses later uses.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closed = true
	sessions := g.sessions
	g.sessions, g.tools = nil, nil
	cancels := g.calls
	g.calls = nil
	g.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	var errs []error
	for _, s := range sessions {
		errs = append(errs, s.s.Close())
	}
	return errors.Join(errs...)
}

// opening is a connection (and listing) in progress; done closes when it ends.
type opening struct {
	done chan struct{}
	err  error
}

// acquire returns the session of key, opening it in the background when there is none
// (and listing the tools when list is set and they are not known or changed). The caller
// waits within its ctx; concurrent callers share one opening.
func (g *Group) acquire(ctx context.Context, key string, headers map[string]string, list bool) (*sdk.ClientSession, error) {
	for {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return nil, fmt.Errorf("mcp server %q: %w", g.opts.Server.Name, errClosed)
		}
		idle := g.sweepLocked(key)
		s := g.sessions[key]
		if s != nil && (!list || (g.tools != nil && !g.stale)) {
			s.lastUsed = time.Now()
			g.mu.Unlock()
			closeAll(idle)
			return s.s, nil
		}
		op := g.opening[key]
		if op == nil {
			if wait := g.backoffLocked(); !g.failedAt.IsZero() && time.Since(g.failedAt) < wait {
				err := fmt.Errorf("mcp server %q: cannot connect: %w (tried %s ago; the next try is %s after it)", g.opts.Server.Name, g.lastErr,
					time.Since(g.failedAt).Round(time.Millisecond), wait)
				g.mu.Unlock()
				closeAll(idle)
				return nil, err
			}
			op = &opening{done: make(chan struct{})}
			if g.opening == nil {
				g.opening = map[string]*opening{}
			}
			g.opening[key] = op
			var existing *sdk.ClientSession
			if s != nil {
				existing = s.s
			}
			go g.open(key, headers, existing, op)
		}
		g.mu.Unlock()
		closeAll(idle)
		select {
		case <-op.done:
			if op.err != nil {
				return nil, op.err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("mcp server %q: gave up waiting for the connection: %w", g.opts.Server.Name, ctx.Err())
		}
	}
}

// open connects (unless existing is a session of key already) and lists the tools when
// they are not known or changed, then records the outcome for the waiting callers.
func (g *Group) open(key string, headers map[string]string, existing *sdk.ClientSession, op *opening) {
	defer close(op.done)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	cs, fresh := existing, false
	fail := func(err error) {
		g.mu.Lock()
		delete(g.opening, key)
		g.failedAt, g.lastErr = time.Now(), err
		g.failures++
		if fresh || g.sessions[key] != nil && g.sessions[key].s == cs {
			delete(g.sessions, key)
		}
		g.mu.Unlock()
		if cs != nil {
			_ = cs.Close()
		}
		op.err = fmt.Errorf("mcp server %q: cannot connect: %w", g.opts.Server.Name, err)
	}
	start := time.Now()
	if cs == nil {
		order := &logOrder{}
		client := sdk.NewClient(&sdk.Implementation{Name: "toolmesh", Version: "v1"}, &sdk.ClientOptions{
			// Progress notifications and log messages go to the endpoint's client of
			// the call (notify.go), each counted once passed on (logorder.go), those of the
			// session's start too.
			ProgressNotificationHandler: func(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
				defer order.noteHandled()
				g.onProgress(ctx, req)
			},
			ToolListChangedHandler: g.onToolsChanged,
			ResourceUpdatedHandler: g.onResourceUpdated, // to the endpoint's subscribers (passthrough.go)
			// Sampling requests go to the endpoint's client of the call too.
			LoggingMessageHandler: func(ctx context.Context, req *sdk.LoggingMessageRequest) { //nolint:staticcheck // deprecated in 2026-07-28, not gone
				defer order.noteHandled()
				g.onLog(ctx, req)
			},
			CreateMessageHandler: g.sampler(), //nolint:staticcheck // deprecated in 2026-07-28, not gone
			// A tool's questions go to a person through the run (input.go): form
			// elicitation is declared, and input_required results come back to the call.
			ElicitationHandler: g.onElicit,
			MultiRoundTrip:     &sdk.MultiRoundTripOptions{Disabled: true},
		})
		var err error
		pin := g.opts.Server.ProtocolVersion
		// Initializing twice leaves at worst a session the server expires (replay.go).
		// The session keeps Connect's context: it is marked until Connect returns.
		cctx, connected := replayableUntil(ctx)
		cs, err = client.Connect(cctx, g.transport(headers, order), &sdk.ClientSessionOptions{ProtocolVersion: pin})
		connected()
		if err != nil {
			cs = nil
			fail(err)
			return
		}
		g.orders.Store(cs, order)
		go func(cs *sdk.ClientSession) {
			_ = cs.Wait()
			g.orders.Delete(cs)
		}(cs)
		if got := negotiated(cs); pin != "" && got != pin {
			fail(fmt.Errorf("it speaks MCP %s, not the pinned %s (mcp_servers.%s.protocol_version)", got, pin, g.opts.Server.Name))
			return
		}
		fresh = true
		g.log.InfoContext(ctx, "mcp server connected on first use", "took", time.Since(start).Round(time.Millisecond).String())
	}
	g.mu.Lock()
	needList := g.tools == nil || g.stale
	g.mu.Unlock()
	var tools []tool.Tool
	if needList {
		var err error
		if tools, err = g.list(ctx, cs); err != nil {
			fail(err)
			return
		}
	}
	g.mu.Lock()
	delete(g.opening, key)
	if g.closed {
		g.mu.Unlock()
		_ = cs.Close()
		op.err = fmt.Errorf("mcp server %q: %w", g.opts.Server.Name, errClosed)
		return
	}
	if g.sessions == nil {
		g.sessions = map[string]*session{}
	}
	g.sessions[key] = &session{s: cs, lastUsed: time.Now()}
	if needList {
		g.tools, g.stale = tools, false
	}
	g.failedAt, g.lastErr, g.failures = time.Time{}, nil, 0
	g.mu.Unlock()
	if fresh {
		go g.watch(key, cs)
	}
}

// sweepLocked takes out of the group the sessions idle for long and, beyond the bound,
// the least recently used, except key's; the caller closes them without the lock.
func (g *Group) sweepLocked(key string) []*sdk.ClientSession {
	var out []*sdk.ClientSession
	now := time.Now()
	for k, s := range g.sessions {
		if k != key && now.Sub(s.lastUsed) > idleAfter {
			out = append(out, s.s)
			delete(g.sessions, k)
		}
	}
	for len(g.sessions) >= maxSessions {
		oldest := ""
		for k, s := range g.sessions {
			if k != key && (oldest == "" || s.lastUsed.Before(g.sessions[oldest].lastUsed)) {
				oldest = k
			}
		}
		if oldest == "" {
			break
		}
		out = append(out, g.sessions[oldest].s)
		delete(g.sessions, oldest)
	}
	return out
}

func closeAll(ss []*sdk.ClientSession) {
	for _, s := range ss {
		_ = s.Close()
	}
}

// backoffLocked is the wait after the last failure. g.mu is held.
func (g *Group) backoffLocked() time.Duration {
	d := reconnectBackoff
	for i := 1; i < g.failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// watch drops the session when it ends, so that the next use connects again.
func (g *Group) watch(key string, cs *sdk.ClientSession) {
	err := cs.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.sessions[key]; s != nil && s.s == cs {
		delete(g.sessions, key)
		g.failedAt, g.lastErr = time.Now(), fmt.Errorf("the session ended: %v", err)
		g.failures++
		g.log.Warn("mcp session ended; the next use connects again", "error", fmt.Sprint(err))
	}
}

func (g *Group) transport(headers map[string]string, order *logOrder) sdk.Transport {
	s := g.opts.Server
	if s.Command != "" {
		cmd := exec.Command(s.Command, s.Args...)
		cmd.Dir = s.Dir
		cmd.Env = childEnv(os.Environ(), s.Env)
		return countingStdio{next: &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, order: order}
	}
	all := maps.Clone(s.Headers)
	if len(headers) > 0 && all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, headers)
	next := http.DefaultTransport
	if hc := headerClient(all, s.TLS); hc != nil {
		next = hc.Transport
	}
	return &sdk.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: countingTransport{order: order, next: replayTransport{next: next}}}}
}

// childEnv is the environment of a stdio server: the orchestrator's without its
// credentials (model API keys, tokens: ctxconv.IsCredentialKey), then extra.
func childEnv(environ []string, extra map[string]string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !ctxconv.IsCredentialKey(k) {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

// toolNameRE is the rule model APIs put on tool names (the strictest provider's).
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// list lists the tools the filter keeps through cs.
func (g *Group) list(ctx context.Context, cs *sdk.ClientSession) ([]tool.Tool, error) {
	out := []tool.Tool{}
	seen := 0
	for t, err := range cs.Tools(replayable(ctx), nil) {
		if err != nil {
			return nil, fmt.Errorf("cannot list its tools: %w", err)
		}
		if seen++; seen > g.opts.MaxTools {
			return nil, fmt.Errorf("it offers more than %d tools", g.opts.MaxTools)
		}
		if g.opts.Filter != nil && !g.opts.Filter(infoOf(t)) {
			continue
		}
		if !toolNameRE.MatchString(t.Name) {
			g.log.WarnContext(ctx, "mcp tool left out: model APIs take only names of 1 to 64 characters of [A-Za-z0-9_-]", "tool", wireSafe(t.Name))
			continue
		}
		rt, err := newRemote(g, t)
		if err != nil {
			g.log.WarnContext(ctx, "mcp tool left out", "tool", t.Name, "error", err.Error())
			continue
		}
		out = append(out, rt)
	}
	return out, nil
}

// wireSafe bounds a name for a log line.
func wireSafe(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// DefaultMaxTools bounds the tools one server may offer (as the routing table bounds the
// tools of the whole mesh).
const DefaultMaxTools = 10000

func (g *Group) onToolsChanged(context.Context, *sdk.ToolListChangedRequest) {
	g.mu.Lock()
	g.stale = true
	g.mu.Unlock()
	g.version.Add(1)
}

func (g *Group) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	p := req.Params
	if p == nil {
		return
	}
	if d := slowLogs.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if report, ok := g.progress.Load(fmt.Sprint(p.ProgressToken)); ok {
		report.(func(*sdk.ProgressNotificationParams))(p) // see progressReport
	}
}

// sessionFor returns the live session for the call in ctx, connecting if need be.
func (g *Group) sessionFor(ctx context.Context) (*sdk.ClientSession, error) {
	key, headers, err := g.credentials(ctx)
	if err != nil {
		return nil, err
	}
	return g.acquire(ctx, key, headers, false)
}

// track makes ctx end when the group closes; done forgets it.
func (g *Group) track(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		cancel()
		return ctx, func() {}
	}
	g.nextCall++
	id := g.nextCall
	if g.calls == nil {
		g.calls = map[uint64]context.CancelFunc{}
	}
	g.calls[id] = cancel
	return ctx, func() {
		g.mu.Lock()
		delete(g.calls, id)
		g.mu.Unlock()
		cancel()
	}
}

// token registers report for a call's progress and returns its token and the function
// that unregisters it.
func (g *Group) token(report func(*sdk.ProgressNotificationParams)) (string, func()) {
	g.mu.Lock()
	g.nextTok++
	tok := fmt.Sprintf("toolmesh-%d", g.nextTok)
	g.mu.Unlock()
	g.progress.Store(tok, report)
	return tok, func() { g.progress.Delete(tok) }
}

// Unfolding returns a facade over the server's tools that keep says yes to: the model
// sees one tool until it opens it.
func (g *Group) Unfolding(ctx context.Context, name, description string, keep func(toolName string) bool) (tool.Facade, error) {
	ts, err := g.Tools(ctx)
	if err != nil {
		return nil, err
	}
	var kids []tool.Tool
	for _, t := range ts {
		if keep == nil || keep(t.Definition().Name) {
			kids = append(kids, t)
		}
	}
	return tool.Of(name, description, kids), nil
}

// UnfoldingByName is Unfolding over the tools of exactly these names.
func (g *Group) UnfoldingByName(ctx context.Context, name, description string, names ...string) (tool.Facade, error) {
	return g.Unfolding(ctx, name, description, func(n string) bool { return slices.Contains(names, n) })
}

// UnfoldingMatching is Unfolding over the tools whose names contain a match of one of
// the regular expressions.
func (g *Group) UnfoldingMatching(ctx context.Context, name, description string, patterns ...*regexp.Regexp) (tool.Facade, error) {
	return g.Unfolding(ctx, name, description, func(n string) bool {
		return slices.ContainsFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(n) })
	})
}
