// Package server adapts the orchestrator's domain to gRPC: OrchestratorService (runs,
// listings) and ToolRegistryService (worker leases). Handlers are thin: validate the
// request, call the domain (the run service, the router), map errors to statuses in one
// place (errors.go).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Options configure a Server. Router and Runs are required.
type Options struct {
	Router *router.Router
	// Runs is the run service the server exposes; build it with RunCodec
	// (run.Options.Codec) so that its journal keeps the wire forms.
	Runs *run.Service
	// Config supplies the server's limits and authentication; the zero value means
	// config.Default(). It must be the run service's.
	Config *config.Config
	Logger *slog.Logger
	// Journal is the run service's journal (nil: none); Owner names this orchestrator
	// in its leases.
	Journal runlog.Store
	Owner   string
}

// Server implements the orchestrator's gRPC services.
type Server struct {
	router   *router.Router
	cfg      config.Config
	log      *slog.Logger
	runs     *run.Service
	orch     *orchestratorServer
	registry *registryServer
	// journaled is set when runs are journaled: requests are kept in their wire form.
	journaled bool
	journal   runlog.Store
	volatile  bool
	owner     string
	// ready is closed once the orchestrator is ready to serve runs: at once, unless
	// WarmUp waits for workers.
	ready chan struct{}
	// auth authenticates callers, of the gRPC services and of the MCP endpoint.
	auth *authorizer
	// watchers ends once Shutdown has stopped the runs: the WatchRun streams still open
	// send what the journal holds and end, telling the clients of runs that did not end
	// to watch again elsewhere.
	watchers     context.Context
	stopWatchers context.CancelFunc
}

// New returns a Server. With auth.jwt.jwks_url it fetches the key set first, and fails
// when it cannot: an orchestrator that would refuse every token does not start.
func New(opts Options) (*Server, error) {
	if opts.Router == nil || opts.Runs == nil {
		return nil, errors.New("server: Router and Runs are required")
	}
	cfg := config.Default()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{router: opts.Router, cfg: cfg, log: opts.Logger, runs: opts.Runs, journaled: opts.Journal != nil,
		journal: opts.Journal, owner: opts.Owner, ready: make(chan struct{})}
	s.watchers, s.stopWatchers = context.WithCancel(context.Background())
	close(s.ready)
	if v, ok := opts.Journal.(interface{ Volatile() bool }); ok {
		s.volatile = v.Volatile()
	}
	var err error
	if s.auth, err = newAuthorizer(cfg, s.log, s.audit); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.orch = &orchestratorServer{s: s}
	s.registry = &registryServer{s: s}
	return s, nil
}

// RunCodec is the wire forms the run journal keeps (run.Options.Codec): events as
// RunResponse messages, requests as RunRequest, checked again as a new request is.
func RunCodec() run.Codec { return codec{} }

// Register adds both services to a gRPC server.
// Every request message is read within the receive budget (config.Server); serve with
// PortOptions too, which bound the size of one message.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	// Each service has its own receive budget and its own bound of open calls, so that
	// clients cannot keep workers from registering, nor the reverse. A worker may hold
	// two registration streams for a moment: the one it reconnects on and the one the
	// orchestrator has not yet seen end.
	calls := &openCalls{what: "client calls (runs, listings, cancellations)", max: int64(s.cfg.Server.MaxOpenCalls)}
	registrations := &openCalls{what: "registration streams", max: 2 * int64(s.cfg.Registry.MaxWorkers)}
	g.RegisterService(newAdmission(s.cfg.Server).gate(&toolpb.OrchestratorService_ServiceDesc, calls), s.orch)
	g.RegisterService(newAdmission(s.cfg.Server).gate(&toolpb.ToolRegistryService_ServiceDesc, registrations), s.registry)
}

// Resume takes over the journal's runs this orchestrator may drive (its own, after a
// restart, and those whose owner went away) and returns how many.
func (s *Server) Resume(ctx context.Context) (int, error) { return s.runs.Resume(ctx) }

// Maintain takes over the runs of orchestrators that went away, prunes old runs from the
// journal and fetches the key set of auth.jwt.jwks_url again every refresh interval,
// until ctx ends.
func (s *Server) Maintain(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.auth.refreshKeys(ctx) })
	s.runs.Maintain(ctx)
	wg.Wait()
}

// Shutdown refuses new runs, waits for the runs in progress until ctx ends (then cancels
// them), ends the WatchRun streams still open (SHUTTING_DOWN: watch again elsewhere)
// and every worker registration stream, so that a GracefulStop can complete. Workers
// keep running and re-register with the next orchestrator.
func (s *Server) Shutdown(ctx context.Context) {
	s.runs.Shutdown(ctx)
	// The watchers send what the journal holds and end: with the run's end where it
	// ended, SHUTTING_DOWN where the shutdown stopped it.
	s.stopWatchers()
	s.registry.closeAll()
}
