package otelsetup

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newSpanExporter builds the exporter OTEL_TRACES_EXPORTER names, or nil for none.
// console is built here, to write where the program says; everything else is
// autoexport's.
func newSpanExporter(ctx context.Context, console io.Writer) (sdktrace.SpanExporter, error) {
	const name = "OTEL_TRACES_EXPORTER"
	v := strings.TrimSpace(os.Getenv(name))
	switch v {
	case "", "none":
		return nil, nil
	case "console":
		return stdouttrace.New(stdouttrace.WithWriter(console))
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return exp, nil
}

// newMetricReader builds the reader OTEL_METRICS_EXPORTER names, or nil for none; for
// prometheus it also returns the registry MetricsHandler serves. console and prometheus
// are built here (autoexport's console writes to stdout and its prometheus serves on a
// port of its own); everything else is autoexport's.
func newMetricReader(ctx context.Context, prometheusByDefault bool, console io.Writer) (sdkmetric.Reader, *prometheus.Registry, error) {
	const name = "OTEL_METRICS_EXPORTER"
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" && prometheusByDefault {
		v = "prometheus"
	}
	switch v {
	case "", "none":
		return nil, nil, nil
	case "console":
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(console))
		if err != nil {
			return nil, nil, err
		}
		return sdkmetric.NewPeriodicReader(exp), nil, nil
	case "prometheus":
		// A registry of our own, not prometheus.DefaultRegisterer: no process-wide state,
		// and two Providers in one test binary do not collide.
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(
			otelprom.WithRegisterer(reg),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		)
		if err != nil {
			return nil, nil, fmt.Errorf("%s=%s: %w", name, v, err)
		}
		return exp, reg, nil
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return r, nil, nil
}

// countingExporter remembers the spans its exporter failed to export: the batch
// processor hands such failures to the global error handler only, and Shutdown should
// be able to say that spans were lost.
type countingExporter struct {
	sdktrace.SpanExporter

	mu     sync.Mutex
	failed int
	last   error
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.mu.Lock()
		e.failed += len(spans)
		e.last = err
		e.mu.Unlock()
	}
	return err
}

// failures says how many spans could not be exported and why, or nil.
func (e *countingExporter) failures() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.failed {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("1 span could not be exported: %w", e.last)
	}
	return fmt.Errorf("%d spans could not be exported: %w", e.failed, e.last)
}
