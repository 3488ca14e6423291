package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Options configure FromEnv. The zero value is valid: service "unknown_service:<program>",
// nothing exported until the variables say where, console output on stdout.
type Options struct {
	// ServiceName and ServiceVersion become service.name and service.version, unless
	// OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME say otherwise.
	ServiceName    string
	ServiceVersion string
	// Logger receives configuration warnings; default discard.
	Logger *slog.Logger
	// Prometheus makes prometheus the default of OTEL_METRICS_EXPORTER, so that
	// MetricsHandler serves the metrics without any variable set.
	Prometheus bool
	// Console is where OTEL_TRACES_EXPORTER=console and OTEL_METRICS_EXPORTER=console
	// write; default os.Stdout. A command whose own output is on stdout passes os.Stderr.
	Console io.Writer
	// SpanProcessors are added besides the exporter the environment selects: a test's
	// span recorder, or an exporter of the program's own.
	SpanProcessors []sdktrace.SpanProcessor
	// MetricReaders are added besides the reader the environment selects.
	MetricReaders []sdkmetric.Reader
}

// Providers are the SDK providers FromEnv built. Hand TracerProvider and MeterProvider
// to whatever records (worker.Options, otelgrpc, your own instrumentation), and call
// Shutdown before the process exits.
type Providers struct {
	// TracerProvider and MeterProvider are SDK providers, or no-op ones when
	// OTEL_SDK_DISABLED=true.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider

	registry  *prometheus.Registry // nil unless metrics go to prometheus
	spans     *countingExporter    // nil without a span exporter
	shutdowns []func(context.Context) error

	shutdownOnce sync.Once
	shutdownErr  error
}

// FromEnv builds the providers the OTEL_* variables ask for (see the package doc). It
// fails on a variable it cannot use, naming it.
func FromEnv(ctx context.Context, opts Options) (*Providers, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch v := os.Getenv("OTEL_SDK_DISABLED"); strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return &Providers{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}, nil
	case "", "false":
	default:
		return nil, fmt.Errorf("otelsetup: OTEL_SDK_DISABLED=%q: must be true or false", v)
	}
	if v := strings.TrimSpace(os.Getenv("OTEL_PROPAGATORS")); v != "" && !strings.EqualFold(v, "tracecontext") {
		log.Warn("OTEL_PROPAGATORS ignored: toolmesh propagates W3C tracecontext only, never baggage, so context entries cannot leak past the per-group converters", "OTEL_PROPAGATORS", v)
	}
	console := opts.Console
	if console == nil {
		console = os.Stdout
	}

	res, err := newResource(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("otelsetup: %w", err)
	}
	spanExp, err := newSpanExporter(ctx, console)
	if err != nil {
		return nil, fmt.Errorf("otelsetup: %w", err)
	}
	reader, registry, err := newMetricReader(ctx, opts.Prometheus, console)
	if err != nil {
		if spanExp != nil {
			_ = spanExp.Shutdown(ctx)
		}
		return nil, fmt.Errorf("otelsetup: %w", err)
	}

	p := &Providers{registry: registry}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if spanExp != nil {
		p.spans = &countingExporter{SpanExporter: spanExp}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(p.spans))
	}
	for _, sp := range opts.SpanProcessors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(sp))
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if reader != nil {
		mpOpts = append(mpOpts, sdkmetric.WithReader(reader))
	}
	for _, r := range opts.MetricReaders {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}
	// The providers shut their processors, exporters and readers down.
	tp := sdktrace.NewTracerProvider(tpOpts...)
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	p.TracerProvider, p.MeterProvider = tp, mp
	p.shutdowns = []func(context.Context) error{
		func(ctx context.Context) error { return wrapErr("spans not exported", tp.Shutdown(ctx)) },
		func(ctx context.Context) error { return wrapErr("metrics not exported", mp.Shutdown(ctx)) },
	}
	return p, nil
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// newResource describes the process: the code's service name and version, then
// OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME, later ones winning as the
// specification orders them.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	name := opts.ServiceName
	if name == "" {
		name = "unknown_service:" + filepath.Base(os.Args[0])
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(opts.ServiceVersion))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		// The environment detector is the only one that fails.
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES=%q or OTEL_SERVICE_NAME=%q: %w", os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), os.Getenv("OTEL_SERVICE_NAME"), err)
	}
	return res, nil
}

// Shutdown flushes and stops the providers, waiting until ctx ends at the latest: pass
// a context with a deadline, short for a command line. The error says what could not be
// exported, including spans an exporter failed to export earlier. Later calls return the
// first call's result.
func (p *Providers) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.shutdownOnce.Do(func() {
		// Traces and metrics flush at once, so that each has the whole deadline.
		errs := make([]error, len(p.shutdowns)+1)
		var wg sync.WaitGroup
		for i, s := range p.shutdowns {
			wg.Go(func() { errs[i] = s(ctx) })
		}
		wg.Wait()
		errs[len(p.shutdowns)] = p.spans.failures()
		if err := errors.Join(errs...); err != nil {
			p.shutdownErr = fmt.Errorf("otelsetup: %w", err)
		}
	})
	return p.shutdownErr
}
