// Package run is the run service: it turns a request into a run (resolves the requested
// tool groups and tools through the router, chooses the model, builds the loop with the
// orchestrator's decorators and unfolding strategy), drives the loop, keeps the record
// of every run that GetRun reports, and reports what happens to an observer. A run is
// the unit the run journal will persist.
//
// It speaks domain types only: the server adapts gRPC requests to Request and the
// events to the wire. It must not import generated protos or the server.
package run

import (
	"golang.org/x/time/rate"

	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Errors a run can be refused or ended with.
var (
	// ErrInvalid: the request is invalid (a FieldError names the field).
	ErrInvalid = errors.New("invalid run request")
	// ErrExists: a live run has the requested id.
	ErrExists = errors.New("a run with that id is running")
	// ErrFull: the orchestrator runs its maximum of runs.
	ErrFull = errors.New("too many runs")
	// ErrClosed: the service is shutting down and takes no new runs.
	ErrClosed = errors.New("run service closed")
	// ErrCancelled is the cause of a run cancelled through Cancel.
	ErrCancelled = errors.New("run cancelled")
	// ErrShutdown is the cause of runs cancelled because the orchestrator stops.
	ErrShutdown = errors.New("orchestrator shutting down")
	// ErrNotFound: no run has the id (finished runs are kept for a while only).
	ErrNotFound = errors.New("no such run")
	// ErrRequiredMissing: a required tool group lacks tools the run requires.
	ErrRequiredMissing = errors.New("required tools missing")
	// ErrTenantFull: the run's tenant runs its maximum of runs (tenants.<name>.
	// max_concurrent_runs).
	ErrTenantFull = errors.New("too many runs of the tenant")
	// ErrPermission: the run's tenant may not use a tool group or tool it asked for.
	ErrPermission = errors.New("not granted to the run's tenant")
	// ErrTenantQuota: the request is larger than its tenant may send (tenants.<name>.
	// max_messages, max_request_bytes).
	ErrTenantQuota = errors.New("over the tenant's quota")
)

// FieldError refuses a request because of one of its fields. Kind is ErrInvalid,
// router.ErrUnknownGroup, router.ErrUnknownTool or ErrRequiredMissing.
type FieldError struct {
	Field   string
	Kind    error
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }
func (e *FieldError) Unwrap() error { return e.Kind }

func fieldErr(field string, kind error, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Kind: kind, Problem: fmt.Sprintf(format, args...)}
}

// Error is how a run that started ended, when it did not succeed.
type Error struct {
	RunID string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Options configure a Service. Router and one provider are required.
type Options struct {
	Router *router.Router
	// Providers are the model providers by name; runs pick one with "provider/model".
	Providers map[string]llm.Provider
	// DefaultProvider names the provider of runs that name none.
	DefaultProvider string
	// Config supplies the loop's defaults and limits, models, groups and tools.
	Config config.Config
	// Telemetry traces runs, model calls and tool calls; nil records nothing.
	Telemetry *telemetry.Telemetry
	// Sinks are artifact sinks the program provides, by name, for the config's and the
	// requests' artifact rules to name beside "blackboard" and "assets".
	Sinks map[string]decorators.Sink
	// MCP are the tool groups MCP servers serve, by role; they connect on first use.
	MCP    map[string]*mcp.Group
	Logger *slog.Logger
	// Journal records every run so that it survives a restart, and lets any replica
	// sharing it watch, list and take over runs; nil keeps runs in memory only. Codec is
	// required with it; Owner names this orchestrator in its leases (required with it).
	// The config's journal section sets the lease, the resume grace and retention.
	Journal runlog.Store
	Codec   Codec
	Owner   string

	// Layers are the program's own layers of the call pipeline, each at its place.
	Layers []Placed
	// Strategies change a loop's tool set after each call, beside unfolding, in every
	// loop (nested loops included). A resumed run replays its loops: a strategy must
	// decide from what it is shown, not from the time or a counter of its own.
	Strategies []loop.Strategy
	// Formatter renders the blackboard's entries for the blackboard group's tools; nil is
	// process.DefaultFormatter.
	Formatter process.Formatter
	// Groups are tool groups this orchestrator serves in its own process, by role.
	Groups map[string]Group
}

// Service runs runs.
type Service struct {
	renewOnce sync.Once
	renew     *renewer
	// rates are the tenants' tool-call budgets (tenants.<name>.tool_calls_per_minute),
	// modelRates their model-call budgets (model_calls_per_minute).
	ratesMu    sync.Mutex
	rates      map[string]*rate.Limiter
	modelRates map[string]*rate.Limiter
	// policies are the compiled call policies, by group and tool (policyOf).
	policies sync.Map

	router    *router.Router
	providers map[string]llm.Provider
	provider  llm.Provider
	cfg       config.Config
	tel       *telemetry.Telemetry
	log       *slog.Logger
	store     *store
	chain     *decorators.Chain
	sinks     map[string]decorators.Sink
	mcp       map[string]*mcp.Group
	// agentic are the config's agentic tools, checked.
	agentic []agentic.Spec
	// layers, strategies, formatter and local are the program's own (Options).
	layers     []Placed
	strategies []loop.Strategy
	formatter  process.Formatter
	local      map[string]localGroup
	journal    runlog.Store
	codec      Codec
	owner      string
	// resuming holds the ids of runs being taken over here.
	resuming sync.Map
	// plain are the call pipelines, without and with tool chaining, of the runs of no
	// tenant and no caller that add no rules of their own: built once, shared by them.
	plain [2]func() toolcall.Pipeline
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Router == nil {
		return nil, errors.New("run: Router is required")
	}
	if opts.Providers[opts.DefaultProvider] == nil {
		return nil, fmt.Errorf("run: the default provider %q is not among the providers", opts.DefaultProvider)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	for name := range opts.Sinks {
		if name == decorators.SinkBlackboard || name == decorators.SinkAssets || name == "" {
			return nil, fmt.Errorf("run: sink name %q is reserved", name)
		}
	}
	chain, err := compileChain(opts.Config, opts.Sinks)
	if err != nil {
		return nil, err
	}
	chain.Telemetry = opts.Telemetry
	specs, err := configSpecs(opts.Config)
	if err != nil {
		return nil, err
	}
	if opts.Journal != nil && (opts.Codec == nil || opts.Owner == "") {
		return nil, errors.New("run: a Journal needs a Codec and an Owner")
	}
	local, err := checkExtensions(opts)
	if err != nil {
		return nil, err
	}
	s := &Service{
		layers:     opts.Layers,
		strategies: slices.DeleteFunc(slices.Clone(opts.Strategies), func(s loop.Strategy) bool { return s == nil }),
		formatter:  opts.Formatter,
		local:      local,
		journal:    opts.Journal,
		codec:      opts.Codec,
		owner:      opts.Owner,
		agentic:    specs,
		chain:      chain,
		sinks:      opts.Sinks,
		mcp:        opts.MCP,
		router:     opts.Router,
		providers:  opts.Providers,
		provider:   opts.Providers[opts.DefaultProvider],
		cfg:        opts.Config,
		tel:        opts.Telemetry,
		log:        opts.Logger,
		store:      newStore(opts.Config.Loop.MaxConcurrentRuns, opts.Config.Loop.RetainRuns, opts.Config.Loop.RetainBytes),
	}
	for i, chaining := range []bool{false, true} {
		s.plain[i] = sync.OnceValue(func() toolcall.Pipeline {
			return s.pipeline("", Caller{}, config.Tenant{}, false, chaining, s.chain)
		})
	}
	return s, nil
}

// Request is a run as the service takes it. The caller has checked each field on its
// own (lengths, encodings, ranges); the service checks what needs the mesh and the
// config.
type Request struct {
	// ID is the client's run id; empty means a fresh one.
	ID       string
	System   string
	Messages []llm.Message
	// Groups and Tools are what to offer, by role and by name. A group nobody serves is
	// left out with a Warning.
	Groups, Tools []string
	// Required are groups the run cannot do without, offered like Groups.
	Required []Requirement
	// Context is the run level, Interaction the interaction level, which wins.
	Context, Interaction toolctx.Context
	// Model is "provider/model" or a model of the default provider; Role a configured
	// role. Both empty mean the default provider's default model.
	Model, Role     string
	Temperature     *float64
	MaxOutputTokens int
	// Zero limits mean the config's defaults.
	MaxIterations, MaxParallel int
	Timeout                    time.Duration
	MaxTokens                  int64
	MaxCostUSD                 float64
	MaxActions                 int
	// OutputSchema is the JSON Schema the answer must satisfy; empty for text.
	OutputSchema string
	// Sinks are the run's own artifact rules, after the config's.
	Sinks []decorators.RuleSpec
	// StreamText reports the model's text as it arrives (loop.TextDelta events).
	StreamText bool
	// Agentic are the run's own agentic tools; Key of each is its field
	// ("agentic_tools[i]"). The run offers those Tools names (and the config's), and
	// those that an agentic tool it offers contains.
	Agentic []agentic.Spec
	// ChainingSources restrict which returned objects bind for tool chaining (none: any
	// object of a type some method has as its receiver type); ChainFromAny adds the
	// methods of an object's type to the loop once it binds, whether the run offered
	// them or not.
	ChainingSources []ChainingSource
	ChainFromAny    bool
	// Agent names an agent (an agentic tool of kind agent, the request's or the
	// config's) to run directly: see withAgent.
	Agent string
	// Goal is what the run is for, as its process reports it; empty means Agent.
	Goal string
	// ToolNames renames tools as the run's model sees them (own name to new name);
	// ExcludeTools leaves out the tools whose own names match one of its globs.
	ToolNames    map[string]string
	ExcludeTools []string
	// Tenant is the verified tenant of the caller ("" without tenancy): the run is its
	// alone (other tenants' calls do not find it), its calls carry it as the context's
	// tenant_id (whatever the client put there), and with tenants.<name>.groups it may
	// be offered, and call, only those groups' tools.
	Tenant string
	// Caller is who started the run, as the orchestrator verified it: what call policies
	// read of the caller (groups.<role>.policy, tools.<name>.policy). Journaled with the
	// request, so that a resumed run's calls are decided for the same caller.
	Caller Caller
	// Wire is the request as the client sent it, which the journal keeps for a run
	// resumed elsewhere (Codec.Request turns it back).
	Wire json.RawMessage
	// Pinned are the versions of workers' tool groups, by role, that a run taken over was
	// shown when it started: while a replica of a group's version is registered, the
	// run's calls of its tools go to it, not to a newer definition a rollout brought.
	Pinned map[string]string
	// Without are the tool groups a run taken over started without (none served them
	// then, and a warning said so): it goes on without them, as it did, rather than
	// offer its model tools it was never offered.
	Without []string
}

// Caller is the verified caller of a run.
type Caller struct {
	// ID is who it is: its certificate's SPIFFE ID, or its bearer token's issuer#subject.
	ID string `json:"id,omitempty"`
	// Scopes are its bearer token's scopes.
	Scopes []string `json:"scopes,omitempty"`
	// Claims are its bearer token's claims, a JSON object (none for a certificate).
	Claims json.RawMessage `json:"claims,omitempty"`
}

// ChainingSource is a type whose returned objects bind, when When (CEL over value and
// type_name) holds for them.
type ChainingSource = agentic.ChainingSpec

// Event is what an observer of a run sees: Started first, then the loop's events
// (loop.ModelCalled, loop.ToolCallStarted, ...).
type Event any

// Requirement is a required tool group and the tools it must offer.
type Requirement struct {
	Role  string
	Tools []string
}

// Warning is something the run goes on without; it follows Started.
type Warning struct {
	Field, Message string
	// Role is the tool group the warning is about.
	Role string
}

// Started is the first event of a run.
type Started struct {
	RunID         string
	LoopID        string
	Model         string
	Tools         []string
	MaxIterations int
}

// Result is how a successful run ended: with an answer, or (Outcome set) because a tool
// asked to replan or terminate.
type Result struct {
	RunID string
	Model string
	*loop.Result
	Outcome *Outcome
}

// Ended is the last event of a run that ended with an answer (Result) or failed (Err, an
// *Error); a run a tool ended has its Replanned or Terminated event last instead.
type Ended struct {
	RunID  string
	Result *Result
	Err    error
}

// Run starts a run and drives it to its end, handing every event to observe, in order
// and from one goroutine at a time. A request refused before the run starts returns a
// *FieldError, ErrExists, a *FullError (ErrFull, ErrTenantFull) or ErrClosed and
// observes nothing; a run that started and failed returns an *Error, after Started and
// the loop's events. The run ends when ctx ends (the client went away), when Cancel or
// Shutdown cancel it, or at its deadline. With a journal, the events come as Sequenced, each once its record is
// committed.
func (s *Service) Run(ctx context.Context, req Request, observe func(Event)) (*Result, error) {
	return s.RunAccepted(ctx, func() (Request, error) { return req, nil }, observe)
}

// RunAccepted is Run with the request accept returns, which it calls first, on the
// goroutine that starts the run (off the caller's, as all of a run's start is): a server
// that turns a request on the wire into the service's does that there too. When accept
// fails, RunAccepted returns its error as it is and observes nothing.
func (s *Service) RunAccepted(ctx context.Context, accept func() (Request, error), observe func(Event)) (*Result, error) {
	return s.launchWith(func() (*driver, error) {
		req, err := accept()
		if err != nil {
			return nil, err
		}
		p, err := s.admitAndPrepare(ctx, req)
		if err != nil {
			return nil, err
		}
		id := req.ID
		if id == "" {
			id = NewID()
		}
		return s.begin(ctx, p, id, "loop_"+randomHex(8), time.Now(), nil, observe)
	})
}

// admitAndPrepare refuses a run the orchestrator or its tenant has no room for, before
// resolving its request (launch takes the slot).
func (s *Service) admitAndPrepare(ctx context.Context, req Request) (*prepared, error) {
	if err := s.store.admit(req.Tenant, s.cfg.Tenants[req.Tenant].MaxConcurrentRuns); err != nil {
		return nil, err
	}
	return s.prepare(ctx, req)
}

// Get reports a run, running or finished.
// TenantOf is the tenant of run id ("" for a run without one): from this orchestrator's
// memory, else from the journal's request record. ErrNotFound when there is no such run.
func (s *Service) TenantOf(ctx context.Context, id string) (string, error) {
	if r := s.store.get(id); r != nil {
		return r.tenant, nil
	}
	if s.journal == nil {
		return "", fmt.Errorf("%w %q", ErrNotFound, id)
	}
	recs, err := s.journal.Read(ctx, id, 0, 1)
	switch {
	case errors.Is(err, runlog.ErrNotFound):
		return "", fmt.Errorf("%w %q", ErrNotFound, id)
	case err != nil:
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	case len(recs) == 0 || recs[0].Kind != runlog.KindRequest:
		return "", nil
	}
	var rq requestRecord
	if err := json.Unmarshal(recs[0].Data, &rq); err != nil {
		return "", fmt.Errorf("%w: run %s's request record: %v", ErrUnavailable, id, err)
	}
	return rq.Tenant, nil
}

func (s *Service) Get(id string) (Snapshot, error) {
	r := s.store.get(id)
	if (r == nil || r.isStopped()) && s.journal != nil {
		// Not here, or stopped here and going on elsewhere: the journal knows.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.fromJournal(ctx, id)
	}
	if r == nil {
		return Snapshot{}, fmt.Errorf("%w %q (finished runs are kept for the last %d)", ErrNotFound, id, s.cfg.Loop.RetainRuns)
	}
	return r.snapshot(), nil
}

// Cancel cancels a running run and reports the state it ended in: a run that finished
// as it was cancelled keeps its own outcome. A finished run is reported as it is.
func (s *Service) Cancel(ctx context.Context, id, reason string) (runlog.State, error) {
	r := s.store.get(id)
	if (r == nil || r.isStopped()) && s.journal != nil {
		snap, err := s.fromJournal(ctx, id)
		if err != nil {
			return "", err
		}
		switch snap.State {
		case runlog.StateHeld:
			return s.cancelHeld(ctx, id, reason)
		case runlog.StateRunning:
			return s.cancelElsewhere(ctx, id, reason)
		}
		return snap.State, nil
	}
	if r == nil {
		return "", fmt.Errorf("%w %q", ErrNotFound, id)
	}
	st := r.snapshot().State
	if st != runlog.StateRunning && st != runlog.StateHeld {
		return st, nil
	}
	if reason == "" {
		reason = "cancelled by client"
	}
	r.cancel(fmt.Errorf("%w: %s", ErrCancelled, reason))
	// A run ends promptly once cancelled; the wait is bounded anyway.
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	select {
	case <-r.over:
		if st := r.snapshot().State; st != runlog.StateHeld || s.journal == nil {
			return st, nil
		}
		// It stopped held (this orchestrator took it over and met a damaged record
		// again), or was held already: the operator's cancel is for the held run.
		return s.cancelHeld(ctx, id, reason)
	case <-wait.Done():
		return runlog.StateCancelled, nil
	}
}

// Shutdown refuses new runs, waits for the runs in progress until ctx ends, then
// cancels those still going and waits for them to end.
func (s *Service) Shutdown(ctx context.Context) {
	s.store.close()
	if err := s.store.wait(ctx); err != nil {
		s.log.Warn("shutdown: cancelling runs still in progress", "runs", s.store.liveCount())
		s.store.cancelAll(ErrShutdown)
		_ = s.store.wait(context.Background())
	}
	for role, g := range s.mcp {
		if err := g.Close(); err != nil {
			s.log.Warn("shutdown: closing an MCP session", "group", role, "error", err.Error())
		}
	}
}

func toolNames(ts []tool.Tool) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Definition().Name
	}
	return names
}

// NewID is a fresh run id, as a run whose request names none gets: the milliseconds since
// the epoch (12 hex digits, so that ids sort by when they were made) and 64 random bits.
// Ids that grow with time are appended to the journal's indexes (the run's row and its
// records are keyed by it) instead of landing on a random page of them each, and a
// journal knows an id greater than all it holds to be new without looking it up. Within a
// process each id is greater than the one before: one made in the same millisecond as
// the last, with smaller random bits, is the last plus a random 32-bit step.
func NewID() string { return newIDAt(time.Now()) }

var lastID struct {
	sync.Mutex
	raw [14]byte
}

func newIDAt(t time.Time) string {
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	var raw [14]byte
	copy(raw[:6], ms[2:])
	_, _ = rand.Read(raw[6:])
	lastID.Lock()
	if bytes.Compare(raw[:], lastID.raw[:]) <= 0 {
		c := uint64(binary.BigEndian.Uint32(raw[10:])) + 1 // the step, from the random bits
		raw = lastID.raw
		for i := len(raw) - 1; i >= 0 && c > 0; i-- {
			c += uint64(raw[i])
			raw[i] = byte(c)
			c >>= 8
		}
	}
	lastID.raw = raw
	lastID.Unlock()
	return "run_" + hex.EncodeToString(raw[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkContext bounds the run's context as it will be encoded for a worker.
func checkContext(bag, run, interaction toolctx.Context, maxBytes int) error {
	if err := (ctxcodec.Codec{MaxBytes: maxBytes}).Check(bag); err != nil {
		var tl *ctxcodec.TooLargeError
		if errors.As(err, &tl) {
			field := "context"
			if interaction.Contains(tl.LargestKey) {
				field = "interaction_context"
			}
			return fieldErr(fmt.Sprintf("%s[%q]", field, wire.Truncate(tl.LargestKey, 64)), ErrInvalid, "%v", err)
		}
		return fieldErr("context", ErrInvalid, "%v", err)
	}
	return nil
}

// cancelled reports whether a run that ended with err was cancelled rather than failed:
// through Cancel, by a shutdown or by its client going away, which Run wraps in
// ErrCancelled. A context.Canceled from inside (a provider's own request, say) while
// the run's context is live is a failure.
func cancelled(err error) bool {
	return errors.Is(err, ErrCancelled) || errors.Is(err, ErrShutdown)
}

// serialObserver hands events to observe one at a time: tool calls finish on many
// goroutines.
type serialObserver struct {
	mu      sync.Mutex
	observe func(Event)
	// j, when the run has a journal, records the events, which go to observe once
	// committed.
	j *journal
	// scopes are the nested loops of the run by loop id: what their tool calls do to the
	// process (blackboard, progress, messages, assets, sinks) goes out tagged with them.
	scopes sync.Map
}

func (o *serialObserver) send(ev Event) {
	if o.observe == nil && o.j == nil {
		return
	}
	if id := loopOf(ev); id != "" {
		if sc, ok := o.scopes.Load(id); ok {
			ev = Nested{Scope: sc.(Scope), Event: ev}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.j != nil {
		o.j.event(ev)
		return
	}
	o.observe(ev)
}

// loopOf is the loop whose tool call caused a process event; "" for other events.
func loopOf(ev Event) string {
	switch x := ev.(type) {
	case EntryAdded:
		return x.LoopID
	case ProgressReported:
		return x.LoopID
	case MessageSent:
		return x.LoopID
	case AssetAdded:
		return x.LoopID
	case ArtifactCaptured:
		return x.LoopID
	}
	return ""
}
