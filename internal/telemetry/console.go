package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// consoleMetricExporter writes each collection as one JSON line: the
// OTEL_METRICS_EXPORTER=console exporter, for demos and debugging.
type consoleMetricExporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

var _ sdkmetric.Exporter = (*consoleMetricExporter)(nil)

func newConsoleMetricExporter(w io.Writer) *consoleMetricExporter {
	return &consoleMetricExporter{enc: json.NewEncoder(w)}
}

func (*consoleMetricExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (*consoleMetricExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *consoleMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(rm)
}

func (*consoleMetricExporter) ForceFlush(ctx context.Context) error { return ctx.Err() }

func (*consoleMetricExporter) Shutdown(ctx context.Context) error { return ctx.Err() }
