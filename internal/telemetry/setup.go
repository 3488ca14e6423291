package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of toolmesh's own spans and metrics.
const ScopeName = "github.com/toolmesh/toolmesh/internal/telemetry"

// Options configure Setup. The zero value is valid: service "unknown_service:<program>",
// the process environment, no payloads, no context values, no /metrics.
type Options struct {
	// ServiceName and ServiceVersion become service.name and service.version, unless
	// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
	ServiceName    string
	ServiceVersion string
	// Env reads the configuration variables; default os.Getenv. The OTLP exporters also
	// read the few variables Setup does not (certificate files) from the process
	// environment themselves.
	Env func(string) string
	// Logger receives configuration warnings; default discard.
	Logger *slog.Logger
	// CapturePayloads records tool arguments and results on execute_tool spans
	// (gen_ai.tool.call.arguments / gen_ai.tool.call.result). They may hold anything the
	// model or a tool wrote: off unless the operator asks.
	CapturePayloads bool
	// ContextAllowList names the ToolCallContext keys that ContextAttributes records, as
	// toolmesh.context.<key>. Keys not listed never reach a span.
	ContextAllowList []string
	// Prometheus makes prometheus the default of OTEL_METRICS_EXPORTER, so that
	// MetricsHandler serves the metrics without any variable set.
	Prometheus bool

	// Console is where OTEL_TRACES_EXPORTER=console and OTEL_METRICS_EXPORTER=console
	// write; default os.Stdout.
	Console io.Writer
	// SpanProcessors are added besides the exporters the environment selects; tests pass
	// a tracetest.SpanRecorder.
	SpanProcessors []sdktrace.SpanProcessor
	// MetricReaders are added besides the readers the environment selects; tests pass an
	// sdkmetric.ManualReader.
	MetricReaders []sdkmetric.Reader
}

// Telemetry holds the tracer and meter providers of one process and the instruments
// toolmesh records with. A nil *Telemetry is valid and records nothing, so call sites
// need no nil checks.
type Telemetry struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	tracer   trace.Tracer
	meter    metric.Meter
	inst     *instruments
	registry *prometheus.Registry // nil unless the prometheus exporter is on
	capture  bool
	allow    []string // sorted
	replicas atomic.Pointer[func() map[string]int64]

	shutdowns    []func(context.Context) error
	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the providers the environment asks for (see env.go for the variables)
// and the instruments. Call Shutdown before the process exits to flush what is buffered.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	get := opts.Env
	if get == nil {
		get = os.Getenv
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := parseEnv(get, opts.Prometheus)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if cfg.disabled {
		return FromProviders(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider(), opts)
	}
	if cfg.propagators != "" {
		log.Warn("OTEL_PROPAGATORS ignored: toolmesh propagates W3C tracecontext only, never baggage, so context entries cannot leak past the per-group converters", "OTEL_PROPAGATORS", cfg.propagators)
	}
	console := opts.Console
	if console == nil {
		console = os.Stdout
	}

	var shutdowns []func(context.Context) error
	abort := func(err error) (*Telemetry, error) {
		for _, s := range slices.Backward(shutdowns) {
			_ = s(ctx)
		}
		return nil, fmt.Errorf("telemetry: %w", err)
	}

	res := newResource(cfg, opts)
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(cfg.sampler)}
	for _, name := range cfg.traceExporters {
		exp, err := newSpanExporter(ctx, name, cfg.traceOTLP, console)
		if err != nil {
			return abort(fmt.Errorf("OTEL_TRACES_EXPORTER=%s: %w", name, err))
		}
		shutdowns = append(shutdowns, exp.Shutdown)
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	for _, sp := range opts.SpanProcessors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(sp))
	}

	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	var registry *prometheus.Registry
	for _, name := range cfg.metricExporter {
		reader, reg, err := newMetricReader(ctx, name, cfg, console)
		if err != nil {
			return abort(fmt.Errorf("OTEL_METRICS_EXPORTER=%s: %w", name, err))
		}
		shutdowns = append(shutdowns, reader.Shutdown)
		if reg != nil {
			registry = reg
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(reader))
	}
	for _, r := range opts.MetricReaders {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}

	// The providers shut their processors and readers down: they replace the exporter
	// shutdowns collected so far.
	tp := sdktrace.NewTracerProvider(tpOpts...)
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	shutdowns = []func(context.Context) error{tp.Shutdown, mp.Shutdown}
	t, err := FromProviders(tp, mp, opts)
	if err != nil {
		return abort(err)
	}
	t.registry = registry
	t.shutdowns = shutdowns
	return t, nil
}

// FromProviders builds a Telemetry over providers someone else owns: Shutdown leaves
// them alone. It is how the public SDKs (pkg/worker, pkg/client), whose users hand in
// plain OpenTelemetry providers, use the helpers here. Only Setup serves Prometheus.
func FromProviders(tp trace.TracerProvider, mp metric.MeterProvider, opts Options) (*Telemetry, error) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	t := &Telemetry{
		tp:      tp,
		mp:      mp,
		tracer:  tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		meter:   mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)),
		capture: opts.CapturePayloads,
		allow:   slices.Compact(slices.Sorted(slices.Values(opts.ContextAllowList))),
	}
	inst, err := newInstruments(t.meter, t.observeReplicas)
	if err != nil {
		return nil, err
	}
	t.inst = inst
	return t, nil
}

func newResource(cfg envConfig, opts Options) *resource.Resource {
	name := opts.ServiceName
	if name == "" {
		name = "unknown_service:" + filepath.Base(os.Args[0])
	}
	// Later attributes win: code defaults, then OTEL_RESOURCE_ATTRIBUTES, then
	// OTEL_SERVICE_NAME, as the specification orders them.
	attrs := []attribute.KeyValue{
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
		semconv.ServiceName(name),
	}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(opts.ServiceVersion))
	}
	attrs = append(attrs, cfg.resource...)
	if cfg.serviceName != "" {
		attrs = append(attrs, semconv.ServiceName(cfg.serviceName))
	}
	return resource.NewWithAttributes(semconv.SchemaURL, attrs...)
}

// Shutdown flushes and stops the providers Setup built. Later calls return the first
// call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutdownOnce.Do(func() {
		var errs []error
		for _, s := range t.shutdowns {
			errs = append(errs, s(ctx))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

// TracerProvider is the provider toolmesh's spans come from; a no-op one for a nil
// Telemetry.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t == nil || t.tp == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tp
}

// MeterProvider is the provider toolmesh's metrics come from; a no-op one for a nil
// Telemetry.
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil || t.mp == nil {
		return metricnoop.NewMeterProvider()
	}
	return t.mp
}

// Propagator is W3C tracecontext and nothing else. Baggage is left out on purpose: it
// would carry entries to every hop, past the per-group ToolCallContext converters.
func (t *Telemetry) Propagator() propagation.TextMapPropagator {
	return propagation.TraceContext{}
}

// Tracer is the tracer of toolmesh's own spans.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil || t.tracer == nil {
		return tracenoop.NewTracerProvider().Tracer(ScopeName)
	}
	return t.tracer
}

// Meter is the meter of toolmesh's own metrics.
func (t *Telemetry) Meter() metric.Meter {
	if t == nil || t.meter == nil {
		return metricnoop.NewMeterProvider().Meter(ScopeName)
	}
	return t.meter
}
