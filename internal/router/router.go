// Package router owns the orchestrator's view of the mesh: the workers that registered,
// the routing table from tool name to replicas, replica choice, deadlines, failover and
// ejection. Remote tools handed to the loop are router stubs.
//
// It imports the generated protos (it is a gRPC boundary) but nothing above it: not the
// loop, not the server.
package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Errors reported by the router.
var (
	// ErrInvalidRegistration: a registration is malformed.
	ErrInvalidRegistration = errors.New("invalid registration")
	// ErrConflict: a registration conflicts with what is already registered.
	ErrConflict = errors.New("registration conflicts with the routing table")
	// ErrUnknownGroup: no worker serves the group.
	ErrUnknownGroup = errors.New("unknown tool group")
	// ErrUnknownTool: no worker serves the tool.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrClosed: the router was closed.
	ErrClosed = errors.New("router closed")
	// ErrWorkerIDInUse: the registration names a worker whose registration stream is
	// still open.
	ErrWorkerIDInUse = errors.New("worker id in use")
	// ErrUnreachable: the worker's address could not be reached, or reports that it is
	// not serving.
	ErrUnreachable = errors.New("worker address unreachable")
	// ErrWrongService: the worker's address serves something other than
	// toolmesh.v1.ToolWorkerService.
	ErrWrongService = errors.New("worker address does not serve ToolWorkerService")
	// ErrTableFull: accepting the registration would take the routing table past one of
	// Options.Limits.
	ErrTableFull = errors.New("routing table full")
	// ErrNotYours: the registration names a worker id, tool group or tool that a
	// worker of another identity holds.
	ErrNotYours = errors.New("held by another identity")
	// ErrRepinned: the registration changes a tool's definition (description, schema,
	// metadata) under the version of its group it was first registered with.
	ErrRepinned = errors.New("definition changed under the same version")
	// ErrQuarantined: a definition the registration brings is held for an operator's
	// approval (Options.Quarantine) and not served until Options.Approved says so.
	ErrQuarantined = errors.New("definition quarantined pending approval")
)

// Options configure a Router. The zero value gives sensible defaults.
type Options struct {
	// GracePeriod is how long a worker whose registration stream broke keeps its place in
	// the table (taking no calls) before it is removed. Default 3s.
	GracePeriod time.Duration
	// DefaultTimeout bounds a call of a tool that declares no timeout. Default 30s.
	DefaultTimeout time.Duration
	// EjectAfter consecutive transport failures take a replica out of rotation. Default 3.
	EjectAfter int
	// EjectFor is how long an ejected replica stays out. Default 10s.
	EjectFor time.Duration
	// MaxAttempts bounds the replicas one call is sent to. Default 3.
	MaxAttempts int
	// MaxInFlightPerWorker bounds the calls this orchestrator has in flight at one worker
	// replica (and at most 4 × the capacity a replica declares): a call that finds every
	// replica of its tool at the bound is not sent but fails fast with an error result
	// saying so, instead of queueing without bound. Default 1024.
	MaxInFlightPerWorker int
	// Dial opens a client connection to a worker. Default: grpc.NewClient with
	// DialOptions(); the calls are traced without a stats handler on the connection (see
	// Telemetry). The router calls Invoke through the connection's stream API, so a
	// client interceptor for these calls must be a stream interceptor: a unary one does
	// not see them. A replacement should start from
	// DialOptions(): without them no keepalive turns a silent partition into a fast
	// failure, and a service config could add retries behind the router's back.
	Dial func(address string) (*grpc.ClientConn, error)
	// DialAs, when set, opens the connection to a worker that registered under a
	// verified identity (RegisterAs): it must accept only a server that proves that
	// identity (trust.Source.ClientCredentials), so that an address pointing at another
	// service gets no call and no context.
	DialAs func(address, identity string) (*grpc.ClientConn, error)
	// Probe checks, before a registration is accepted, that the worker's address serves
	// ToolWorkerService, over the connection the calls will use. Default: the
	// grpc.health.v1 status of "toolmesh.v1.ToolWorkerService" must be SERVING (see
	// HealthProbe). Its error should wrap ErrUnreachable or ErrWrongService.
	Probe func(ctx context.Context, conn *grpc.ClientConn) error
	// ProbeTimeout bounds the probe. Default 3s.
	ProbeTimeout time.Duration
	// Converter returns the converter that decides which ToolCallContext entries reach the
	// workers of a group. Default: pass-through for every group.
	Converter func(group string) ctxconv.Converter
	// Credentials, when set, gives the ToolCallContext entries a call carries to a group
	// besides the run's: the group's own credentials (a token exchanged for the caller's,
	// a tenant's secret). They replace the run's entries of those keys, pass the group's
	// converter, which must forward them, and reach no other group. Its error, written for
	// the model, keeps the call from being sent.
	Credentials func(ctx context.Context, group string) (map[string]string, error)
	// Codec encodes the context as metadata; its MaxBytes bounds it (default 8 KiB).
	Codec ctxcodec.Codec
	// Telemetry sends the trace context of the caller's span (the execute_tool span)
	// with each call, so that the worker's span is its child, and counts calls in
	// flight per worker; nil records nothing.
	Telemetry *telemetry.Telemetry
	// Logger receives the router's logs. Default: slog.Default().
	Logger *slog.Logger
	// Limits bound the routing table; a registration that would go past one is refused
	// with ErrTableFull.
	Limits Limits
	// PinDefinitions pins each tool's definition, per identity, to the version of its
	// group it was first registered with: a later registration (after every replica left,
	// even) that changes the tool's description, schema or metadata under that same
	// version is refused with ErrRepinned. What the model reads cannot be rewritten
	// behind the operator's back; a new version says it changed.
	PinDefinitions bool
	// Quarantine, when set, is asked about every definition a registration brings that
	// the table does not hold yet, and about a group's description and usage notes that
	// differ from those the table holds: a reason ("" for none) to hold it for an
	// operator's approval — text over a cap, words that tell a model to ignore its
	// instructions. What is held is refused with ErrQuarantined, and so is the rest of
	// its registration, until Approved says yes to its hash (a group's text has one of
	// its own, GroupTextHash).
	Quarantine func(t ModelText) string
	// Approved, when set, reports whether an operator approved the definition of that
	// content hash (wire.Hash): it is served though Quarantine holds it, and replaces the
	// pinned definition of its tool under the same version (PinDefinitions).
	Approved func(hash string) bool
	// CallToken, when set, mints the token of a call sent to a worker that registered
	// under a verified identity (its audience), valid until the call's deadline; it
	// travels as the trust.CallTokenHeader metadata (trust.Source.MintCallToken).
	CallToken func(audience string, claims trust.CallClaims, deadline time.Time) (string, error)
}

// Limits bound what the routing table holds, so that registrations cannot take the
// orchestrator's memory without bound. Zero fields take their defaults.
type Limits struct {
	// MaxWorkers bounds the workers registered (those in their grace period included).
	// Default 1024.
	MaxWorkers int
	// MaxTools bounds the distinct tools and facades. Default 10,000.
	MaxTools int
	// MaxDefinitionBytes bounds the encoded size of the distinct definitions (a tool's
	// or facade's name, description, schema and metadata, a facade's tree). Default
	// 64 MiB.
	MaxDefinitionBytes int64
	// MaxServedTools bounds the tools and facades all workers serve, counted once per
	// worker that serves them (replicas included). Default 200,000.
	MaxServedTools int
}

func (o Options) withDefaults() Options {
	if o.GracePeriod <= 0 {
		o.GracePeriod = 3 * time.Second
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 30 * time.Second
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = 3
	}
	if o.EjectFor <= 0 {
		o.EjectFor = 10 * time.Second
	}
	if o.MaxInFlightPerWorker <= 0 {
		o.MaxInFlightPerWorker = 1024
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.Dial == nil {
		o.Dial = func(address string) (*grpc.ClientConn, error) {
			return grpc.NewClient(address, DialOptions()...)
		}
	}
	if o.Converter == nil {
		o.Converter = func(string) ctxconv.Converter { return ctxconv.PassThrough() }
	}
	if o.Probe == nil {
		o.Probe = HealthProbe
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 3 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Limits.MaxWorkers <= 0 {
		o.Limits.MaxWorkers = 1024
	}
	if o.Limits.MaxTools <= 0 {
		o.Limits.MaxTools = 10000
	}
	if o.Limits.MaxDefinitionBytes <= 0 {
		o.Limits.MaxDefinitionBytes = 64 << 20
	}
	if o.Limits.MaxServedTools <= 0 {
		o.Limits.MaxServedTools = 200000
	}
	return o
}

// Router is the routing table plus the machinery to call through it. It is safe for
// concurrent use.
type Router struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time // the clock of ejections; tests replace it

	mu      sync.RWMutex
	closed  bool
	workers map[string]*worker
	groups  map[string]*groupEntry
	tools   map[string]*toolEntry
	// table is tools again, for Tool's lookups without the lock: replaced, at the end
	// of every change of tools, by a copy with the names of changed as tools has them
	// (publishToolsLocked).
	table   atomic.Pointer[toolTable]
	changed []string
	// older holds, by tool name and content hash, the definitions a rollout superseded
	// (a new version of their group registered another) while replicas of the old version
	// still serve them: runs that started with one keep calling those replicas, new runs
	// get tools[name].
	older map[string]map[string]*toolEntry
	// defBytes is the sum of the tools' sizes, served the sum of the workers' tools.
	defBytes int64
	served   int
	// pins are the definitions each identity registered, by identity and tool name:
	// what a tool's description and schema were under its group's version. pinOrder is
	// their order of first use, for evicting the oldest past maxPins.
	pins     map[pinKey]pin
	pinOrder []pinKey
}

type pinKey struct{ identity, tool string }

// pin is a tool's definition hash under one version of its group.
type pin struct{ version, hash string }

// groupEntry is a tool group and what serves it.
type groupEntry struct {
	info    *toolpb.ToolGroupInfo
	tools   map[string]*toolEntry
	workers map[string]*worker
}

// toolEntry is one tool and its replicas. Entries are immutable apart from replicas,
// which is guarded by Router.mu.
type toolEntry struct {
	group    string
	def      tool.Definition
	meta     tool.Metadata
	hash     string
	proto    *toolpb.ToolDefinition
	replicas map[string]*worker
	// facade is the tree of a facade entry; nil for a tool.
	facade *toolpb.FacadeNode
	// stub is what the loop calls: made once with the entry.
	stub *remoteTool
	// size is the encoded size of the definition and facade tree, counted against
	// Limits.MaxDefinitionBytes.
	size int64
	// info is the group as the entry's first worker registered it: what the group
	// becomes again if this entry takes over from a newer one whose replicas left.
	info *toolpb.ToolGroupInfo
}

// New returns an empty router.
func New(opts Options) *Router {
	opts = opts.withDefaults()
	r := &Router{
		opts:    opts,
		log:     opts.Logger,
		now:     time.Now,
		workers: map[string]*worker{},
		groups:  map[string]*groupEntry{},
		tools:   map[string]*toolEntry{},
	}
	r.table.Store(newToolTable())
	return r
}

// Close removes every worker and closes their connections, failing calls in flight.
func (r *Router) Close() {
	r.mu.Lock()
	r.closed = true
	ws := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	for _, w := range ws {
		r.removeLocked(w)
	}
	r.mu.Unlock()
	for _, w := range ws {
		w.closeNow()
	}
}

// Tool returns the remote tool with the given name.
func (r *Router) Tool(name string) (tool.Tool, error) {
	stub, ok := r.table.Load().get(name)
	switch {
	case !ok:
		return nil, ErrUnknownTool
	case stub != nil:
		return stub, nil
	}
	return r.facade(name)
}

// facade is Tool of a name the table holds with no stub: a facade, which it builds
// under the lock.
func (r *Router) facade(name string) (tool.Tool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return nil, ErrUnknownTool // it left since
	}
	return r.toolLocked(e), nil
}

// toolChangedLocked notes that the entry of name in r.tools changed.
func (r *Router) toolChangedLocked(name string) {
	r.changed = append(r.changed, name)
}

// publishToolsLocked replaces the table of Tool's lookups with one holding the changes
// of r.tools since it was built. A closed router's table is empty. r.mu must be held
// for writing.
func (r *Router) publishToolsLocked() {
	switch {
	case r.closed:
		r.table.Store(newToolTable())
	case len(r.changed) > 0:
		r.table.Store(r.table.Load().with(r.tools, r.changed))
	}
	r.changed = nil
}

// Versions are the versions of the groups, and of the groups of the tools named, that
// a run is offered now, by role: what Pin holds the run's tools to after it moves to
// another orchestrator.
func (r *Router) Versions(roles, names []string) map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]string{}
	for _, role := range roles {
		if g := r.groups[role]; g != nil {
			out[role] = g.info.GetVersion()
		}
	}
	for _, name := range names {
		if e := r.tools[name]; e != nil {
			out[e.group] = e.info.GetVersion()
		}
	}
	return out
}

// Pin returns the stub of a worker's tool as version of its group defines it, when the
// table holds that definition (the newest, or an older one that replicas still serve
// during a rollout), so that a run keeps the definitions it was shown; t itself
// otherwise. ok is false when t is a worker's tool of another version and that version's
// definition is gone: its calls go to the definition served now.
func (r *Router) Pin(t tool.Tool, versions map[string]string) (pinned tool.Tool, ok bool) {
	rt, isRemote := t.(*remoteTool)
	if !isRemote {
		return t, true
	}
	want, known := versions[rt.group]
	r.mu.RLock()
	defer r.mu.RUnlock()
	cur := r.tools[rt.def.Name]
	if !known || cur == nil || cur.hash == rt.hash && cur.info.GetVersion() == want {
		return t, true
	}
	if cur.info.GetVersion() == want {
		return newRemoteTool(r, cur), true
	}
	for _, e := range r.older[rt.def.Name] {
		if e.info.GetVersion() == want {
			return newRemoteTool(r, e), true
		}
	}
	return t, false
}

// ModelText is what a model reads of a tool, a facade or a group, for Quarantine:
// Description and UsageNotes are prose (a facade's and a group's usage notes reach the
// model when it unfolds or is offered), Schema the input schema's JSON, whose
// descriptions the model reads too.
type ModelText struct {
	Description, UsageNotes, Schema string
}

// GroupTextHash is the hash under which an operator approves a group's description and
// usage notes (Options.Approved): hex SHA-256, as a definition's content hash is.
func GroupTextHash(role, description, usageNotes string) string {
	h := sha256.New()
	for _, s := range []string{"group", role, description, usageNotes} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Methods returns the remote tools that are methods of a domain type (their
// Metadata.ReceiverType is set), sorted by name.
func (r *Router) Methods() []tool.Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []tool.Tool
	for _, e := range r.tools {
		if e.meta.ReceiverType != "" && e.facade == nil {
			out = append(out, r.toolLocked(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Definition().Name < out[j].Definition().Name })
	return out
}

// DomainType returns the domain type of a name that a registered worker declared (the
// worker with the smallest id, when several did).
func (r *Router) DomainType(typeName string) (tool.DomainType, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ids := make([]string, 0, len(r.workers))
	for id := range r.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if d, ok := r.workers[id].domainTypes[typeName]; ok {
			return d, true
		}
	}
	return tool.DomainType{}, false
}

// Group returns the description of a group and its remote tools, sorted by name.
func (r *Router) Group(role string) (*toolpb.ToolGroupInfo, []tool.Tool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g, ok := r.groups[role]
	if !ok {
		return nil, nil, ErrUnknownGroup
	}
	// The group offers its facades and the tools no facade holds.
	inFacade := map[string]bool{}
	for _, e := range g.tools {
		if e.facade != nil {
			for _, c := range childNames(e.facade) {
				inFacade[c] = true
			}
		}
	}
	ts := make([]tool.Tool, 0, len(g.tools))
	for name, e := range g.tools {
		if !inFacade[name] {
			ts = append(ts, r.toolLocked(e))
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Definition().Name < ts[j].Definition().Name })
	return g.info, ts, nil
}

// GroupOf returns the group that serves a tool.
func (r *Router) GroupOf(toolName string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[toolName]
	if !ok {
		return "", false
	}
	return e.group, true
}
