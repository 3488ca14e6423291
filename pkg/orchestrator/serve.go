package orchestrator

import (
	"cmp"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/console"
	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/anthropic"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// trust loads the orchestrator's certificate and CA bundle for mutual TLS, reloaded when
// they change.
func (o *Orchestrator) trust() error {
	cfg := o.cfg
	if !cfg.TLS.Enabled() {
		o.log.Warn("mutual TLS is off: the port serves plaintext, and any process that reaches it may register workers and start runs (set tls.* outside local development)")
		return nil
	}
	certs, err := trust.Load(trust.Files{CA: cfg.TLS.CAFile, Cert: cfg.TLS.CertFile, Key: cfg.TLS.KeyFile}, o.log)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	o.certs = certs
	o.onClose(certs.Close)
	certs.Watch(cmp.Or(cfg.TLS.ReloadInterval.D(), time.Second))
	o.log.Info("mutual TLS on", "spiffe_id", certs.ID().String(), "worker_grants", len(cfg.Trust.Workers), "clients", len(cfg.Trust.Clients))
	return nil
}

// newRouter builds the routing table of the workers.
func (o *Orchestrator) newRouter(conv func(string) ctxconv.Converter) error {
	cfg := o.cfg
	var dialAs func(address, identity string) (*grpc.ClientConn, error)
	var callToken func(string, trust.CallClaims, time.Time) (string, error)
	if certs := o.certs; certs != nil {
		dialAs = func(address, identity string) (*grpc.ClientConn, error) {
			id, err := trust.ParseID(identity)
			if err != nil {
				return nil, err
			}
			// The worker's server must prove the identity it registered under.
			return grpc.NewClient(address, append(router.DialOptions(), grpc.WithTransportCredentials(certs.ClientCredentials(id)))...)
		}
		callToken = certs.MintCallToken
	}
	var err error
	if o.quar, err = router.NewQuarantine(cfg.Registry, o.log); err != nil {
		return err
	}
	o.rt = router.New(router.Options{
		Quarantine: o.quar.Hold, Approved: o.quar.Approved, DialAs: dialAs, CallToken: callToken,
		Converter: conv, Credentials: o.routerCredentials(), Codec: ctxcodec.Codec{MaxBytes: cfg.Context.MaxBytes},
		GracePeriod: cfg.Registry.GracePeriod.D(), DefaultTimeout: cfg.Router.DefaultToolTimeout.D(),
		EjectAfter: cfg.Router.EjectAfterFailures, EjectFor: cfg.Router.EjectDuration.D(), MaxAttempts: cfg.Router.MaxAttempts,
		PinDefinitions: cfg.Registry.PinDefinitions, Telemetry: o.tel, Logger: o.log,
		Limits: router.Limits{
			MaxWorkers: cfg.Registry.MaxWorkers, MaxTools: cfg.Registry.MaxTools,
			MaxDefinitionBytes: cfg.Registry.MaxDefinitionBytes, MaxServedTools: cfg.Registry.MaxServedTools,
		},
	})
	o.onClose(o.rt.Close)
	o.tel.RegisterReplicaGauge(o.rt.ReplicaCounts)
	return nil
}

// Run serves until ctx ends, then shuts down: new runs are refused, runs in progress
// get ShutdownTimeout to finish, workers' registration streams end (they re-register
// with the next orchestrator), and everything New acquired is released. When serving
// fails (a listener that cannot be opened, the gRPC server failing), Run shuts down the
// same way and returns why. Run may be called once; Close while it runs stops it.
func (o *Orchestrator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o.mu.Lock()
	if o.closers == nil || o.running != nil {
		o.mu.Unlock()
		return errRan
	}
	done := make(chan struct{})
	o.running, o.stopRun = done, cancel
	o.mu.Unlock()
	defer func() {
		o.release()
		close(done)
	}()
	g, hs := o.grpcServer()
	if err := o.serveHealth(hs); err != nil {
		return err
	}
	// The background work ends with ctx; Run waits for it before it releases anything.
	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() { o.quar.Watch(ctx, time.Second) }) // approvals take effect within a second
	o.srv.WarmUp(ctx)
	// Runs are served once the orchestrator is ready, while its journal works.
	bg.Go(func() { o.srv.WatchHealth(ctx, func(serving bool) { setServing(hs, serving) }) })
	web, err := o.webServer(g)
	if err != nil {
		return err
	}
	mux := newPortMux(o.lis, o.serverTLS())
	serveErr := make(chan error, 3)
	go func() { serveErr <- mux.serve() }()
	go func() { serveErr <- g.Serve(mux.grpc) }()
	go func() {
		if err := web.Serve(mux.http); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	o.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = web.Shutdown(sctx)
	})
	err = o.serve(ctx, &bg)
	if err == nil {
		select {
		case err = <-serveErr:
			err = fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
		}
	}
	cancel() // Maintain, WatchHealth and the quarantine's watch end with it
	o.stop(g, hs, web)
	bg.Wait()
	return err
}

// serve resumes the journal's runs, starts the maintenance and opens the metrics and MCP
// listeners.
func (o *Orchestrator) serve(ctx context.Context, bg *sync.WaitGroup) error {
	// Runs this orchestrator drove before it stopped, and those whose owner went away,
	// continue here; their workers register again meanwhile.
	if n, err := o.srv.Resume(ctx); err != nil {
		o.log.Warn("resuming runs from the journal", "error", err.Error())
	} else if n > 0 {
		o.log.Info("resuming runs from the journal", "runs", n)
	}
	bg.Go(func() { o.srv.Maintain(ctx) })
	o.log.Info("orchestrator serving", "address", o.lis.Addr().String(), "provider", o.def, "model", llm.Label(o.providers[o.def], ""))
	if err := o.serveMetrics(); err != nil {
		return err
	}
	return o.serveMCP()
}

// stop shuts the services down in order: health first, then runs, then the HTTP side,
// then the gRPC server.
//
// The HTTP side's calls reach the gRPC server through the transcoder, over streams the
// gRPC server's stop closes at once (its drain of an HTTP handler's stream is a close):
// a stream ending just then lost its status, and the client read "missing trailer
// header Grpc-Status", an internal error, where a gRPC client read the run's status. So
// the HTTP server is shut down first, waiting (2 s at most: the runs have stopped, and
// a connection that never finished its request would hold it that long) for the calls
// under way to end with their statuses.
func (o *Orchestrator) stop(g *grpc.Server, hs *health.Server, web *http.Server) {
	o.log.Info("orchestrator shutting down", "timeout", o.shutdown.String())
	hs.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdown)
	defer cancel()
	o.srv.Shutdown(sctx)
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = web.Shutdown(wctx)
	wcancel()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
		<-stopped
	}
	o.log.Info("orchestrator stopped")
}

// grpcServer is the gRPC server of the orchestrator's services, health and reflection.
// Workers register at once; runs (and the process's overall status) wait until the
// workers the journal knew of are back, or registry.readiness_grace passes.
func (o *Orchestrator) grpcServer() (*grpc.Server, *health.Server) {
	opts := append(server.PortOptions(o.cfg, o.log), o.tel.ServerOptions()...)
	if o.certs != nil {
		// The port's mux takes each connection through the TLS handshake (serverTLS);
		// the gRPC server gets the connections that chose gRPC, with their TLS state.
		opts = append(opts, grpc.Creds(tlsDone{}))
	}
	opts = append(opts, o.srv.AuthOptions()...)
	g := grpc.NewServer(opts...)
	o.srv.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	hs.SetServingStatus(toolpb.ToolRegistryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	setServing(hs, false)
	return g, hs
}

// serverTLS is the TLS of the orchestrator's port, nil in plaintext. A client
// certificate is optional in the handshake (a kubelet's health probe has none, a client
// may bring a bearer token instead); the interceptors decide.
func (o *Orchestrator) serverTLS() *tls.Config {
	if o.certs == nil {
		return nil
	}
	return o.certs.ServerTLS(false)
}

// webServer serves OrchestratorService to browsers and curl on the orchestrator's port
// (over HTTP/1.1): the Connect protocol, gRPC-Web, and REST with JSON at the paths of its
// HTTP annotations, each call transcoded to gRPC and served by g, through the same
// interceptors as a gRPC call (authentication, tenants, limits). With console.enabled,
// the console is at /console/.
func (o *Orchestrator) webServer(g *grpc.Server) (*http.Server, error) {
	// A request's body is at most twice server.max_receive_bytes (JSON is larger than the
	// message it stands for; the gRPC server then refuses a message past the bound, as
	// it would over gRPC), decompressed too. The transcoder's buffer, which bounds
	// responses as well, is larger: a run's answer of a few megabytes, escaped in JSON,
	// is still read over REST.
	maxBody := 2 * int64(o.cfg.Server.MaxReceiveBytes)
	// Streams' messages, decompressed by the transcoder, and the answers to them, are as
	// large as its buffer at most; what it decompresses at once, as large as that too.
	maxMessage := min(8*int64(o.cfg.Server.MaxReceiveBytes), 1<<30)
	api, err := vanguard.NewTranscoder([]*vanguard.Service{vanguard.NewService(toolpb.OrchestratorService_ServiceDesc.ServiceName, g)},
		// Compression first: the transcoder's WithCompression, given after a codec,
		// writes to a map it never made.
		vanguard.WithCompression("gzip", func() connect.Compressor { return gzip.NewWriter(io.Discard) }, newBoundedGzip(maxMessage, semaphore.NewWeighted(maxMessage))),
		vanguard.WithCodec(newStrictJSON),
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithMaxMessageBufferBytes(uint32(maxMessage)),
			vanguard.WithMaxGetURLBytes(maxGetURLBytes),
			// A query parameter the API does not have is ignored (a cache buster a
			// browser library adds, say); one it has must have a valid value.
			vanguard.WithRESTUnmarshalOptions(vanguard.RESTUnmarshalOptions{DiscardUnknownQueryParams: true}),
		))
	if err != nil {
		return nil, fmt.Errorf("serving the API over HTTP: %w", err)
	}
	mux := http.NewServeMux()
	apiHandler := restPaths(protocolErrors(api))
	if o.cfg.Auth.JWT.Enabled() {
		apiHandler = challenged(apiHandler)
	}
	mux.Handle("/", sameOrigin(mediaTypes(apiHandler)))
	if c := o.cfg.Console; c.Enabled {
		mux.Handle(consolePath, console.Handler(consolePath, console.Config{TraceURL: c.TraceURL, Tenancy: len(o.cfg.Tenants) > 0}))
		mux.Handle("GET /{$}", http.RedirectHandler(consolePath, http.StatusFound))
	}
	// Half of the receive budget: the calls the bodies become wait for the gRPC server's
	// budget while their bodies come, and clients of gRPC keep the other half.
	// At least two bodies' worth: a stream's compressed message counts as it came and as
	// it decompresses.
	bodies := newBodyGate(max(int64(o.cfg.Server.MaxInflightReceiveBytes)/2, 2*maxBody+4*bodyChunk), maxBody, true)
	return &http.Server{Handler: o.knownHost(bodies.wrap(mux)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelDebug)}, nil
}

// sameOrigin refuses a request that another site's page makes a browser send: a browser
// attaches a client certificate (mutual TLS) to any request to the orchestrator, whoever
// asks it to, so a POST from another origin (a form, a fetch without CORS) could act for
// the user. Browsers say where a request comes from (Sec-Fetch-Site, Origin); the API
// answers no CORS preflight, so a page of another origin cannot read its answers either.
// Clients other than browsers send neither header. Origins in also are taken as well
// (a public URL a reverse proxy serves the port at).
func sameOrigin(next http.Handler, also ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cross := r.Header.Get("Sec-Fetch-Site") == "cross-site"
		if o := r.Header.Get("Origin"); o != "" && o != "null" {
			if u, err := url.Parse(o); (err != nil || u.Host != r.Host) && !slices.Contains(also, o) {
				cross = true
			}
		} else if o == "null" {
			cross = true
		}
		if cross {
			http.Error(w, "a request from another site's page is refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// knownHost refuses, where the orchestrator takes requests without credentials, a request
// whose Host header names a DNS name it was not told it is reached by (server.allowed_hosts):
// a page of another site can have its own name resolve to the orchestrator's
// address (DNS rebinding, a loopback address on a developer's machine most of all), and
// its requests then come from the orchestrator's origin as far as the browser and
// sameOrigin can tell — reading runs, starting them. IP addresses, localhost and names
// under .localhost (which browsers resolve themselves) are taken. With credentials
// required (TLS, a bearer token, tenants) there is nothing to gain so: a browser has no
// token for the attacker's page, and TLS names the orchestrator, not the page's site.
func (o *Orchestrator) knownHost(next http.Handler) http.Handler {
	if o.cfg.TLS.Enabled() || o.cfg.Auth.JWT.Enabled() || len(o.cfg.Tenants) > 0 {
		return next
	}
	allowed := make(map[string]bool, len(o.cfg.Server.AllowedHosts))
	for _, h := range o.cfg.Server.AllowedHosts {
		allowed[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
		if host == "" || isIPLiteral(host) || host == "localhost" || strings.HasSuffix(host, ".localhost") || allowed[host] {
			next.ServeHTTP(w, r)
			return
		}
		host = strings.ToValidUTF8(host[:min(len(host), 256)], "")
		o.log.Warn("request refused: its Host is not a name the orchestrator answers to", "event", "audit", "host", host)
		http.Error(w, fmt.Sprintf("this orchestrator does not answer to the host name %q: list it in server.allowed_hosts", host), http.StatusMisdirectedRequest)
	})
}

// isIPLiteral reports whether host, from a Host header, is an IP address: an IPv6
// address may name its zone (fe80::1%25eth0, the '%' escaped as URLs have it). No DNS
// name resolves to it, so no rebinding reaches the orchestrator through it.
func isIPLiteral(host string) bool {
	if net.ParseIP(host) != nil {
		return true
	}
	a, err := netip.ParseAddr(strings.Replace(host, "%25", "%", 1))
	return err == nil && a.Is6() && a.Zone() != ""
}

// publicOrigin is the origin of the endpoint's public URL (mcp_serve.resource), which a
// reverse proxy in front serves from though it rewrites Host: none without one.
func publicOrigin(resource string) []string {
	u, err := url.Parse(resource)
	if resource == "" || err != nil || u.Host == "" {
		return nil
	}
	return []string{u.Scheme + "://" + u.Host}
}

// mcpIdleConn is how long the MCP endpoint keeps a connection open without a request;
// mcpMaxBody bounds a request's body, as the MCP SDK does.
const (
	mcpIdleConn = 2 * time.Minute
	mcpMaxBody  = 4 << 20
)

// Bounds of the HTTP side of the port.
const (
	consolePath    = "/console/"
	maxGetURLBytes = 64 << 10
	maxHeaderBytes = 64 << 10
)

// setServing sets the status of the process and of OrchestratorService.
func setServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", toolpb.OrchestratorService_ServiceDesc.ServiceName} {
		hs.SetServingStatus(name, st)
	}
}

// serveHealth serves the same statuses in plaintext on health_listen, for a kubelet's
// probes: nothing but health there.
func (o *Orchestrator) serveHealth(hs *health.Server) error {
	if o.cfg.HealthListen == "" {
		return nil
	}
	hlis, err := net.Listen("tcp", o.cfg.HealthListen)
	if err != nil {
		return fmt.Errorf("health_listen: %w", err)
	}
	hg := grpc.NewServer(server.RecoveryInterceptors(o.log)...)
	healthpb.RegisterHealthServer(hg, hs)
	go func() { _ = hg.Serve(hlis) }()
	o.onClose(hg.Stop)
	o.log.Info("health serving", "address", hlis.Addr().String())
	return nil
}

// serveMetrics serves Prometheus /metrics on telemetry.metrics_listen.
func (o *Orchestrator) serveMetrics() error {
	if o.cfg.Telemetry.MetricsListen == "" {
		return nil
	}
	ms, err := o.sdk.ServeMetrics(o.cfg.Telemetry.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics listen: %w", err)
	}
	o.onClose(func() { _ = ms.Shutdown(context.Background()) })
	o.log.Info("metrics serving", "address", ms.Addr())
	return nil
}

// serveMCP serves the mesh's tools as an MCP server on mcp_serve.listen.
func (o *Orchestrator) serveMCP() error {
	if o.cfg.MCPServe.Listen == "" {
		return nil
	}
	handler, err := o.srv.MCPHandler()
	if err != nil {
		return fmt.Errorf("mcp_serve: %w", err)
	}
	mlis, err := net.Listen("tcp", o.cfg.MCPServe.Listen)
	if err != nil {
		return fmt.Errorf("mcp_serve.listen: %w", err)
	}
	scheme := "http"
	if o.certs != nil {
		// HTTPS with the orchestrator's certificate; a client certificate is asked for
		// and verified when presented (a client may come with a bearer token instead).
		// MCP clients speak HTTP/1.1 as well as HTTP/2.
		tc := o.certs.ServerTLS(false)
		tc.NextProtos = []string{"h2", "http/1.1"}
		mlis, scheme = tls.NewListener(mlis, tc), "https"
	}
	// MCP clients look for the endpoint at /mcp as often as at the root: both serve it.
	// A request from another site's page (its Origin not the endpoint's) is refused, as
	// streamable HTTP requires of a server.
	handler = sameOrigin(handler, publicOrigin(o.cfg.MCPServe.Resource)...)
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	mux.Handle("/", handler)
	// The MCP SDK reads a body of 4 MiB at most.
	// At least two bodies' worth: a body of the bound is taken while another comes.
	bodies := newBodyGate(max(int64(o.cfg.Server.MaxInflightReceiveBytes), 2*mcpMaxBody), mcpMaxBody, false)
	hsrv := &http.Server{Handler: o.knownHost(bodies.wrap(mux)), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: maxHeaderBytes, IdleTimeout: mcpIdleConn}
	go func() { _ = hsrv.Serve(mlis) }()
	o.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hsrv.Shutdown(sctx)
	})
	o.log.Info("mcp serving", "address", mlis.Addr().String(), "url", scheme+"://"+mlis.Addr().String()+"/mcp")
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
		model := cmp.Or(api.DefaultModel, defaultOpenAIModel)
		p, err := openai.New(openai.Options{APIKey: api.APIKey, BaseURL: api.BaseURL, DefaultModel: model,
			MaxRetries: api.MaxRetries, Timeout: api.Timeout.D(), MaxTokens: api.MaxTokens, Logger: log, Buffered: api.Buffered})
		if err != nil {
			return nil, fmt.Errorf("provider.openai: %w", err)
		}
		out["openai"] = p
		log.Info("model provider configured", "provider", "openai", "base_url", api.BaseURL, "default_model", model)
	}
	if api := cfg.Anthropic; api.APIKey != "" {
		model := cmp.Or(api.DefaultModel, defaultAnthropicModel)
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

// openJournal opens the run journal the config names, encrypted when
// journal.encryption_key_file says so. A journal that cannot be opened (a foreign or
// corrupt file, a PostgreSQL that is down) stops the start with the reason.
func openJournal(j config.Journal, retainRuns int, log *slog.Logger) (runlog.Store, error) {
	s, err := openStore(j, retainRuns, log)
	if err != nil || j.EncryptionKeyFile == "" {
		return s, err
	}
	key, err := runlog.ReadKey(j.EncryptionKeyFile)
	if err == nil {
		var enc runlog.Store
		if enc, err = runlog.Encrypted(s, key); err == nil {
			log.Info("the journal's records are encrypted")
			return enc, nil
		}
	}
	_ = s.Close()
	return nil, fmt.Errorf("journal.encryption_key_file: %w", err)
}

func openStore(j config.Journal, retainRuns int, log *slog.Logger) (runlog.Store, error) {
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
