package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// otlpReceiver is an OTLP/gRPC trace collector that keeps every span it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	svc   map[string]string // span id (hex) → service.name
	md    metadata.MD       // the headers of the exports, merged
}

func (r *otlpReceiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		r.md = metadata.Join(r.md, md)
	}
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s)
				r.svc[hex.EncodeToString(s.GetSpanId())] = service
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) snapshot() ([]*tracepb.Span, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := map[string]string{}
	for k, v := range r.svc {
		svc[k] = v
	}
	return append([]*tracepb.Span(nil), r.spans...), svc
}

func attr(s *tracepb.Span, key string) (*commonpb.AnyValue, bool) {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue(), true
		}
	}
	return nil, false
}

// startTraceCollector serves an OTLP/gRPC trace collector for the test and points the
// OTEL_* variables of the processes the test starts at it. It returns the collector and
// its address.
func startTraceCollector(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	rcv := &otlpReceiver{svc: map[string]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, rcv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	for k, v := range map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	} {
		t.Setenv(k, v)
	}
	return rcv, lis.Addr().String()
}

// TestOneTracePerRun: with OTLP export on, the client's call, the orchestrator's Run, its
// invoke_agent, chat and execute_tool spans and the worker's execute_tool span (one span
// a side for a call to a worker) form one trace with the right parent chain and GenAI attributes; a failing tool's
// span carries error.type; a context key outside the allow-list appears in no span and no
// log line; /metrics of orchestrator and worker count the calls made.
func TestOneTracePerRun(t *testing.T) {
	rcv, collector := startTraceCollector(t)

	const hidden = "hidden-value-7f3a"
	m := startMesh(t, "telemetry.yaml", "telemetry: {context_allow_list: [tenantId]}\n")
	w := m.startWorker("math-1", "math", "--metrics-listen", "127.0.0.1:0")
	m.waitWorkers("math-1")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp, traceID := runTraced(ctx, t, m, collector, hidden)

	// Metrics, scraped before the processes stop.
	orchMetrics := scrape(t, m.orch.Proc)
	workerMetrics := scrape(t, w)
	checkCallMetrics(t, orchMetrics, workerMetrics)

	// Stop the processes: their exporters flush on the way out.
	for id, p := range m.workers {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if err := m.orch.Stop(20 * time.Second); err != nil {
		t.Errorf("orchestrator: %v", err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s := collectRunSpans(t, rcv, traceID)
	checkTraceChain(t, s)
	checkGenAISpans(t, s)
	checkTraceHides(t, m, w, s, hidden, traceID)
	m.workers = map[string]*harness.Proc{}
}

// runTraced runs the test's run from a client that traces its call with its own SDK,
// exporting to the collector; it returns the client's tracer provider and the run's trace
// id.
func runTraced(ctx context.Context, t *testing.T, m *mesh, collector, hidden string) (*sdktrace.TracerProvider, string) {
	t.Helper()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(collector), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	cl, err := client.Dial(m.orch.Addr, insecure.NewCredentials(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(propagation.TraceContext{}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	rootCtx, root := tp.Tracer("e2e").Start(ctx, "client-run")
	var runID string
	final, err := cl.RunAndWait(rootCtx, &toolpb.RunRequest{Prompt: "go", Tools: []string{"add", "divide"},
		Context: map[string]string{"tenantId": "acme", "secretish": hidden}}, func(ev *toolpb.RunResponse) { runID = ev.GetRunId() })
	root.End()
	if err != nil || final.GetText() != "done" {
		m.dump()
		t.Fatalf("run = %v, %v", final, err)
	}
	traceID := root.SpanContext().TraceID().String()
	// GetRun names the trace the run joined: the client's.
	if got, err := cl.GetRun(ctx, runID); err != nil || got.GetTraceId() != traceID {
		t.Errorf("GetRun's trace id %q, %v; want the client's %s", got.GetTraceId(), err, traceID)
	}
	return tp, traceID
}

// checkCallMetrics checks that the /metrics of orchestrator and worker count the calls
// made, and that each side exports its own calls in flight.
func checkCallMetrics(t *testing.T, orchMetrics, workerMetrics string) {
	t.Helper()
	for _, c := range []struct {
		text, name, tool, outcome string
	}{
		{orchMetrics, "toolmesh_tool_call_duration_seconds_count", "add", "ok"},
		{orchMetrics, "toolmesh_tool_call_duration_seconds_count", "divide", "error"},
		{workerMetrics, "toolmesh_tool_call_duration_seconds_count", "add", "ok"},
		{workerMetrics, "toolmesh_tool_call_duration_seconds_count", "divide", "error"},
	} {
		if v := metricValue(c.text, c.name, `gen_ai_tool_name="`+c.tool+`"`, `toolmesh_outcome="`+c.outcome+`"`); v != 1 {
			t.Errorf("%s{%s,%s} = %v, want 1", c.name, c.tool, c.outcome, v)
		}
	}
	for _, c := range []struct{ text, name, label string }{
		{orchMetrics, "toolmesh_group_replicas", `toolmesh_group="math"`},
		{orchMetrics, "toolmesh_run_duration_seconds_count", ""},
		{orchMetrics, "gen_ai_client_token_usage_count", `gen_ai_token_type="input"`},
	} {
		if v := metricValue(c.text, c.name, c.label); v < 1 {
			t.Errorf("%s{%s} = %v, want ≥ 1", c.name, c.label, v)
		}
	}
	// Each side exports its own calls in flight, so that a sum over every process counts
	// each call once.
	for _, c := range []struct {
		process, text, has, hasNot string
	}{
		{"worker", workerMetrics, "toolmesh_worker_calls_in_flight", "toolmesh_orchestrator_calls_in_flight"},
		{"orchestrator", orchMetrics, "toolmesh_orchestrator_calls_in_flight", "toolmesh_worker_calls_in_flight"},
	} {
		if !strings.Contains(c.text, c.has) || strings.Contains(c.text, c.hasNot) {
			t.Errorf("%s /metrics: want %s and no %s", c.process, c.has, c.hasNot)
		}
	}
}

// receivedSpans are the spans the collector received, the service of each and the
// spans by id.
type receivedSpans struct {
	spans []*tracepb.Span
	svc   map[string]string
	ids   map[string]*tracepb.Span
}

// byName returns the spans named name.
func (r *receivedSpans) byName(name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// parent returns the parent of s, nil if the collector did not receive it.
func (r *receivedSpans) parent(s *tracepb.Span) *tracepb.Span {
	return r.ids[hex.EncodeToString(s.GetParentSpanId())]
}

// service returns the service that exported s.
func (r *receivedSpans) service(s *tracepb.Span) string {
	return r.svc[hex.EncodeToString(s.GetSpanId())]
}

// collectRunSpans waits up to ten seconds for both divide spans to reach rcv, then checks
// that every span of the run is in the client's trace traceID.
func collectRunSpans(t *testing.T, rcv *otlpReceiver, traceID string) *receivedSpans {
	t.Helper()
	r := &receivedSpans{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.spans, r.svc = rcv.snapshot()
		if len(r.byName("execute_tool divide")) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.ids = map[string]*tracepb.Span{}
	inRun := regexp.MustCompile(`^(execute_tool |chat |invoke_agent |toolmesh\.v1\.OrchestratorService/Run$|toolmesh\.v1\.ToolWorkerService/Invoke$)`)
	for _, s := range r.spans {
		if got := hex.EncodeToString(s.GetTraceId()); inRun.MatchString(s.GetName()) && got != traceID {
			t.Errorf("span %q (%s) is in trace %s, not the client's %s", s.GetName(), r.svc[hex.EncodeToString(s.GetSpanId())], got, traceID)
		}
		r.ids[hex.EncodeToString(s.GetSpanId())] = s
	}
	return r
}

// checkTraceChain checks the chain of parents from the worker's execute_tool span up to
// the client's root.
func checkTraceChain(t *testing.T, r *receivedSpans) {
	t.Helper()
	var workerAdd *tracepb.Span
	for _, s := range r.byName("execute_tool add") {
		if r.service(s) == "toolmesh-worker" {
			workerAdd = s
		}
	}
	if workerAdd == nil {
		t.Fatalf("no worker span for add; spans: %v", names(r.spans, r.svc))
	}
	want := []struct{ name, service string }{
		// One span a side for the call to the worker: the worker's execute_tool span is
		// the child of the orchestrator's.
		{"execute_tool add", "toolmesh-worker"},
		{"execute_tool add", "toolmesh-orchestrator"},
		{"invoke_agent toolmesh", "toolmesh-orchestrator"},
		{"toolmesh.v1.OrchestratorService/Run", "toolmesh-orchestrator"},
		{"toolmesh.v1.OrchestratorService/Run", "e2e"},
		{"client-run", "e2e"},
	}
	s := workerAdd
	for i, w := range want {
		if s == nil {
			t.Fatalf("the chain breaks before %d (%s in %s); spans: %v", i, w.name, w.service, names(r.spans, r.svc))
		}
		if s.GetName() != w.name || (w.service != "e2e" && r.service(s) != w.service) {
			t.Errorf("link %d: %q in %q, want %q in %q", i, s.GetName(), r.service(s), w.name, w.service)
		}
		s = r.parent(s)
	}
}

// checkGenAISpans checks the GenAI attributes of the chat spans and of the
// orchestrator's execute_tool spans, and the allow-listed context key on the latter.
func checkGenAISpans(t *testing.T, r *receivedSpans) {
	t.Helper()
	chats := 0
	for _, s := range r.spans {
		if !strings.HasPrefix(s.GetName(), "chat ") {
			continue
		}
		chats++
		for _, k := range []string{"gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons", "gen_ai.provider.name"} {
			if _, ok := attr(s, k); !ok {
				t.Errorf("chat span lacks %s", k)
			}
		}
	}
	if chats != 2 {
		t.Errorf("%d chat spans, want 2", chats)
	}
	for _, s := range append(r.byName("execute_tool add"), r.byName("execute_tool divide")...) {
		if r.service(s) != "toolmesh-orchestrator" {
			continue
		}
		for _, k := range []string{"gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type", "toolmesh.group", "toolmesh.worker.id"} {
			if _, ok := attr(s, k); !ok {
				t.Errorf("%s lacks %s", s.GetName(), k)
			}
		}
		et, failed := attr(s, "error.type")
		if strings.HasSuffix(s.GetName(), "divide") != failed {
			t.Errorf("%s: error.type = %v", s.GetName(), et)
		}
		if v, ok := attr(s, "toolmesh.context.tenantId"); !ok || v.GetStringValue() != "acme" {
			t.Errorf("%s: the allow-listed context key is missing", s.GetName())
		}
	}
}

// checkTraceHides checks that the context key outside the allow-list appears in no span
// and no log line, and that the run's log line carries its trace id.
func checkTraceHides(t *testing.T, m *mesh, w *harness.Proc, r *receivedSpans, hidden, traceID string) {
	t.Helper()
	for _, s := range r.spans {
		for _, a := range s.GetAttributes() {
			if strings.Contains(a.String(), hidden) || strings.Contains(a.GetKey(), "secretish") {
				t.Errorf("span %q carries the context key outside the allow-list: %s", s.GetName(), a.GetKey())
			}
		}
	}
	for _, p := range append([]string{m.orch.Output()}, w.Output()) {
		if strings.Contains(p, hidden) {
			t.Error("a log line carries the context value outside the allow-list")
		}
	}
	// Log lines of a run carry its ids.
	if !regexp.MustCompile(`"msg":"run started".*"trace_id":"`+traceID+`"`).MatchString(m.orch.Output()) &&
		!regexp.MustCompile(`"trace_id":"`+traceID+`".*"msg":"run started"`).MatchString(m.orch.Output()) {
		t.Error("the run's log line does not carry its trace id")
	}
}

func names(spans []*tracepb.Span, svc map[string]string) []string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s@%s", s.GetName(), svc[hex.EncodeToString(s.GetSpanId())]))
	}
	return out
}

// scrape reads the /metrics address a process logged and returns the exposition.
func scrape(t *testing.T, p *harness.Proc) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := p.WaitLog(ctx, "metrics serving")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + rec["address"].(string) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metricValue sums the samples of a metric whose labels contain every given fragment.
func metricValue(exposition, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if l != "" && !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
