package telemetry

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newSpanExporter builds the exporter one OTEL_TRACES_EXPORTER entry names. The options
// built from the environment are passed explicitly, so that an injected Options.Env is
// what counts; they equal what the exporters would read from os.Getenv themselves.
func newSpanExporter(ctx context.Context, name string, o otlpEnv, console io.Writer) (sdktrace.SpanExporter, error) {
	switch name {
	case "console":
		return stdouttrace.New(stdouttrace.WithWriter(console))
	case "otlp":
		if o.protocol == ProtocolHTTPProtobuf {
			var opts []otlptracehttp.Option
			if o.endpoint != "" {
				opts = append(opts, otlptracehttp.WithEndpointURL(o.endpoint))
			}
			if o.insecure {
				opts = append(opts, otlptracehttp.WithInsecure())
			}
			if o.headers != nil {
				opts = append(opts, otlptracehttp.WithHeaders(o.headers))
			}
			if o.timeout > 0 {
				opts = append(opts, otlptracehttp.WithTimeout(o.timeout))
			}
			switch o.compression {
			case "gzip":
				opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
			case "none":
				opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
			}
			return otlptracehttp.New(ctx, opts...)
		}
		var opts []otlptracegrpc.Option
		if o.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(o.endpoint))
		}
		if o.insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if o.headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(o.headers))
		}
		if o.timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(o.timeout))
		}
		if o.compression == "gzip" {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown traces exporter %q", name)
}

// newMetricReader builds the reader one OTEL_METRICS_EXPORTER entry names; for
// prometheus it also returns the registry MetricsHandler serves.
func newMetricReader(ctx context.Context, name string, cfg envConfig, console io.Writer) (sdkmetric.Reader, *prometheus.Registry, error) {
	var periodic []sdkmetric.PeriodicReaderOption
	if cfg.metricInterval > 0 {
		periodic = append(periodic, sdkmetric.WithInterval(cfg.metricInterval))
	}
	if cfg.metricTimeout > 0 {
		periodic = append(periodic, sdkmetric.WithTimeout(cfg.metricTimeout))
	}
	switch name {
	case "prometheus":
		// A registry of our own, not prometheus.DefaultRegisterer: no process-wide state,
		// and two Telemetry values in one test binary do not collide.
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(
			otelprom.WithRegisterer(reg),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		)
		if err != nil {
			return nil, nil, err
		}
		return exp, reg, nil
	case "console":
		return sdkmetric.NewPeriodicReader(newConsoleMetricExporter(console), periodic...), nil, nil
	case "otlp":
		o := cfg.metricOTLP
		var opts []otlpmetricgrpc.Option
		if o.endpoint != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(o.endpoint))
		}
		if o.insecure {
			opts = append(opts, otlpmetricgrpc.WithInsecure())
		}
		if o.headers != nil {
			opts = append(opts, otlpmetricgrpc.WithHeaders(o.headers))
		}
		if o.timeout > 0 {
			opts = append(opts, otlpmetricgrpc.WithTimeout(o.timeout))
		}
		if o.compression == "gzip" {
			opts = append(opts, otlpmetricgrpc.WithCompressor("gzip"))
		}
		exp, err := otlpmetricgrpc.New(ctx, opts...)
		if err != nil {
			return nil, nil, err
		}
		return sdkmetric.NewPeriodicReader(exp, periodic...), nil, nil
	}
	return nil, nil, fmt.Errorf("unknown metrics exporter %q", name)
}
