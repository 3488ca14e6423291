package bench

import (
	"context"
	"errors"
	"net"
	"sort"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// otlpReceiver is a minimal OTLP/gRPC collector on loopback: it accepts traces and
// metrics and counts spans per service.name, so that the report can say which processes
// of the traced hop really exported spans.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	metrics metricsSink

	grpc *grpc.Server
	addr string

	mu    sync.Mutex
	spans map[string]int64 // by service.name
}

type metricsSink struct {
	collectormetrics.UnimplementedMetricsServiceServer
}

func (metricsSink) Export(context.Context, *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

func startOTLPReceiver() (*otlpReceiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &otlpReceiver{grpc: grpc.NewServer(), addr: lis.Addr().String(), spans: map[string]int64{}}
	collectortrace.RegisterTraceServiceServer(r.grpc, r)
	collectormetrics.RegisterMetricsServiceServer(r.grpc, r.metrics)
	go func() { _ = r.grpc.Serve(lis) }()
	return r, nil
}

// endpoint is the OTEL_EXPORTER_OTLP_ENDPOINT that reaches the receiver over gRPC.
func (r *otlpReceiver) endpoint() string { return "http://" + r.addr }

// telemetry is the benchmark's own Telemetry, exporting to the receiver through
// batching OTLP/gRPC exporters as the binaries do with OTEL_EXPORTER_OTLP_PROTOCOL=grpc,
// sampler parentbased_always_on. It is built here rather than from the OTEL_* variables,
// so that the environment the benchmark runs in changes nothing; shutdown flushes it.
func (r *otlpReceiver) telemetry(ctx context.Context, service string) (*telemetry.Telemetry, func(context.Context) error, error) {
	spans, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.addr), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, nil, err
	}
	metrics, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(r.addr), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, nil, errors.Join(err, spans.Shutdown(ctx))
	}
	res := resource.NewSchemaless(semconv.ServiceName(service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithBatcher(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics)))
	shutdown := func(ctx context.Context) error { return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)) }
	tel, err := telemetry.FromProviders(tp, mp, telemetry.Options{})
	if err != nil {
		return nil, nil, errors.Join(err, shutdown(ctx))
	}
	return tel, shutdown, nil
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := "unknown"
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans[service] += int64(len(ss.GetSpans()))
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serviceSpans is the number of spans received from one service.
type serviceSpans struct {
	Service string `json:"service"`
	Spans   int64  `json:"spans"`
}

func (r *otlpReceiver) counts() []serviceSpans {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]serviceSpans, 0, len(r.spans))
	for s, n := range r.spans {
		out = append(out, serviceSpans{Service: s, Spans: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out
}

func (r *otlpReceiver) close() { r.grpc.Stop() }
