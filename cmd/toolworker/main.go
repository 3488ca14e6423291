// Command toolworker hosts toolmesh's example tool groups (math, text, shop, library and
// the others of internal/examplegroups, chosen with -groups) as a worker: it serves
// ToolWorkerService, registers with an orchestrator, and drains on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/gctune"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "toolworker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("toolworker", flag.ContinueOnError)
	groups := fs.String("groups", "math", "comma-separated example groups to serve: "+strings.Join(groupNames(), ", ")+", or echo_<name> (shows the context it receives)")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve ToolWorkerService on")
	advertise := fs.String("advertise", "", "address the orchestrator dials (default: the listen address)")
	orchestrator := fs.String("orchestrator", "127.0.0.1:7070", "orchestrator address (ToolRegistryService): host:port, several separated by commas, or dns:///host:port for every address the name resolves to; the worker registers with each")
	id := fs.String("id", "", "worker id, stable across reconnects (default: host name plus a random suffix)")
	capacity := fs.Int("capacity", 64, "calls run at once; further calls wait (0: unlimited)")
	paymentsDB := fs.String("payments-db", "", "SQLite file the payments group records its effects in, shared by its replicas on this host (default: in memory)")
	ledger := fs.Int("ledger", 10000, "answers the idempotency ledger keeps, so that an idempotent call the orchestrator sends again (after it restarted) runs once; 0 turns it off")
	drain := fs.Duration("drain-timeout", 20*time.Second, "how long to wait for calls in flight on SIGTERM")
	delay := fs.Duration("delay", 0, "added latency before every call, to simulate slow tools")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	healthListen := fs.String("health-listen", "", "address of a plaintext gRPC server with only grpc.health.v1, for probes that speak no TLS (empty: none)")
	metricsListen := fs.String("metrics-listen", "", "address to serve Prometheus /metrics on (empty: none)")
	contextMax := fs.Int("context-max-bytes", 8192, "largest encoded ToolCallContext a call may carry; match the orchestrator's context.max_bytes")
	reconnectMin := fs.Duration("reconnect-min", 100*time.Millisecond, "shortest delay between registration attempts")
	reconnectMax := fs.Duration("reconnect-max", 5*time.Second, "longest delay between registration attempts: the worker is registered within this long of the orchestrator serving again")
	gcMinHeap := fs.Int("gc-min-heap-mib", 64, "heap the garbage collector may grow to before it runs, in MiB, while the live heap is smaller (gctune.Start); 0: Go's default (GOGC alone)")
	plaintext := fs.Bool("plaintext", false, "serve without TLS on a -listen address that is not loopback (local development only: anything that reaches the port may call the tools)")
	tlsFlags := cli.AddTLSFlags(fs, "orchestrator-id", "identity of the orchestrator: the only caller of Invoke, and the only registry the worker registers with")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: toolworker [flags]\n\nServes built-in tool groups as a toolmesh worker. Telemetry follows the standard OTEL_*\nvariables (traces: none unless OTEL_TRACES_EXPORTER is set; metrics: Prometheus on\n--metrics-listen).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := checkFlags(*capacity, *delay, *contextMax, *gcMinHeap, *reconnectMin, *reconnectMax); err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	logging.Capture(log)
	defer gctune.Start(uint64(*gcMinHeap) << 20)()
	// Exporters come from the standard OTEL_* variables; by default traces go nowhere and
	// metrics to the Prometheus endpoint.
	sdk, err := otelsetup.FromEnv(context.Background(), otelsetup.Options{ServiceName: "toolmesh-worker", ServiceVersion: cli.Version(), Logger: log, Prometheus: true})
	if err != nil {
		return err
	}
	defer func() {
		if err := cli.FlushTelemetry(sdk, 5*time.Second); err != nil {
			log.Warn("telemetry shutdown", "error", err)
		}
	}()
	stopMetrics, err := serveMetrics(sdk, *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	var effects examplegroups.Effects
	if *paymentsDB != "" {
		fe, err := openEffects(*paymentsDB)
		if err != nil {
			return err
		}
		defer func() { _ = fe.db.Close() }()
		effectsWorker, effects = *id, fe
	}
	gs, err := buildGroups(*groups, *delay, effects)
	if err != nil {
		return err
	}
	if *ledger < 0 {
		return fmt.Errorf("-ledger must not be negative, got %d", *ledger)
	}
	var l worker.Ledger
	if *ledger > 0 {
		l = worker.NewMemoryLedger(*ledger)
	}
	certs, orchestrators, err := tlsFlags.Load(log)
	if err != nil {
		return err
	}
	if certs != nil {
		defer certs.Close()
	}
	w, err := worker.New(worker.Options{
		TLS: certs, Orchestrators: orchestrators,
		Ledger: l,
		ID:     *id, Orchestrator: *orchestrator, Listen: *listen, Advertise: *advertise, Plaintext: *plaintext,
		MinBackoff: *reconnectMin, MaxBackoff: *reconnectMax, ContextMaxBytes: *contextMax,
		Capacity: int32(*capacity), DrainTimeout: *drain, HealthListen: *healthListen, Logger: log, Version: cli.Version(),
		TracerProvider: sdk.TracerProvider, MeterProvider: sdk.MeterProvider,
	}, gs...)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// serveMetrics serves Prometheus /metrics on addr (none when it is empty); stop ends it.
func serveMetrics(sdk *otelsetup.Providers, addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ms, err := sdk.ServeMetrics(addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-listen: %w", err)
	}
	log.Info("metrics serving", "address", ms.Addr())
	return func() { _ = ms.Shutdown(context.Background()) }, nil
}

// checkFlags checks the flags' ranges.
func checkFlags(capacity int, delay time.Duration, contextMax, gcMinHeap int, reconnectMin, reconnectMax time.Duration) error {
	if capacity < 0 {
		return fmt.Errorf("-capacity must not be negative, got %d", capacity)
	}
	if delay < 0 {
		return fmt.Errorf("-delay must not be negative, got %s", delay)
	}
	if contextMax < 256 || contextMax > 1<<20 {
		return fmt.Errorf("-context-max-bytes must be between 256 and 1048576, got %d", contextMax)
	}
	if gcMinHeap < 0 || gcMinHeap > 1<<20 {
		return fmt.Errorf("-gc-min-heap-mib must be between 0 and 1048576, got %d", gcMinHeap)
	}
	if reconnectMin <= 0 || reconnectMax < reconnectMin {
		return fmt.Errorf("-reconnect-min must be positive and -reconnect-max at least as long, got %s and %s", reconnectMin, reconnectMax)
	}
	return nil
}

// buildGroups are the groups -groups names, each call delayed by delay, the payments
// group recording its effects in effects when set.
func buildGroups(groups string, delay time.Duration, effects examplegroups.Effects) ([]worker.Group, error) {
	var gs []worker.Group
	for _, name := range strings.Split(groups, ",") {
		name = strings.TrimSpace(name)
		var wrap examplegroups.Wrap
		if delay > 0 {
			wrap = examplegroups.Delay(delay)
		}
		if name == examplegroups.PaymentsRole && effects != nil {
			gs = append(gs, examplegroups.PaymentsGroup(wrap, effects))
			continue
		}
		g, ok := examplegroups.GroupWith(name, wrap)
		if !ok {
			return nil, fmt.Errorf("-groups: unknown group %q (available: %s, echo_<name>)", name, strings.Join(groupNames(), ", "))
		}
		gs = append(gs, g)
	}
	return gs, nil
}

func groupNames() []string {
	var names []string
	for n := range examplegroups.Groups() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
