package otelsetup_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/toolmesh/toolmesh/internal/logtest"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
)

// environ makes vars the only OTEL_* variables of the process for the test: FromEnv, the
// SDK and the exporters all read the process environment.
func environ(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

// testContext bounds what a test waits for: a flush, a scrape.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fromEnv is FromEnv that fails the test on an error and shuts down when it ends.
func fromEnv(t *testing.T, opts otelsetup.Options) *otelsetup.Providers {
	t.Helper()
	p, err := otelsetup.FromEnv(testContext(t), opts)
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

func TestFromEnvRejectsBadVariables(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		bad  string // the variable the error must name
	}{
		{"sdk disabled not a bool", map[string]string{"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"},
		{"unknown traces exporter", map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"},
		{"unknown metrics exporter", map[string]string{"OTEL_METRICS_EXPORTER": "statsd"}, "OTEL_METRICS_EXPORTER"},
		{"unsupported traces protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_TRACES_EXPORTER"},
		{"unsupported metrics protocol", map[string]string{"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "thrift"}, "OTEL_METRICS_EXPORTER"},
		{"resource entry without value", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=mesh,region"}, "OTEL_RESOURCE_ATTRIBUTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ(t, tt.env)
			p, err := otelsetup.FromEnv(testContext(t), otelsetup.Options{})
			if err == nil {
				_ = p.Shutdown(context.Background())
				t.Fatalf("FromEnv accepted %v", tt.env)
			}
			if !strings.Contains(err.Error(), tt.bad+"=") {
				t.Errorf("error %q does not name %s", err, tt.bad)
			}
		})
	}
}

func TestFromEnvAcceptsValidConfigurations(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"nothing set", nil},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "garbage-is-ignored"}},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"}},
		{"prometheus", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}},
		{"otlp grpc", map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret%20value",
			"OTEL_EXPORTER_OTLP_TIMEOUT": "500", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_INSECURE": "true",
		}},
		{"otlp http traces", map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example:4318/custom/traces",
		}},
		{"samplers", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}},
		{"resource", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=mesh, deployment.environment.name=prod%2Ceu", "OTEL_SERVICE_NAME": "orch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ(t, tt.env)
			p, err := otelsetup.FromEnv(testContext(t), otelsetup.Options{Console: io.Discard, Prometheus: true})
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			// Nothing was recorded, so there is nothing to fail to export.
			if err := p.Shutdown(testContext(t)); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		})
	}
}

// recordRun starts and ends one run span through toolmesh's helpers over p.
func recordRun(t *testing.T, p *otelsetup.Providers) {
	t.Helper()
	tel, err := telemetry.FromProviders(p.TracerProvider, p.MeterProvider, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r1"})
	tel.EndRun(span, telemetry.RunResult{})
}

func TestResourceServiceName(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"from options", nil, "orchestrator"},
		{"resource attributes beat options", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,team=mesh"}, "from-attrs"},
		{"service name beats resource attributes", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs", "OTEL_SERVICE_NAME": "from-name"}, "from-name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ(t, tt.env)
			spans := tracetest.NewSpanRecorder()
			p := fromEnv(t, otelsetup.Options{ServiceName: "orchestrator", ServiceVersion: "1.2.3", SpanProcessors: []sdktrace.SpanProcessor{spans}})
			recordRun(t, p)
			ended := spans.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			res := ended[0].Resource()
			for key, want := range map[attribute.Key]string{
				semconv.ServiceNameKey:          tt.want,
				semconv.ServiceVersionKey:       "1.2.3",
				semconv.TelemetrySDKLanguageKey: "go",
			} {
				if got, _ := res.Set().Value(key); got.AsString() != want {
					t.Errorf("%s = %q, want %q", key, got.AsString(), want)
				}
			}
			if res.SchemaURL() == "" {
				t.Error("the resource lost its schema URL (a conflict between detectors)")
			}
		})
	}
}

// The SDK reads OTEL_TRACES_SAMPLER itself.
func TestSampler(t *testing.T) {
	tests := []struct {
		sampler  string
		recorded bool
	}{
		{"", true}, // parentbased_always_on
		{"always_on", true},
		{"always_off", false},
		{"parentbased_always_off", false},
		{"traceidratio", true}, // ratio defaults to 1
	}
	for _, tt := range tests {
		t.Run(tt.sampler, func(t *testing.T) {
			environ(t, map[string]string{"OTEL_TRACES_SAMPLER": tt.sampler})
			spans := tracetest.NewSpanRecorder()
			recordRun(t, fromEnv(t, otelsetup.Options{SpanProcessors: []sdktrace.SpanProcessor{spans}}))
			if got := len(spans.Ended()) == 1; got != tt.recorded {
				t.Errorf("recorded = %v, want %v", got, tt.recorded)
			}
		})
	}
}

func TestSDKDisabled(t *testing.T) {
	environ(t, map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})
	var console logtest.Buffer
	spans := tracetest.NewSpanRecorder()
	p := fromEnv(t, otelsetup.Options{Prometheus: true, Console: &console, SpanProcessors: []sdktrace.SpanProcessor{spans}})
	_, span := p.TracerProvider.Tracer("test").Start(context.Background(), "op")
	if span.IsRecording() {
		t.Error("span records with the SDK disabled")
	}
	span.End()
	if err := p.Shutdown(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if n := len(spans.Ended()); n != 0 || console.String() != "" {
		t.Errorf("%d spans recorded and %q written with the SDK disabled", n, console.String())
	}
	if got := scrape(t, p.MetricsHandler()); len(got) != 0 {
		t.Errorf("/metrics has %d families with the SDK disabled, want none", len(got))
	}
}

func TestPropagatorsVariableOnlyWarns(t *testing.T) {
	for value, warns := range map[string]bool{"tracecontext,baggage": true, "b3": true, "tracecontext": false, "": false} {
		t.Run(value, func(t *testing.T) {
			environ(t, map[string]string{"OTEL_PROPAGATORS": value})
			var logs logtest.Buffer
			fromEnv(t, otelsetup.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if got := strings.Contains(logs.String(), "OTEL_PROPAGATORS ignored"); got != warns {
				t.Errorf("warned = %v, want %v; logs: %s", got, warns, logs.String())
			}
		})
	}
}

func TestConsoleExportersWriteToConsole(t *testing.T) {
	environ(t, map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"})
	var out logtest.Buffer
	p := fromEnv(t, otelsetup.Options{Console: &out})
	tel, err := telemetry.FromProviders(p.TracerProvider, p.MeterProvider, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add", Group: "math"})
	tel.EndTool(span, telemetry.ToolResult{})
	if err := p.Shutdown(testContext(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"execute_tool add"`, telemetry.MetricToolCallDuration} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not a valid exposition: %v", err)
	}
	return families
}

func TestPrometheusMetricsHandler(t *testing.T) {
	environ(t, nil)
	p := fromEnv(t, otelsetup.Options{Prometheus: true})
	tel, err := telemetry.FromProviders(p.TracerProvider, p.MeterProvider, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// Valid before anything was recorded.
	before := scrape(t, p.MetricsHandler())
	if _, ok := before["toolmesh_tool_call_duration_seconds"]; ok {
		t.Error("a tool call metric before any call")
	}

	telemetrytest.Exercise(context.Background(), tel)
	after := scrape(t, p.MetricsHandler())
	for name, typ := range map[string]dto.MetricType{
		"toolmesh_tool_call_duration_seconds":      dto.MetricType_HISTOGRAM,
		"toolmesh_worker_calls_in_flight":          dto.MetricType_GAUGE,
		"toolmesh_orchestrator_calls_in_flight":    dto.MetricType_GAUGE,
		"toolmesh_group_replicas":                  dto.MetricType_GAUGE,
		"gen_ai_client_token_usage":                dto.MetricType_HISTOGRAM,
		"gen_ai_client_operation_duration_seconds": dto.MetricType_HISTOGRAM,
		"toolmesh_model_cost_total":                dto.MetricType_COUNTER,
		"toolmesh_run_duration_seconds":            dto.MetricType_HISTOGRAM,
		"go_goroutines":                            dto.MetricType_GAUGE,
	} {
		f, ok := after[name]
		if !ok {
			t.Errorf("no metric family %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), typ)
		}
	}
	// Each side's calls in flight says what it counts in its help text.
	if help := after["toolmesh_worker_calls_in_flight"].GetHelp(); !strings.Contains(help, "this worker") {
		t.Errorf("toolmesh_worker_calls_in_flight help %q", help)
	}
	if help := after["toolmesh_orchestrator_calls_in_flight"].GetHelp(); !strings.Contains(help, "this orchestrator") {
		t.Errorf("toolmesh_orchestrator_calls_in_flight help %q", help)
	}
	// Labels are the attribute keys, escaped.
	var groups []string
	for _, m := range after["toolmesh_group_replicas"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "toolmesh_group" {
				groups = append(groups, l.GetValue())
			}
		}
	}
	if diff := cmp.Diff([]string{"math", "web"}, groups); diff != "" {
		t.Errorf("toolmesh_group_replicas groups (-want +got):\n%s", diff)
	}
}

func TestMetricsHandlerWithoutPrometheus(t *testing.T) {
	environ(t, map[string]string{"OTEL_METRICS_EXPORTER": "none"})
	var nilProviders *otelsetup.Providers
	for name, h := range map[string]http.Handler{
		"nil":            nilProviders.MetricsHandler(),
		"prometheus off": fromEnv(t, otelsetup.Options{Prometheus: true}).MetricsHandler(),
	} {
		t.Run(name, func(t *testing.T) {
			if got := scrape(t, h); len(got) != 0 {
				t.Errorf("families %v, want none", got)
			}
		})
	}
}

func TestServeMetrics(t *testing.T) {
	environ(t, map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"})
	p := fromEnv(t, otelsetup.Options{})
	recordRun(t, p)
	m, err := p.ServeMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + m.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "toolmesh_run_duration_seconds") {
		t.Errorf("GET /metrics = %d\n%s", resp.StatusCode, body)
	}
	if err := m.Shutdown(testContext(t)); err != nil {
		t.Error(err)
	}
}
