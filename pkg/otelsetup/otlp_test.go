package otelsetup_test

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
)

// receiver is an OTLP collector reduced to remembering what it was sent, over gRPC
// (Export, and metricsServer for the metrics service) or HTTP (ServeHTTP).
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer

	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource
	metrics []string // metric names
	headers []string // api-key header of each export
	paths   []string // URL path of each HTTP export
}

func (r *receiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addSpans(req)
	r.headers = append(r.headers, md.Get("api-key")...)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *receiver) addSpans(req *collectortrace.ExportTraceServiceRequest) {
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				r.service = append(r.service, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
}

func (r *receiver) addMetrics(req *collectormetrics.ExportMetricsServiceRequest) {
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, met := range sm.GetMetrics() {
				r.metrics = append(r.metrics, met.GetName())
			}
		}
	}
}

// ServeHTTP is the OTLP/HTTP side: binary protobuf at <base>/v1/traces and
// <base>/v1/metrics.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, req.URL.Path)
	var resp proto.Message
	switch {
	case strings.HasSuffix(req.URL.Path, "/v1/traces"):
		var export collectortrace.ExportTraceServiceRequest
		err, resp = proto.Unmarshal(body, &export), &collectortrace.ExportTraceServiceResponse{}
		r.addSpans(&export)
	case strings.HasSuffix(req.URL.Path, "/v1/metrics"):
		var export collectormetrics.ExportMetricsServiceRequest
		err, resp = proto.Unmarshal(body, &export), &collectormetrics.ExportMetricsServiceResponse{}
		r.addMetrics(&export)
	default:
		http.NotFound(w, req)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// metricsServer adapts the receiver to MetricsService, whose Export has another type.
type metricsServer struct {
	collectormetrics.UnimplementedMetricsServiceServer
	r *receiver
}

func (m metricsServer) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.addMetrics(req)
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

// spansByName returns name → trace id (hex) of the spans received.
func (r *receiver) spansByName() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for _, s := range r.spans {
		out[s.GetName()] = hex.EncodeToString(s.GetTraceId())
	}
	return out
}

// emitRun makes a run with a model call and a tool call through toolmesh's own helpers
// over p, and returns its trace id.
func emitRun(t *testing.T, p *otelsetup.Providers) string {
	t.Helper()
	tel, err := telemetry.FromProviders(p.TracerProvider, p.MeterProvider, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, run := tel.StartRun(context.Background(), telemetry.RunAttrs{RunID: "run-1"})
	_, chat := tel.StartChat(ctx, "openai", "gpt-4o")
	tel.EndChat(chat, telemetry.ChatResult{InputTokens: 10, OutputTokens: 2})
	_, tool := tel.StartTool(ctx, telemetry.ToolAttrs{Name: "add", Group: "math"})
	tel.EndTool(tool, telemetry.ToolResult{WorkerID: "w1", Attempts: 1})
	tel.EndRun(run, telemetry.RunResult{})
	return run.SpanContext().TraceID().String()
}

func TestOTLPGRPCExport(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, rcv)
	collectormetrics.RegisterMetricsServiceServer(srv, metricsServer{r: rcv})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()

	environ(t, map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_HEADERS":  "api-key=s3cret",
		"OTEL_SERVICE_NAME":           "orchestrator",
	})
	p := fromEnv(t, otelsetup.Options{ServiceName: "ignored"})
	traceID := emitRun(t, p)
	if err := p.Shutdown(testContext(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	got := rcv.spansByName()
	for _, name := range []string{"invoke_agent toolmesh", "chat gpt-4o", "execute_tool add"} {
		if got[name] != traceID {
			t.Errorf("span %q: trace id %q, want %q (received %v)", name, got[name], traceID, got)
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.service) == 0 || rcv.service[0] != "orchestrator" {
		t.Errorf("service.name = %v, want orchestrator", rcv.service)
	}
	if !slices.Contains(rcv.headers, "s3cret") {
		t.Errorf("api-key header = %v, want s3cret", rcv.headers)
	}
	for _, name := range []string{telemetry.MetricToolCallDuration, telemetry.MetricTokenUsage, telemetry.MetricRunDuration} {
		if !slices.Contains(rcv.metrics, name) {
			t.Errorf("metric %s not exported; got %v", name, rcv.metrics)
		}
	}
}

// Without OTEL_EXPORTER_OTLP_PROTOCOL the OTLP exporters speak http/protobuf, the
// specification's default, and the general endpoint is a base URL under which each
// signal has its path.
func TestOTLPHTTPExportByDefault(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()

	environ(t, map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL + "/collector",
	})
	p := fromEnv(t, otelsetup.Options{ServiceName: "toolworker"})
	traceID := emitRun(t, p)
	if err := p.Shutdown(testContext(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	srv.CloseClientConnections()

	if got := rcv.spansByName()["execute_tool add"]; got != traceID {
		t.Errorf("execute_tool span trace id %q, want %q", got, traceID)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, want := range []string{"/collector/v1/traces", "/collector/v1/metrics"} {
		if !slices.Contains(rcv.paths, want) {
			t.Errorf("export paths %v, want %s among them", rcv.paths, want)
		}
	}
	if len(rcv.service) == 0 || rcv.service[0] != "toolworker" {
		t.Errorf("service.name = %v, want toolworker (from Options)", rcv.service)
	}
	if !slices.Contains(rcv.metrics, telemetry.MetricToolCallDuration) {
		t.Errorf("metric %s not exported; got %v", telemetry.MetricToolCallDuration, rcv.metrics)
	}
}

// A collector that refuses the spans: the batch processor only hands the failure to the
// global error handler, so Shutdown is what tells the program.
func TestShutdownReportsSpansNotExported(t *testing.T) {
	refused := 0
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		refused++
		mu.Unlock()
		http.Error(w, "no thanks", http.StatusBadRequest) // not retryable
	}))
	defer srv.Close()
	environ(t, map[string]string{
		"OTEL_TRACES_EXPORTER":               "otlp",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/v1/traces",
	})
	p := fromEnv(t, otelsetup.Options{})
	emitRun(t, p)
	err := p.Shutdown(testContext(t))
	if err == nil || !strings.Contains(err.Error(), "3 spans could not be exported") {
		t.Errorf("Shutdown = %v, want it to say that the run's 3 spans could not be exported", err)
	}
	if again := p.Shutdown(testContext(t)); again != err {
		t.Errorf("second Shutdown = %v, want the first one's result %v", again, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused == 0 {
		t.Error("the collector was never asked")
	}
}
