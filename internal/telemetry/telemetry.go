package telemetry

import (
	"slices"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of toolmesh's own spans and metrics.
const ScopeName = "github.com/toolmesh/toolmesh/internal/telemetry"

// Options configure FromProviders. The zero value records no payloads and no context
// values.
type Options struct {
	// CapturePayloads records tool arguments and results on execute_tool spans
	// (gen_ai.tool.call.arguments / gen_ai.tool.call.result). They may hold anything the
	// model or a tool wrote: off unless the operator asks.
	CapturePayloads bool
	// ContextAllowList names the ToolCallContext keys that ContextAttributes records, as
	// toolmesh.context.<key>. Keys not listed never reach a span.
	ContextAllowList []string
	// KnownModels are model names (as providers are asked for them, without the
	// provider/ prefix) that metrics always label by name. Other names share the
	// bounded rest of the label's values.
	KnownModels []string
}

// Telemetry holds the tracer and meter providers of one process and the instruments
// toolmesh records with. A nil *Telemetry is valid and records nothing, so call sites
// need no nil checks.
type Telemetry struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	tracer  trace.Tracer
	meter   metric.Meter
	inst    *instruments
	capture bool
	allow   []string // sorted
	// off: both providers are no-ops, so nothing is recorded and the hot paths skip
	// building spans and attributes; noTraces: the tracer provider is a no-op (metrics
	// may still be recorded).
	off, noTraces bool
	// sets caches the attribute sets of metric recordings (see attrSets).
	sets     attrSets
	replicas atomic.Pointer[func() map[string]int64]
}

// FromProviders builds a Telemetry over providers its caller owns and shuts down: an
// SDK setup such as pkg/otelsetup's in the binaries, the plain OpenTelemetry providers a
// user hands to the public SDKs (pkg/worker, pkg/client), or in-memory ones in tests. A
// nil provider records nothing.
func FromProviders(tp trace.TracerProvider, mp metric.MeterProvider, opts Options) (*Telemetry, error) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	_, noTraces := tp.(tracenoop.TracerProvider)
	_, noMetrics := mp.(metricnoop.MeterProvider)
	t := &Telemetry{
		off:      noTraces && noMetrics,
		noTraces: noTraces,
		tp:       tp,
		mp:       mp,
		tracer:   tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		meter:    mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)),
		capture:  opts.CapturePayloads,
		allow:    slices.Compact(slices.Sorted(slices.Values(opts.ContextAllowList))),
	}
	inst, err := newInstruments(t.meter, t.observeReplicas)
	if err != nil {
		return nil, err
	}
	inst.models.admit(opts.KnownModels...)
	t.inst = inst
	return t, nil
}

// Off reports whether nothing is recorded: a nil Telemetry, or one over no-op
// providers.
func (t *Telemetry) Off() bool { return t == nil || t.off }

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
