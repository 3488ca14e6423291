// Package server adapts the orchestrator's domain to gRPC: OrchestratorService (runs,
// listings) and ToolRegistryService (worker leases). Handlers are thin: validate the
// request, call the domain (the run service, the router), map errors to statuses in one
// place (errors.go).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Options configure a Server. Router and a provider are required.
type Options struct {
	Router *router.Router
	// Providers are the model providers by name; runs pick one with "provider/model".
	Providers map[string]llm.Provider
	// DefaultProvider names the provider of runs that name none.
	DefaultProvider string
	// Provider, when Providers is empty, is the only provider (and the default).
	Provider llm.Provider
	// Telemetry traces runs, model calls and tool calls and records their metrics; nil
	// records nothing.
	Telemetry *telemetry.Telemetry
	// Config supplies registry and loop settings; the zero value means config.Default().
	Config *config.Config
	// Sinks are artifact sinks the program provides, by name, beside "blackboard" and
	// "assets", for the config's and the requests' artifact rules.
	Sinks  map[string]decorators.Sink
	Logger *slog.Logger
	// Journal records runs so that they survive a restart and any replica sharing it
	// can watch, list and take them over; Owner names this orchestrator in its leases.
	// Nil keeps runs in memory only.
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
}

// New returns a Server. With auth.jwt.jwks_url it fetches the key set first, and fails
// when it cannot: an orchestrator that would refuse every token does not start.
func New(opts Options) (*Server, error) {
	if opts.Router == nil {
		return nil, errors.New("server: Router is required")
	}
	providers := opts.Providers
	def := opts.DefaultProvider
	if len(providers) == 0 && opts.Provider != nil {
		providers = map[string]llm.Provider{opts.Provider.Name(): opts.Provider}
		def = opts.Provider.Name()
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
	groups, err := mcpGroups(cfg, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	runs, err := run.New(run.Options{
		Router: opts.Router, Providers: providers, DefaultProvider: def, Config: cfg,
		Telemetry: opts.Telemetry, Logger: opts.Logger, Sinks: opts.Sinks, MCP: groups,
		ErrorType: func(err error) string { return wire.ReasonName(classify(err)) },
		Journal:   opts.Journal, Codec: codec{}, Owner: opts.Owner,
	})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{router: opts.Router, cfg: cfg, log: opts.Logger, runs: runs, journaled: opts.Journal != nil,
		journal: opts.Journal, owner: opts.Owner, ready: make(chan struct{})}
	close(s.ready)
	if v, ok := opts.Journal.(interface{ Volatile() bool }); ok {
		s.volatile = v.Volatile()
	}
	if s.auth, err = newAuthorizer(cfg, s.log, s.audit); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.orch = &orchestratorServer{s: s}
	s.registry = &registryServer{s: s}
	return s, nil
}

// Register adds both services to a gRPC server.
// Every request message is read within the receive budget (config.Server); serve with
// ServerOptions too, which bound the size of one message.
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
// them), and ends every worker registration stream so that a GracefulStop can complete.
// Workers keep running and re-register with the next orchestrator.
func (s *Server) Shutdown(ctx context.Context) {
	s.runs.Shutdown(ctx)
	s.registry.closeAll()
}

// mcpGroups builds the groups MCP servers serve (groups.<role>.mcp), each with its
// group's converter; none connects before a run asks for it.
func mcpGroups(cfg config.Config, log *slog.Logger) (map[string]*mcp.Group, error) {
	converters, err := Converters(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]*mcp.Group{}
	for role, g := range cfg.Groups {
		if g.MCP == nil {
			continue
		}
		sc := cfg.MCPServers[g.MCP.Server]
		var tc *tls.Config
		if t := sc.TLS; t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
			var err error
			if tc, err = trust.HTTPSConfig(t.CAFile, t.CertFile, t.KeyFile); err != nil {
				return nil, fmt.Errorf("mcp_servers.%s.tls: %w", g.MCP.Server, err)
			}
		}
		grp, err := mcp.New(mcp.Options{
			Server: mcp.Server{Name: g.MCP.Server, Command: sc.Command, Args: sc.Args, Env: sc.Env, Dir: sc.Dir,
				URL: sc.URL, Headers: sc.Headers, ContextHeaders: sc.ContextHeaders, Timeout: sc.Timeout.D(), TLS: tc},
			Role: role, Filter: mcp.Globs(g.MCP.Include, g.MCP.Exclude), Converter: converters(role), Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("groups.%s.mcp: %w", role, err)
		}
		out[role] = grp
	}
	return out, nil
}
