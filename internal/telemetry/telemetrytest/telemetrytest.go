// Package telemetrytest gives tests a Telemetry that keeps its spans and metrics in
// memory, and helpers to look at them.
package telemetrytest

import (
	"context"
	"testing"
	"time"

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

// New builds a Telemetry from opts over an SDK tracer provider that samples every span
// into a SpanRecorder and a meter provider read by a ManualReader, and shuts them down
// when the test ends. The sampler is set, not read from OTEL_TRACES_SAMPLER, so the
// environment the tests run in does not decide what is recorded.
func New(tb testing.TB, opts telemetry.Options) *Recorder {
	tb.Helper()
	rec := &Recorder{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec.Spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rec.Reader))
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := telemetry.FromProviders(tp, mp, opts)
	if err != nil {
		tb.Fatalf("telemetry.FromProviders: %v", err)
	}
	rec.Telemetry = tel
	return rec
}

// Ended returns the spans ended so far, in the order they ended.
func (r *Recorder) Ended() []sdktrace.ReadOnlySpan { return r.Spans.Ended() }

// Span returns the one ended span named name; the test fails if there is not exactly one.
func (r *Recorder) Span(tb testing.TB, name string) sdktrace.ReadOnlySpan {
	tb.Helper()
	// A span may end a moment after the call it covers returned to the test (a gRPC
	// server's span ends once its status is written): wait a little for it.
	var found []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		found = found[:0]
		for _, s := range r.Spans.Ended() {
			if s.Name() == name {
				found = append(found, s)
			}
		}
		if len(found) > 0 || time.Now().After(deadline) {
			break
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

// Exercise records something in every toolmesh instrument: what TestMetricsRecorded
// expects, and what an exposition of all of them needs.
func Exercise(ctx context.Context, tel *telemetry.Telemetry) {
	ctx, run := tel.StartRun(ctx, telemetry.RunAttrs{RunID: "r1"})
	_, chat := tel.StartChat(ctx, "openai", "gpt-4o")
	tel.EndChat(chat, telemetry.ChatResult{InputTokens: 100, OutputTokens: 20, ResponseModel: "gpt-4o-2024"})
	_, chat = tel.StartChat(ctx, "openai", "gpt-4o")
	tel.EndChat(chat, telemetry.ChatResult{Err: context.DeadlineExceeded})
	tel.RecordTokens(ctx, "openai", "gpt-4o", 7, 3)
	_, tool := tel.StartTool(ctx, telemetry.ToolAttrs{Name: "add", Group: "math"})
	tel.EndTool(tool, telemetry.ToolResult{})
	_, tool = tel.StartTool(ctx, telemetry.ToolAttrs{Name: "add", Group: "math"})
	tel.EndTool(tool, telemetry.ToolResult{ErrorType: "FAILED"})
	tel.RecordToolCall(ctx, "fetch", "", "ok", 30*time.Millisecond)
	tel.AddInFlight(ctx, "math-1", "math", 1)
	tel.AddInFlight(ctx, "math-1", "math", 1)
	tel.AddInFlight(ctx, "math-1", "math", -1)
	tel.AddDispatched(ctx, "math-1", "math", 2)
	tel.RegisterReplicaGauge(func() map[string]int64 { return map[string]int64{"math": 3, "web": 1} })
	tel.RecordCost(ctx, "gpt-4o", 0.0125)
	tel.EndRun(run, telemetry.RunResult{Outcome: "completed"})
}
