// Command orchestrator runs toolmesh's orchestrator: it accepts worker registrations,
// keeps the routing table, and runs prompts through the tool loop for clients.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/anthropic"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	listen := fs.String("listen", "", "address to serve on (overrides the config's listen)")
	script := fs.String("script", "", "script file of the scripted provider (overrides provider.script)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	logFormat := fs.String("log-format", "", "json or text (overrides log.format)")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long runs in progress may take to finish on SIGTERM")
	healthListen := fs.String("health-listen", "", "address of a plaintext gRPC server with only grpc.health.v1, for probes that speak no TLS (overrides health_listen)")
	metricsListen := fs.String("metrics-listen", "", "address to serve Prometheus /metrics on (overrides telemetry.metrics_listen)")
	dataDir := fs.String("data-dir", "", "directory of the run journal (SQLite, journal.db), so that runs survive a restart (overrides journal.data_dir)")
	journalDriver := fs.String("journal", "", "run journal: sqlite, postgres or memory (overrides journal.driver)")
	journalDSN := fs.String("journal-dsn", "", "PostgreSQL connection string of the run journal (overrides journal.dsn)")
	owner := fs.String("owner", "", "this orchestrator's name in run leases; replicas need different ones (overrides journal.owner; default host:port)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: orchestrator [flags]\n\nRuns toolmesh's orchestrator. Telemetry follows the standard OTEL_* variables (traces: none\nunless OTEL_TRACES_EXPORTER is set; metrics: Prometheus on --metrics-listen).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg := config.Default()
	cfg.ApplyEnv(os.Getenv)
	if *cfgPath != "" {
		var err error
		if cfg, err = config.LoadEnv(*cfgPath, os.Getenv); err != nil {
			return err
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *script != "" {
		cfg.Provider.Script = *script
	}
	if *logLevel != "" {
		cfg.Log.Level = *logLevel
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	if *metricsListen != "" {
		cfg.Telemetry.MetricsListen = *metricsListen
	}
	if *healthListen != "" {
		cfg.HealthListen = *healthListen
	}
	if *dataDir != "" {
		cfg.Journal.DataDir = *dataDir
	}
	if *journalDriver != "" {
		cfg.Journal.Driver = *journalDriver
	}
	if *journalDSN != "" {
		cfg.Journal.DSN = *journalDSN
	}
	if *owner != "" {
		cfg.Journal.Owner = *owner
	}
	if cfg.Journal.Driver == "" && cfg.Journal.DataDir != "" {
		cfg.Journal.Driver = "sqlite"
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return err
	}
	logging.Capture(log)
	// Exporters come from the standard OTEL_* variables; by default traces go nowhere and
	// metrics to the Prometheus endpoint.
	sdk, err := otelsetup.FromEnv(context.Background(), otelsetup.Options{
		ServiceName: "toolmesh-orchestrator", ServiceVersion: cli.Version(), Logger: log, Prometheus: true,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := cli.FlushTelemetry(sdk, 5*time.Second); err != nil {
			log.Warn("telemetry shutdown", "error", err)
		}
	}()
	tel, err := telemetry.FromProviders(sdk.TracerProvider, sdk.MeterProvider, telemetry.Options{
		CapturePayloads: cfg.Telemetry.CapturePayloads, ContextAllowList: cfg.Telemetry.ContextAllowList,
		KnownModels: append(cfg.KnownModels(), defaultOpenAIModel, defaultAnthropicModel),
	})
	if err != nil {
		return err
	}

	providers, err := newProviders(cfg.Provider, log)
	if err != nil {
		return err
	}
	defProvider := cfg.DefaultProvider()
	if defProvider == "scripted" {
		log.Info("no model credentials are set: runs use the scripted provider, a deterministic file-driven model")
	}
	converters, err := server.Converters(cfg)
	if err != nil {
		return err
	}
	// Mutual TLS: the orchestrator's certificate and CA bundle, reloaded when they change.
	var certs *trust.Source
	if cfg.TLS.Enabled() {
		if certs, err = trust.Load(trust.Files{CA: cfg.TLS.CAFile, Cert: cfg.TLS.CertFile, Key: cfg.TLS.KeyFile}, log); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		defer certs.Close()
		certs.Watch(cmp.Or(cfg.TLS.ReloadInterval.D(), time.Second))
		log.Info("mutual TLS on", "spiffe_id", certs.ID().String(), "worker_grants", len(cfg.Trust.Workers), "clients", len(cfg.Trust.Clients))
	} else {
		log.Warn("mutual TLS is off: the port serves plaintext, and any process that reaches it may register workers and start runs (set tls.* outside local development)")
	}
	var dialAs func(address, identity string) (*grpc.ClientConn, error)
	if certs != nil {
		dialAs = func(address, identity string) (*grpc.ClientConn, error) {
			id, err := trust.ParseID(identity)
			if err != nil {
				return nil, err
			}
			// The worker's server must prove the identity it registered under.
			return grpc.NewClient(address, append(router.DialOptions(), grpc.WithTransportCredentials(certs.ClientCredentials(id)))...)
		}
	}
	var callToken func(string, trust.CallClaims, time.Time) (string, error)
	if certs != nil {
		callToken = certs.MintCallToken
	}
	quarantine, err := server.NewQuarantine(cfg.Registry, log)
	if err != nil {
		return err
	}
	rt := router.New(router.Options{
		Quarantine:     quarantine.Hold,
		Approved:       quarantine.Approved,
		DialAs:         dialAs,
		CallToken:      callToken,
		Converter:      converters,
		Codec:          ctxcodec.Codec{MaxBytes: cfg.Context.MaxBytes},
		GracePeriod:    cfg.Registry.GracePeriod.D(),
		DefaultTimeout: cfg.Router.DefaultToolTimeout.D(),
		EjectAfter:     cfg.Router.EjectAfterFailures,
		EjectFor:       cfg.Router.EjectDuration.D(),
		MaxAttempts:    cfg.Router.MaxAttempts,
		PinDefinitions: cfg.Registry.PinDefinitions,
		Telemetry:      tel,
		Logger:         log,
		Limits: router.Limits{
			MaxWorkers: cfg.Registry.MaxWorkers, MaxTools: cfg.Registry.MaxTools,
			MaxDefinitionBytes: cfg.Registry.MaxDefinitionBytes, MaxServedTools: cfg.Registry.MaxServedTools,
		},
	})
	defer rt.Close()
	tel.RegisterReplicaGauge(rt.ReplicaCounts)
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	journal, err := openJournal(cfg.Journal, cfg.Loop.RetainRuns, log)
	if err != nil {
		return err
	}
	if cfg.Journal.EncryptionKeyFile != "" {
		key, err := runlog.ReadKey(cfg.Journal.EncryptionKeyFile)
		if err != nil {
			_ = journal.Close()
			return fmt.Errorf("journal.encryption_key_file: %w", err)
		}
		if journal, err = runlog.Encrypted(journal, key); err != nil {
			return fmt.Errorf("journal.encryption_key_file: %w", err)
		}
		log.Info("the journal's records are encrypted")
	}
	defer func() { _ = journal.Close() }()
	srv, err := server.New(server.Options{Router: rt, Providers: providers, DefaultProvider: defProvider, Config: &cfg, Telemetry: tel, Logger: log,
		Journal: journal, Owner: ownerName(cfg.Journal, lis.Addr())})
	if err != nil {
		return err
	}

	opts := append(append(server.RecoveryInterceptors(log), server.ServerOptions(cfg)...), tel.ServerOptions()...)
	if certs != nil {
		// A client certificate is optional in the handshake (a kubelet's health probe
		// has none, a client may bring a bearer token instead); the interceptors decide.
		opts = append(opts, grpc.Creds(certs.ServerCredentials(false)))
	}
	opts = append(opts, srv.AuthOptions()...)
	g := grpc.NewServer(opts...)
	srv.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	// Workers register at once; runs (and the process's overall status) wait until the
	// workers the journal knew of are back, or registry.readiness_grace passes.
	hs.SetServingStatus(toolpb.ToolRegistryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	for _, name := range []string{"", toolpb.OrchestratorService_ServiceDesc.ServiceName} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.HealthListen != "" {
		// The same statuses in plaintext, for a kubelet's probes: nothing but health here.
		hlis, err := net.Listen("tcp", cfg.HealthListen)
		if err != nil {
			return fmt.Errorf("health_listen: %w", err)
		}
		hg := grpc.NewServer(server.RecoveryInterceptors(log)...)
		healthpb.RegisterHealthServer(hg, hs)
		go func() { _ = hg.Serve(hlis) }()
		defer hg.Stop()
		log.Info("health serving", "address", hlis.Addr().String())
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go quarantine.Watch(ctx, time.Second) // approvals take effect within a second
	srv.WarmUp(ctx)
	// Runs are served once the orchestrator is ready, while its journal works.
	go srv.WatchHealth(ctx, func(serving bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		for _, name := range []string{"", toolpb.OrchestratorService_ServiceDesc.ServiceName} {
			hs.SetServingStatus(name, st)
		}
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	// Runs this orchestrator drove before it stopped, and those whose owner went away,
	// continue here; their workers register again meanwhile.
	if n, err := srv.Resume(ctx); err != nil {
		log.Warn("resuming runs from the journal", "error", err.Error())
	} else if n > 0 {
		log.Info("resuming runs from the journal", "runs", n)
	}
	go srv.Maintain(ctx)
	log.Info("orchestrator serving", "address", lis.Addr().String(), "provider", defProvider, "model", llm.Label(providers[defProvider], ""))
	if cfg.Telemetry.MetricsListen != "" {
		ms, err := sdk.ServeMetrics(cfg.Telemetry.MetricsListen)
		if err != nil {
			return fmt.Errorf("metrics listen: %w", err)
		}
		defer func() { _ = ms.Shutdown(context.Background()) }()
		log.Info("metrics serving", "address", ms.Addr())
	}
	if cfg.MCPServe.Listen != "" {
		handler, err := srv.MCPHandler()
		if err != nil {
			return fmt.Errorf("mcp_serve: %w", err)
		}
		mlis, err := net.Listen("tcp", cfg.MCPServe.Listen)
		if err != nil {
			return fmt.Errorf("mcp_serve.listen: %w", err)
		}
		scheme := "http"
		if certs != nil {
			// HTTPS with the orchestrator's certificate; a client certificate is asked
			// for and verified when presented (a client may come with a bearer token
			// instead). MCP clients speak HTTP/1.1 as well as HTTP/2.
			tc := certs.ServerTLS(false)
			tc.NextProtos = []string{"h2", "http/1.1"}
			mlis, scheme = tls.NewListener(mlis, tc), "https"
		}
		hsrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hsrv.Serve(mlis) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hsrv.Shutdown(sctx)
		}()
		log.Info("mcp serving", "address", mlis.Addr().String(), "url", scheme+"://"+mlis.Addr().String()+"/")
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("orchestrator shutting down", "timeout", shutdown.String())
	hs.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	srv.Shutdown(sctx)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
		<-stopped
	}
	log.Info("orchestrator stopped")
	return nil
}

// Default models of the real providers, used when neither the config nor the
// environment (OPENAI_MODEL, ANTHROPIC_MODEL) names one.
const (
	defaultOpenAIModel    = "gpt-4o-mini"
	defaultAnthropicModel = "claude-sonnet-4-5"
)

// newProviders builds every configured provider; the scripted one is always there.
func newProviders(cfg config.Provider, log *slog.Logger) (map[string]llm.Provider, error) {
	out := map[string]llm.Provider{}
	var sp *scripted.Provider
	var err error
	if cfg.Script == "" {
		sp, err = scripted.New(scripted.Demo())
	} else {
		sp, err = scripted.Load(cfg.Script)
	}
	if err != nil {
		return nil, err
	}
	sp.Keep(0) // nothing here reads the requests back
	out["scripted"] = sp
	if api := cfg.OpenAI; api.Configured() {
		model := api.DefaultModel
		if model == "" {
			model = defaultOpenAIModel
		}
		p, err := openai.New(openai.Options{APIKey: api.APIKey, BaseURL: api.BaseURL, DefaultModel: model,
			MaxRetries: api.MaxRetries, Timeout: api.Timeout.D(), MaxTokens: api.MaxTokens, Logger: log, Buffered: api.Buffered})
		if err != nil {
			return nil, fmt.Errorf("provider.openai: %w", err)
		}
		out["openai"] = p
		log.Info("model provider configured", "provider", "openai", "base_url", api.BaseURL, "default_model", model)
	}
	if api := cfg.Anthropic; api.APIKey != "" {
		model := api.DefaultModel
		if model == "" {
			model = defaultAnthropicModel
		}
		p, err := anthropic.New(anthropic.Options{APIKey: api.APIKey, BaseURL: api.BaseURL, DefaultModel: model,
			MaxRetries: api.MaxRetries, Timeout: api.Timeout.D(), MaxTokens: api.MaxTokens, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("provider.anthropic: %w", err)
		}
		out["anthropic"] = p
		log.Info("model provider configured", "provider", "anthropic", "base_url", api.BaseURL, "default_model", model)
	}
	return out, nil
}

// openJournal opens the run journal the config names. A journal that cannot be opened
// (a foreign or corrupt file, a PostgreSQL that is down) stops the start with the reason.
func openJournal(j config.Journal, retainRuns int, log *slog.Logger) (runlog.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch j.Driver {
	case "sqlite":
		path := filepath.Join(j.DataDir, "journal.db")
		s, err := runlog.OpenSQLite(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("the run journal: %w", err)
		}
		log.Info("runs are journaled", "driver", "sqlite", "file", path)
		return s, nil
	case "postgres":
		s, err := runlog.OpenPostgres(ctx, j.DSN)
		if err != nil {
			return nil, fmt.Errorf("the run journal: %w", err)
		}
		log.Info("runs are journaled", "driver", "postgres")
		return s, nil
	}
	s, err := runlog.OpenMemory(ctx, runlog.MemoryLimits{FinishedRuns: retainRuns, FinishedBytes: int64(j.MemoryBytes)})
	if err != nil {
		return nil, fmt.Errorf("the run journal: %w", err)
	}
	log.Info("runs are journaled in memory only: they do not survive a restart (pass --data-dir to keep them)")
	return s, nil
}

// ownerName is this orchestrator's name in run leases: journal.owner, or the host name
// and the port it listens on.
func ownerName(j config.Journal, addr net.Addr) string {
	if j.Owner != "" {
		return j.Owner
	}
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(addr.String())
	return host + ":" + port
}
