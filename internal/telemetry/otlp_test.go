package telemetry_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

// receiver is an OTLP collector reduced to remembering what it was sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer

	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource
	metrics []string // metric names
	headers []string // api-key header of each export
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

// metricsServer adapts the receiver to MetricsService, whose Export has another type.
type metricsServer struct {
	collectormetrics.UnimplementedMetricsServiceServer
	r *receiver
}

func (m metricsServer) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, met := range sm.GetMetrics() {
				m.r.metrics = append(m.r.metrics, met.GetName())
			}
		}
	}
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

// emitRun makes a run with a model call and a tool call, and returns its trace id.
func emitRun(tel *telemetry.Telemetry) string {
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

	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		ServiceName: "ignored",
		Env: telemetrytest.Env(map[string]string{
			"OTEL_TRACES_EXPORTER":        "otlp",
			"OTEL_METRICS_EXPORTER":       "otlp",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
			"OTEL_EXPORTER_OTLP_HEADERS":  "api-key=s3cret",
			"OTEL_SERVICE_NAME":           "orchestrator",
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	traceID := emitRun(tel)
	if err := tel.Shutdown(context.Background()); err != nil {
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

func TestOTLPHTTPExport(t *testing.T) {
	rcv := &receiver{}
	var paths []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		paths = append(paths, req.URL.Path)
		mu.Unlock()
		rcv.mu.Lock()
		rcv.addSpans(&export)
		rcv.mu.Unlock()
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = io.Copy(w, bytes.NewReader(resp))
	}))
	defer srv.Close()

	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		Env: telemetrytest.Env(map[string]string{
			"OTEL_TRACES_EXPORTER":               "otlp",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_ENDPOINT":        srv.URL + "/collector",
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	traceID := emitRun(tel)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	srv.CloseClientConnections()

	if got := rcv.spansByName()["execute_tool add"]; got != traceID {
		t.Errorf("execute_tool span trace id %q, want %q", got, traceID)
	}
	mu.Lock()
	defer mu.Unlock()
	// The general endpoint is a base URL: traces go to /v1/traces under it.
	if len(paths) == 0 || paths[0] != "/collector/v1/traces" {
		t.Errorf("export paths %v, want /collector/v1/traces", paths)
	}
}
