// Package orchestrator builds and runs a toolmesh orchestrator inside a Go program: the
// process workers register their tools with and clients send runs to. cmd/orchestrator
// is a thin main over it; a program of one's own adds what the config cannot say:
//
//   - Layers: interceptors of every tool call, at a documented place of the call pipeline;
//   - Converters: what of a call's ToolCallContext a tool group receives, as functions
//     (ConverterFunc);
//   - Sinks: where artifact rules send what tools return;
//   - Formatter: how the blackboard group's tools show an entry to the model;
//   - Strategies: changes to a loop's tools after a call, beside unfolding;
//   - Groups: tool groups served in the orchestrator's own process;
//   - MCPFilters: predicates over an MCP server's tools;
//   - Providers: model providers under names of one's own.
//
// A minimal program:
//
//	cfg, err := orchestrator.LoadConfig("orchestrator.yaml")
//	if err != nil {
//		log.Fatal(err)
//	}
//	o, err := orchestrator.New(orchestrator.Options{Config: cfg})
//	if err != nil {
//		log.Fatal(err)
//	}
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	log.Fatal(o.Run(ctx))
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/credentials"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Config is the orchestrator's configuration, as docs/configuration.md describes its
// YAML keys.
type Config = config.Config

// ValidationError is how a configuration is refused (Config.Validate, LoadConfig): every
// problem, each naming its key. A program whose flags override keys of the file names
// them in it with WithSources, so that a refused value is reported as the flag's.
type ValidationError = config.ValidationError

// ConfigProblem is one setting a ValidationError refuses.
type ConfigProblem = config.Problem

// ErrInvalidConfig is every refused configuration (errors.Is): a ValidationError, or a
// file that does not decode (a syntax error, an unknown key, a malformed duration).
var ErrInvalidConfig = config.ErrInvalid

// DefaultConfig is the configuration of an orchestrator given no file, with the
// environment's TOOLMESH_* and provider variables applied.
func DefaultConfig() Config {
	c := config.Default()
	c.ApplyEnv(os.Getenv)
	return c
}

// LoadConfig reads a YAML config file over the defaults, with the environment applied,
// and checks it.
func LoadConfig(path string) (Config, error) { return config.LoadEnv(path, os.Getenv) }

// LoadConfigOver is LoadConfig with over changing the configuration before it is
// checked: a program's flags that override keys of the file, and may supply one the
// file's settings require (journal.data_dir for journal.driver sqlite, say). An empty
// path reads no file: DefaultConfig with over.
func LoadConfigOver(path string, over func(*Config)) (Config, error) {
	return config.LoadOver(path, os.Getenv, over)
}

// Options configure an orchestrator. Config is required; every other field is optional.
type Options struct {
	// Config is the orchestrator's configuration (DefaultConfig, LoadConfig).
	Config Config
	// Logger receives the orchestrator's logs; nil logs to stderr as log.level and
	// log.format say, and then routes grpc-go's and OpenTelemetry's own logs there too,
	// which are process-wide settings: a program with loggers of its own sets Logger.
	Logger *slog.Logger
	// ShutdownTimeout is how long runs in progress may take to finish once Run's context
	// ends; zero is 30s, and a negative value cancels them at once.
	ShutdownTimeout time.Duration

	// Layers are the program's own layers of the call pipeline.
	Layers []Layer
	// Converters choose what of a call's ToolCallContext each tool group receives, by
	// role; the one under "" serves every group without its own. They win over the
	// config's context settings; context.secrets still apply to them.
	Converters map[string]Converter
	// Sinks are artifact sinks, by the name the config's and the requests' artifact
	// rules give (not "blackboard" or "assets", which are built in).
	Sinks map[string]Sink
	// Formatter renders a blackboard entry for the blackboard group's tools; nil shows
	// its content or infoString field, else its JSON.
	Formatter func(tool.Entry) string
	// Strategies change a loop's tools after each call, beside unfolding.
	Strategies []Strategy
	// Groups are tool groups served in this process, by role.
	Groups map[string]Group
	// MCPFilters keep the tools of an MCP group (groups.<role>.mcp) they are true for,
	// by role, after the config's include, exclude and filter.
	MCPFilters map[string]func(MCPTool) bool
	// Providers are model providers beside the config's (provider.*), by the name runs
	// use: a run's model "<name>/<model>". A name of the config's replaces that provider.
	Providers map[string]Provider
	// DefaultProvider names the provider of runs that name none; empty keeps the
	// config's choice.
	DefaultProvider string
}

// Orchestrator is an orchestrator listening on its address, ready to Run.
type Orchestrator struct {
	cfg      Config
	log      *slog.Logger
	shutdown time.Duration

	mu sync.Mutex
	// closers release what New acquired, in reverse order; nil once released.
	closers []func()
	// running is closed when Run returns; stopRun ends it. Both nil before Run.
	running chan struct{}
	stopRun context.CancelFunc

	sdk       *otelsetup.Providers
	tel       *telemetry.Telemetry
	certs     *trust.Source
	rt        *router.Router
	quar      *router.Quarantine
	srv       *server.Server
	lis       net.Listener
	providers map[string]llm.Provider
	def       string
	// creds are the groups' own credentials (nil: none has any).
	creds *credentials.Set
}

// routerCredentials is the router's hook for the worker groups' credentials; nil when
// no group has any.
func (o *Orchestrator) routerCredentials() func(context.Context, string) (map[string]string, error) {
	if o.creds == nil {
		return nil
	}
	return o.creds.ContextFor
}

// New checks opts, opens the journal, builds the orchestrator's services and listens on
// the config's listen address. Nothing is served until Run; Close releases it all
// without running.
func New(opts Options) (o *Orchestrator, err error) {
	cfg := opts.Config
	if cfg.Journal.Driver == "" && cfg.Journal.DataDir != "" {
		cfg.Journal.Driver = "sqlite"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o = &Orchestrator{cfg: cfg, log: opts.Logger, shutdown: opts.ShutdownTimeout}
	switch {
	case o.shutdown == 0:
		o.shutdown = 30 * time.Second
	case o.shutdown < 0:
		o.shutdown = 0
	}
	defer func() {
		if err != nil {
			o.Close()
			o = nil
		}
	}()
	if o.log == nil {
		if o.log, err = logging.New(os.Stderr, cfg.Log.Level, cfg.Log.Format); err != nil {
			return o, err
		}
		logging.Capture(o.log)
	}
	if err = o.telemetry(); err != nil {
		return o, err
	}
	if err = o.chooseProviders(opts); err != nil {
		return o, err
	}
	code := map[string]ctxconv.Converter{}
	for group, c := range opts.Converters {
		if c == nil {
			return o, fmt.Errorf("orchestrator: the converter of group %q is nil", group)
		}
		code[group] = c
	}
	conv, err := compose.Converters(cfg, code)
	if err != nil {
		return o, err
	}
	if err = o.trust(); err != nil {
		return o, err
	}
	// Credentials of the groups: the router's and the MCP groups' are the same, so that
	// one caller's exchanged token is asked for once whichever kind of group it goes to.
	if o.creds, err = credentials.FromConfig(cfg, o.log); err != nil {
		return o, err
	}
	if err = o.newRouter(conv); err != nil {
		return o, err
	}
	if o.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return o, fmt.Errorf("listen: %w", err)
	}
	o.onClose(func() { _ = o.lis.Close() })
	journal, err := openJournal(cfg.Journal, cfg.Loop.RetainRuns, o.log)
	if err != nil {
		return o, err
	}
	o.onClose(func() { _ = journal.Close() })
	owner := ownerName(cfg.Journal, o.lis.Addr())
	runs, err := compose.Runs(o.composeOptions(opts, conv, journal, owner))
	if err != nil {
		return o, err
	}
	o.srv, err = server.New(server.Options{Router: o.rt, Runs: runs, Config: &cfg, Logger: o.log, Journal: journal, Owner: owner})
	return o, err
}

// composeOptions are the run service's options: the config's and the program's.
func (o *Orchestrator) composeOptions(opts Options, conv func(string) ctxconv.Converter, journal runlog.Store, owner string) compose.Options {
	co := compose.Options{
		Config: o.cfg, Router: o.rt, Providers: o.providers, DefaultProvider: o.def, Telemetry: o.tel, Logger: o.log,
		Journal: journal, Owner: owner, Codec: server.RunCodec(), Converters: conv, Credentials: o.creds,
		Sinks: map[string]decorators.Sink{}, Groups: map[string]run.Group{}, MCPFilters: map[string]func(mcp.ToolInfo) bool{},
	}
	for _, l := range opts.Layers {
		if l.For == nil {
			l.For = func(tool.Tool) Interceptor { return nil }
		}
		co.Layers = append(co.Layers, l.placed())
	}
	for name, s := range opts.Sinks {
		if s != nil {
			co.Sinks[name] = s.sink()
		}
	}
	for _, s := range opts.Strategies {
		if s != nil {
			co.Strategies = append(co.Strategies, s.strategy())
		}
	}
	if opts.Formatter != nil {
		co.Formatter = process.Formatter(opts.Formatter)
	}
	for role, g := range opts.Groups {
		co.Groups[role] = run.Group{Description: g.Description, UsageNotes: g.UsageNotes, Tools: g.Tools}
	}
	for role, f := range opts.MCPFilters {
		if f != nil {
			co.MCPFilters[role] = mcpFilter(f)
		}
	}
	return co
}

// chooseProviders builds the config's providers and adds the program's.
func (o *Orchestrator) chooseProviders(opts Options) error {
	providers, err := newProviders(o.cfg.Provider, o.log)
	if err != nil {
		return err
	}
	for name, p := range opts.Providers {
		if name == "" || strings.ContainsAny(name, "/ ") {
			return fmt.Errorf("orchestrator: provider name %q: runs choose a provider as <name>/<model>, so a name is not empty and has no '/' or space", name)
		}
		if p.p == nil {
			return fmt.Errorf("orchestrator: provider %q was not made by OpenAI, Anthropic or Scripted", name)
		}
		providers[name] = p.p
	}
	o.providers, o.def = providers, o.cfg.DefaultProvider()
	if opts.DefaultProvider != "" {
		if providers[opts.DefaultProvider] == nil {
			return fmt.Errorf("orchestrator: DefaultProvider %q is not among the providers (%v)", opts.DefaultProvider, slices.Sorted(maps.Keys(providers)))
		}
		o.def = opts.DefaultProvider
	}
	if o.def == "scripted" {
		o.log.Info("no model credentials are set: runs use the scripted provider, a deterministic file-driven model")
	}
	return nil
}

// telemetry sets up the exporters the standard OTEL_* variables choose (by default
// traces go nowhere and metrics to the Prometheus endpoint).
func (o *Orchestrator) telemetry() error {
	sdk, err := otelsetup.FromEnv(context.Background(), otelsetup.Options{
		ServiceName: "toolmesh-orchestrator", ServiceVersion: cli.Version(), Logger: o.log, Prometheus: true,
	})
	if err != nil {
		return err
	}
	o.sdk = sdk
	o.onClose(func() {
		if err := cli.FlushTelemetry(sdk, 5*time.Second); err != nil {
			o.log.Warn("telemetry shutdown", "error", err)
		}
	})
	o.tel, err = telemetry.FromProviders(sdk.TracerProvider, sdk.MeterProvider, telemetry.Options{
		CapturePayloads: o.cfg.Telemetry.CapturePayloads, ContextAllowList: o.cfg.Telemetry.ContextAllowList,
		KnownModels: append(o.cfg.KnownModels(), defaultOpenAIModel, defaultAnthropicModel),
	})
	return err
}

// Addr is the address the orchestrator listens on.
func (o *Orchestrator) Addr() net.Addr { return o.lis.Addr() }

// Close releases what New acquired. On an orchestrator that is running, it stops Run
// (as the end of Run's context does) and waits for it to return. It may be called more
// than once, and concurrently with Run.
func (o *Orchestrator) Close() {
	o.mu.Lock()
	running, stop := o.running, o.stopRun
	o.mu.Unlock()
	if running != nil {
		stop()
		<-running
		return
	}
	o.release()
}

// onClose adds f to what Close (or the end of Run) releases, before what was added
// earlier.
func (o *Orchestrator) onClose(f func()) {
	o.mu.Lock()
	o.closers = append(o.closers, f)
	o.mu.Unlock()
}

// release runs the closers once.
func (o *Orchestrator) release() {
	o.mu.Lock()
	closers := o.closers
	o.closers = nil
	o.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// errRan is Run's error when it is called a second time.
var errRan = errors.New("orchestrator: Run was called already, or Close")
