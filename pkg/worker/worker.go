// Package worker is the SDK for tool workers: a process that hosts one or more tool
// groups, serves ToolWorkerService, and keeps itself registered with an orchestrator.
//
//	w, err := worker.New(worker.Options{Orchestrator: "orchestrator:7070"}, worker.Group{
//		Role: "math", Description: "Math tools", Tools: []tool.Tool{add, subtract},
//	})
//	err = w.Run(ctx) // serves until ctx ends, then drains
//
// A group may also offer facades (progressive tools): Group.Facades are trees over the
// group's tools, registered as toolpb.FacadeNode trees; the worker serves their leaves as
// tools and runs the selector of a selectable facade when it is called.
//
// A worker is stateless between calls: tools that need state (tool.StateFrom) get it
// round-tripped by the orchestrator, so that any replica can serve any call.
//
// Telemetry is off until Options.TracerProvider or Options.MeterProvider is set. The
// package records through the OpenTelemetry API only, so a worker links no SDK and no
// exporter unless its main asks for them; pkg/otelsetup builds them from the standard
// OTEL_* variables:
//
//	// Prometheus: metrics for scraping unless OTEL_METRICS_EXPORTER says otherwise.
//	p, err := otelsetup.FromEnv(ctx, otelsetup.Options{ServiceName: "inventory-worker", Prometheus: true})
//	if err != nil {
//		return err
//	}
//	defer func() { _ = p.Shutdown(shutdownCtx) }() // a context with a deadline
//	if _, err := p.ServeMetrics(":9464"); err != nil { // what an autoscaler reads
//		return err
//	}
//	w, err := worker.New(worker.Options{
//		Orchestrator:   "orchestrator:7070",
//		TracerProvider: p.TracerProvider,
//		MeterProvider:  p.MeterProvider,
//	}, group)
//
// Each call then gets one span, execute_tool (kind SERVER), a child of the
// orchestrator's execute_tool span through the W3C traceparent header; the worker records
// toolmesh.worker.calls.in_flight (the calls it is running; toolmesh_worker_calls_in_flight
// in Prometheus, the signal a tool group's autoscaler scales on) and
// toolmesh.tool.call.duration, which p.ServeMetrics serves for Prometheus.
//
// It imports, of the internal packages, those that carry a call across the wire with the
// orchestrator (internal/wire, internal/ctxcodec), run it (internal/toolcall,
// internal/toolinternal) and trace it (internal/telemetry, the API side, which links no
// SDK); it must not import pkg/otelsetup: the setup belongs to a main.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Errors returned by New and Run.
var (
	// ErrInvalidGroup: a group or one of its tools is malformed.
	ErrInvalidGroup = errors.New("worker: invalid group")
	// ErrNoOrchestrator: Options.Orchestrator is empty.
	ErrNoOrchestrator = errors.New("worker: no orchestrator address")
	// ErrAlreadyRun: Run was called before; a Worker serves once. Make a new one with New.
	ErrAlreadyRun = errors.New("worker: Run was already called on this worker")
)

// Permission is something a group needs from its host.
type Permission = toolpb.Permission

// Permissions a group can declare.
const (
	HostAccess     = toolpb.Permission_PERMISSION_HOST_ACCESS
	InternetAccess = toolpb.Permission_PERMISSION_INTERNET_ACCESS
)

// Group is a tool group the worker serves.
type Group struct {
	// Role names the group; runs request groups by role.
	Role        string
	Description string
	// UsageNotes tell the model how to use the group's tools together.
	UsageNotes  string
	Provider    string
	Version     string
	Permissions []Permission
	// Tools are offered to the model directly.
	Tools []tool.Tool
	// Facades are progressive tools over further tools of the group: the model
	// sees a facade first, and calling it makes its children available. Every leaf of a
	// facade tree (children may be tools or facades, nested to any depth, beneath
	// wrappers) is served as a tool of the group; it may also be listed in Tools. The
	// worker registers each facade as a tree (toolpb.FacadeNode) and runs the selector
	// of a selectable one when the orchestrator calls it; a selector may only select
	// tools of the group, so that every replica can serve them. Facade names share one
	// namespace with tool names.
	Facades []tool.Facade
	// DomainTypes are the types of object the group's tools return and its methods
	// (tool.MethodOf) run on, with the schema their objects satisfy: at most 64.
	DomainTypes []tool.DomainType
}

// Options configure a Worker. Only Orchestrator is required.
type Options struct {
	// ID identifies the worker instance; stable across reconnects. Default: host name plus
	// a random suffix.
	ID string
	// Orchestrator is the address of the orchestrator's ToolRegistryService: host:port,
	// or several replicas' addresses separated by commas, or dns:///host:port for every
	// address host resolves to (a Kubernetes headless Service over the orchestrator's
	// replicas), resolved again every ResolveInterval. The worker registers with every
	// replica, so that each can route calls to it.
	Orchestrator string
	// ResolveInterval is how often dns:/// names are resolved again. Default 5s.
	ResolveInterval time.Duration
	// Ledger, when set, answers a call the orchestrator sends again (same idempotency
	// key, same tool) with the first call's answer instead of running the tool twice;
	// NewMemoryLedger keeps answers in this process, a shared store across replicas.
	// LedgerTTL is how long an answer is kept (DefaultLedgerTTL when zero).
	Ledger    Ledger
	LedgerTTL time.Duration
	// Listen is the address to serve ToolWorkerService on. Default "127.0.0.1:0". Without
	// TLS it must be a loopback address unless Plaintext is set.
	Listen string
	// Plaintext serves ToolWorkerService without TLS on an address that is not loopback:
	// for local development only, since anything that reaches the port may call the
	// tools, with any context. It cannot be set with TLS.
	Plaintext bool
	// Listener, when set, is used instead of listening on Listen.
	Listener net.Listener
	// Advertise is the address the orchestrator should dial. Default: the listener's
	// address.
	Advertise string
	// Capacity is the number of calls run at once; further calls wait. Zero: unlimited.
	Capacity int32
	// DrainTimeout bounds how long Run waits for calls in flight when it stops. Default 20s.
	DrainTimeout time.Duration
	// ContextMaxBytes bounds the ToolCallContext a call may carry (default 8 KiB, the
	// orchestrator's default); a larger one is refused as invalid.
	ContextMaxBytes int
	// MaxResultBytes bounds the encoded answer of one call (result, artifact and state):
	// a tool that returns more gets an error result saying so, rather than a message the
	// orchestrator would refuse. Default: the orchestrator's default message limit
	// (4 MiB) less 64 KiB.
	MaxResultBytes int
	// Version of the worker program, reported to the orchestrator.
	Version string
	// MinBackoff and MaxBackoff bound the jittered delay between registration attempts.
	// Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
	// TracerProvider and MeterProvider, when set, trace every call (one execute_tool
	// span, kind SERVER, joined to the orchestrator's trace through the W3C traceparent
	// header) and count calls in flight, the signal to autoscale a tool group on.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// TLS, when set, turns mutual TLS on: the worker serves with its certificate, takes
	// ToolWorkerService calls only from a caller whose certificate carries one of
	// Orchestrators (so the context a call brings can be trusted), and registers only
	// with an orchestrator that proves one of them. grpc.health.v1 answers anyone (a
	// kubelet's probe has no certificate). trust.Load reads the files; Watch reloads them.
	TLS *trust.Source
	// Orchestrators are the identities of the orchestrator replicas (SPIFFE IDs); at
	// least one with TLS.
	Orchestrators []spiffeid.ID
	// HealthListen, when set, is a second, plaintext gRPC server with only grpc.health.v1
	// on it, the same statuses as on Listen: for a kubelet's gRPC probes, which speak no
	// TLS, when TLS is on.
	HealthListen string
	// DialOptions are added to the options of the connection to the orchestrator.
	DialOptions []grpc.DialOption
	// ServerOptions are added to the options of the gRPC server.
	ServerOptions []grpc.ServerOption
}

// Worker serves tool groups and keeps them registered.
type Worker struct {
	opts Options
	log  *slog.Logger
	// keys serialises the calls of one idempotency key (see Options.Ledger).
	keys   keyLocks
	groups []Group
	// catalog holds the tools and facades the worker serves, by name.
	*catalog
	reg   *toolpb.Registration
	codec ctxcodec.Codec
	tel   *telemetry.Telemetry

	health  *health.Server
	server  *grpc.Server
	slots   chan struct{}
	drainCh chan struct{} // closed when draining starts
	// drainSent is closed once the orchestrator has been told the worker is draining.
	drainSent     chan struct{}
	drainSentOnce sync.Once
	active        atomic.Int32 // calls running a tool (not waiting for a slot)
	ran           atomic.Bool  // Run was called

	// Calls at the worker (running or waiting for a slot) are counted under callMu
	// rather than with a WaitGroup: calls keep arriving while the drain waits for the
	// count to reach zero, which a WaitGroup does not allow.
	callMu   sync.Mutex
	calls    int
	draining bool
	idle     chan struct{} // closed once draining and no call is left

	addrOnce sync.Once
	addr     chan net.Addr

	mu sync.Mutex
	// registered holds the orchestrator addresses the worker is registered with.
	registered map[string]bool
	lastReject []*toolpb.Rejection
	// resolves is set when Options.Orchestrator names a dns:/// name; lastResolved are
	// the addresses each resolved to last (only the registration goroutine uses it).
	resolves     bool
	lastResolved map[string][]string
}

var roleRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// New checks the groups and returns a worker ready to Run.
func New(opts Options, groups ...Group) (*Worker, error) {
	if opts.Orchestrator == "" {
		return nil, ErrNoOrchestrator
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		opts.ID = host + "-" + randomSuffix()
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 20 * time.Second
	}
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = wire.MaxMessageBytes - 64<<10
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("worker: capacity is negative (%d)", opts.Capacity)
	}
	if opts.TLS == nil && !opts.Plaintext && !wire.Loopback(opts.Listen) {
		return nil, fmt.Errorf("worker: Listen %s is not a loopback address: set TLS for mutual TLS, or Plaintext to serve without TLS (local development only: anything that reaches the port could call the tools with any context)", opts.Listen)
	}
	if opts.TLS != nil && opts.Plaintext {
		return nil, errors.New("worker: Plaintext cannot be set with TLS")
	}
	if opts.TLS != nil && len(opts.Orchestrators) == 0 {
		return nil, errors.New("worker: mutual TLS needs the orchestrator's identity (Options.Orchestrators)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ResolveInterval <= 0 {
		opts.ResolveInterval = 5 * time.Second
	}
	w := &Worker{
		registered:   map[string]bool{},
		lastResolved: map[string][]string{},
		resolves:     strings.Contains(opts.Orchestrator, "dns:///"),
		opts:         opts,
		log:          opts.Logger.With("worker_id", opts.ID),
		groups:       groups,
		addr:         make(chan net.Addr, 1),
		drainCh:      make(chan struct{}),
		drainSent:    make(chan struct{}),
		codec:        ctxcodec.Codec{MaxBytes: opts.ContextMaxBytes},
		idle:         make(chan struct{}),
	}
	if opts.Capacity > 0 {
		w.slots = make(chan struct{}, opts.Capacity)
	}
	cat, err := buildCatalog(groups)
	if err != nil {
		return nil, err
	}
	w.catalog = cat
	reg := &toolpb.Registration{WorkerId: opts.ID, Capacity: opts.Capacity, Version: opts.Version, Groups: cat.groups}
	w.reg = reg
	if opts.TracerProvider != nil || opts.MeterProvider != nil {
		tel, err := telemetry.FromProviders(opts.TracerProvider, opts.MeterProvider, telemetry.Options{})
		if err != nil {
			return nil, fmt.Errorf("worker: telemetry: %w", err)
		}
		w.tel = tel
	}
	return w, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.opts.ID }

// Registration returns what the worker registers with the orchestrator: its id,
// capacity and version, and its groups (each group's tools, the ones given plus every
// leaf of its facades, sorted by name, with their content hashes, and its facade trees).
// The address is set once Run listens.
func (w *Worker) Registration() *toolpb.Registration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return proto.Clone(w.reg).(*toolpb.Registration)
}

// Addr returns the address the worker serves on, once Run has started listening.
func (w *Worker) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case a := <-w.addr:
		w.addr <- a
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run serves until ctx ends, keeping the worker registered, and then drains: health turns
// NOT_SERVING, the orchestrator is told, new calls are refused, calls in flight finish
// (up to DrainTimeout), and the server stops. Run returns nil after a clean drain. A
// Worker runs once: a second call returns ErrAlreadyRun.
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	lis := w.opts.Listener
	if lis == nil {
		var err error
		lis, err = net.Listen("tcp", w.opts.Listen)
		if err != nil {
			return fmt.Errorf("worker: listen: %w", err)
		}
	}
	advertise := w.opts.Advertise
	if advertise == "" {
		advertise = lis.Addr().String()
	}
	w.mu.Lock()
	w.reg.Address = advertise
	w.mu.Unlock()
	w.addrOnce.Do(func() { w.addr <- lis.Addr() })

	w.health = health.NewServer()
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A fixed pool of stream workers reuses goroutines (and their grown stacks) instead
		// of starting one per call, which grows a fresh stack on every call: as many as
		// the calls that run at once (Capacity), so that a call past the pool is rare.
		grpc.NumStreamWorkers(streamWorkers(w.opts.Capacity)),
		// Fixed windows: no flow-control PINGs (see wire.ReceiveStreamWindow).
		grpc.InitialWindowSize(wire.ReceiveStreamWindow),
		grpc.InitialConnWindowSize(wire.ReceiveConnWindow),
		// No otelgrpc stats handler: a call's span is the execute_tool span, whose parent
		// comes with the call (see invoke).
	}
	if w.opts.TLS != nil {
		opts = append(opts, grpc.Creds(w.opts.TLS.ServerCredentials(false)),
			grpc.ChainUnaryInterceptor(w.authorizeUnary), grpc.ChainStreamInterceptor(w.authorizeStream))
	}
	opts = append(opts, w.opts.ServerOptions...)
	w.server = grpc.NewServer(opts...)
	toolpb.RegisterToolWorkerServiceServer(w.server, &invoker{w: w})
	healthpb.RegisterHealthServer(w.server, w.health)
	reflection.Register(w.server)
	w.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	w.health.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	if w.opts.HealthListen != "" {
		hlis, err := net.Listen("tcp", w.opts.HealthListen)
		if err != nil {
			w.server.Stop()
			return fmt.Errorf("worker: health listen: %w", err)
		}
		hg := grpc.NewServer()
		healthpb.RegisterHealthServer(hg, w.health)
		go func() { _ = hg.Serve(hlis) }()
		defer hg.Stop()
		w.log.Info("health serving", "address", hlis.Addr().String())
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- w.server.Serve(lis) }()
	w.log.Info("worker serving", "address", lis.Addr().String(), "advertise", advertise, "orchestrator", w.opts.Orchestrator, "tls", w.opts.TLS != nil)
	if w.opts.TLS == nil {
		w.log.Warn("mutual TLS is off: the port serves plaintext, and any process that reaches it may call the tools with any context (set TLS outside local development)")
	}

	regCtx, stopReg := context.WithCancel(context.Background())
	regDone := make(chan struct{})
	drainReq := make(chan struct{}, 1)
	go func() {
		defer close(regDone)
		w.registerAll(regCtx, drainReq)
	}()

	var err error
	select {
	case <-ctx.Done():
	case <-drainReq:
		w.log.Info("orchestrator asked the worker to drain")
	case err = <-serveErr:
		err = fmt.Errorf("worker: serve: %w", err)
	}
	w.drain()
	stopReg()
	<-regDone
	return err
}

// drain refuses new calls, waits for calls in flight, and stops the server.
func (w *Worker) drain() {
	w.callMu.Lock()
	w.draining = true
	if w.calls == 0 {
		close(w.idle)
	}
	w.callMu.Unlock()
	close(w.drainCh)    // the registration loop tells the orchestrator; waiting calls give up
	w.health.Shutdown() // every service NOT_SERVING
	w.log.Info("worker draining", "in_flight", w.active.Load(), "timeout", w.opts.DrainTimeout.String())
	if ok, _ := w.Registered(); ok {
		// Let the Draining message leave before the stream can be torn down, so the
		// orchestrator drops the worker at once instead of after its grace period.
		select {
		case <-w.drainSent:
		case <-time.After(time.Second):
		}
	}
	timer := time.NewTimer(w.opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-w.idle:
	case <-timer.C:
		w.log.Warn("drain timeout: stopping with calls in flight", "in_flight", w.active.Load())
	}
	stopped := make(chan struct{})
	go func() { w.server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		w.server.Stop()
		<-stopped
	}
	w.log.Info("worker stopped")
}

// beginCall counts a call at the worker; it fails once the worker is draining.
func (w *Worker) beginCall() bool {
	w.callMu.Lock()
	defer w.callMu.Unlock()
	if w.draining {
		return false
	}
	w.calls++
	return true
}

// endCall ends a call beginCall counted.
func (w *Worker) endCall() {
	w.callMu.Lock()
	defer w.callMu.Unlock()
	w.calls--
	if w.draining && w.calls == 0 {
		close(w.idle)
	}
}

// callsInFlight is the number of calls at the worker, waiting for a slot included.
func (w *Worker) callsInFlight() int {
	w.callMu.Lock()
	defer w.callMu.Unlock()
	return w.calls
}

// Registered reports whether an orchestrator (one replica at least) has accepted the
// worker's current registration, and the reasons of the last refusal.
func (w *Worker) Registered() (bool, []*toolpb.Rejection) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.registered) > 0, w.lastReject
}

// RegisteredWith lists the orchestrator addresses the worker is registered with.
func (w *Worker) RegisteredWith() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.registered))
	for t := range w.registered {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// authorize lets only the orchestrator call the worker (grpc.health.v1 answers anyone).
func (w *Worker) authorize(ctx context.Context, method string) error {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	id, ok := trust.PeerID(ctx)
	if !ok {
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
			Message: "this worker takes calls from its orchestrator only: present its client certificate"}.Err()
	}
	if !slices.Contains(w.opts.Orchestrators, id) {
		w.log.Warn("call refused: not from the orchestrator", "event", "audit", "identity", id.String(), "method", method)
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED,
			Message: fmt.Sprintf("identity %s is not this worker's orchestrator", id)}.Err()
	}
	return nil
}

func (w *Worker) authorizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := w.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (w *Worker) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := w.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// streamWorkers is the size of the server's pool of stream workers for a capacity: the
// calls that run at once, at least a few per core, and 64 for an unlimited worker.
func streamWorkers(capacity int32) uint32 {
	n := int32(64)
	if capacity > 0 {
		n = min(capacity, 1024)
	}
	return uint32(max(n, int32(4*runtime.GOMAXPROCS(0))))
}
