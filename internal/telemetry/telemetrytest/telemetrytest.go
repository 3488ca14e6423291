// Package telemetrytest gives tests a Telemetry that keeps its spans and metrics in
// memory, and helpers to look at them.
package telemetrytest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Recorder is a Telemetry recording into a SpanRecorder and a ManualReader.
type Recorder struct {
	*telemetry.Telemetry
	Spans  *tracetest.SpanRecorder
	Reader *sdkmetric.ManualReader
}

// New sets up a Telemetry from opts plus an in-memory span recorder and metric reader,
// and shuts it down when the test ends. Unless opts.Env is set, no variable is read, so
// the environment the tests run in changes nothing.
func New(tb testing.TB, opts telemetry.Options) *Recorder {
	tb.Helper()
	rec := &Recorder{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	opts.SpanProcessors = append(opts.SpanProcessors, rec.Spans)
	opts.MetricReaders = append(opts.MetricReaders, rec.Reader)
	if opts.Env == nil {
		opts.Env = Env(nil)
	}
	tel, err := telemetry.Setup(context.Background(), opts)
	if err != nil {
		tb.Fatalf("telemetry.Setup: %v", err)
	}
	tb.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rec.Telemetry = tel
	return rec
}

// Env returns an Options.Env that reads vars and nothing else.
func Env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// Ended returns the spans ended so far, in the order they ended.
func (r *Recorder) Ended() []sdktrace.ReadOnlySpan { return r.Spans.Ended() }

// Span returns the one ended span named name; the test fails if there is not exactly one.
func (r *Recorder) Span(tb testing.TB, name string) sdktrace.ReadOnlySpan {
	tb.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range r.Spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		names := make([]string, 0, len(r.Spans.Ended()))
		for _, s := range r.Spans.Ended() {
			names = append(names, s.Name())
		}
		tb.Fatalf("want one ended span named %q, found %d among %q", name, len(found), names)
	}
	return found[0]
}

// Metrics collects the metrics recorded so far.
func (r *Recorder) Metrics(tb testing.TB) metricdata.ResourceMetrics {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collect metrics: %v", err)
	}
	return rm
}

// Metric collects the metrics and returns the one named name, or fails the test.
func (r *Recorder) Metric(tb testing.TB, name string) metricdata.Metrics {
	tb.Helper()
	rm := r.Metrics(tb)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	tb.Fatalf("no metric named %q was recorded", name)
	return metricdata.Metrics{}
}

// Attrs returns a span's attributes as key → value (string, int64, []string, ...), for
// comparing with go-cmp.
func Attrs(s sdktrace.ReadOnlySpan) map[string]any {
	return AttrMap(s.Attributes())
}

// AttrMap returns attributes as key → value.
func AttrMap(kvs []attribute.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}
