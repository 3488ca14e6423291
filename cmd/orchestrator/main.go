// Command orchestrator runs toolmesh's orchestrator: it accepts worker registrations,
// keeps the routing table, and runs prompts through the tool loop for clients. It reads
// its flags and config and runs pkg/orchestrator; a program of one's own that embeds the
// orchestrator does the same with its own extensions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/pkg/orchestrator"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, timeout, err := load(args)
	if err != nil {
		return err
	}
	o, err := orchestrator.New(orchestrator.Options{Config: cfg, ShutdownTimeout: timeout})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return o.Run(ctx)
}

// load reads the flags and the config file they name, the flags overriding the file,
// and returns the configuration, checked, and the shutdown timeout.
func load(args []string) (orchestrator.Config, time.Duration, error) {
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
		return orchestrator.Config{}, 0, err
	}
	if fs.NArg() > 0 {
		return orchestrator.Config{}, 0, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// The flags override the file before it is checked: they may supply what its
	// settings require (--data-dir for journal.driver sqlite). A key a flag set is
	// reported as the flag's, not the file's, when it is refused.
	sources := map[string]string{}
	over := func(cfg *orchestrator.Config) {
		for _, f := range []struct {
			value, flag, key string
			field            *string
		}{
			{*listen, "listen", "listen", &cfg.Listen}, {*script, "script", "provider.script", &cfg.Provider.Script},
			{*logLevel, "log-level", "log.level", &cfg.Log.Level}, {*logFormat, "log-format", "log.format", &cfg.Log.Format},
			{*metricsListen, "metrics-listen", "telemetry.metrics_listen", &cfg.Telemetry.MetricsListen},
			{*healthListen, "health-listen", "health_listen", &cfg.HealthListen}, {*dataDir, "data-dir", "journal.data_dir", &cfg.Journal.DataDir},
			{*journalDriver, "journal", "journal.driver", &cfg.Journal.Driver}, {*journalDSN, "journal-dsn", "journal.dsn", &cfg.Journal.DSN},
			{*owner, "owner", "journal.owner", &cfg.Journal.Owner},
		} {
			if f.value != "" {
				*f.field = f.value
				sources[f.key] = "--" + f.flag
			}
		}
	}
	cfg, err := orchestrator.LoadConfigOver(*cfgPath, over) // no file: the defaults
	if invalid := (*orchestrator.ValidationError)(nil); errors.As(err, &invalid) {
		err = invalid.WithSources(sources)
	}
	if err != nil {
		return orchestrator.Config{}, 0, err
	}
	timeout := *shutdown
	if timeout <= 0 {
		timeout = -1 // runs in progress are cancelled at once
	}
	return cfg, timeout, nil
}
