package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

func TestSetupRejectsBadVariables(t *testing.T) {
	otlpTraces := map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}
	otlpMetrics := map[string]string{"OTEL_METRICS_EXPORTER": "otlp"}
	with := func(base map[string]string, k, v string) map[string]string {
		m := map[string]string{k: v}
		for bk, bv := range base {
			m[bk] = bv
		}
		return m
	}
	tests := []struct {
		name string
		env  map[string]string
		bad  string // the variable the error must name
	}{
		{"sdk disabled not a bool", map[string]string{"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"},
		{"unknown traces exporter", map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"},
		{"none with another traces exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,none"}, "OTEL_TRACES_EXPORTER"},
		{"unknown metrics exporter", map[string]string{"OTEL_METRICS_EXPORTER": "statsd"}, "OTEL_METRICS_EXPORTER"},
		{"unsupported protocol", with(otlpTraces, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"unknown traces protocol", with(otlpTraces, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"metrics over http", with(otlpMetrics, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"), "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"},
		{"general protocol http for metrics", with(otlpMetrics, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"), "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"endpoint without scheme", with(otlpTraces, "OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"), "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"traces endpoint bad scheme", with(otlpTraces, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector"), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"metrics endpoint not a URL", with(otlpMetrics, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://[::1"), "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"},
		{"insecure not a bool", with(otlpTraces, "OTEL_EXPORTER_OTLP_INSECURE", "maybe"), "OTEL_EXPORTER_OTLP_INSECURE"},
		{"traces insecure not a bool", with(otlpTraces, "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "1"), "OTEL_EXPORTER_OTLP_TRACES_INSECURE"},
		{"header without value", with(otlpTraces, "OTEL_EXPORTER_OTLP_HEADERS", "api-key"), "OTEL_EXPORTER_OTLP_HEADERS"},
		{"metrics header bad encoding", with(otlpMetrics, "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "k=%zz"), "OTEL_EXPORTER_OTLP_METRICS_HEADERS"},
		{"timeout with unit", with(otlpTraces, "OTEL_EXPORTER_OTLP_TIMEOUT", "10s"), "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"traces timeout zero", with(otlpTraces, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0"), "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{"unknown compression", with(otlpTraces, "OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"), "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"unknown sampler", map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{"ratio above one", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"ratio not a number", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"resource entry without value", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=mesh,region"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{"resource bad encoding", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=%zz"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{"export interval zero", map[string]string{"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL"},
		{"export timeout negative", with(otlpMetrics, "OTEL_METRIC_EXPORT_TIMEOUT", "-5"), "OTEL_METRIC_EXPORT_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Options{Env: telemetrytest.Env(tt.env)})
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatalf("Setup accepted %v", tt.env)
			}
			if !errors.Is(err, telemetry.ErrInvalidEnv) {
				t.Errorf("error %v does not wrap ErrInvalidEnv", err)
			}
			var envErr *telemetry.EnvError
			if !errors.As(err, &envErr) || envErr.Var != tt.bad {
				t.Errorf("error %v: want it to name %s", err, tt.bad)
			}
			if !strings.Contains(err.Error(), tt.bad+"=") {
				t.Errorf("error message %q does not name %s", err, tt.bad)
			}
		})
	}
}

func TestSetupNamesEveryBadVariable(t *testing.T) {
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":  "zipkin",
		"OTEL_METRICS_EXPORTER": "statsd",
		"OTEL_TRACES_SAMPLER":   "sometimes",
	}
	_, err := telemetry.Setup(context.Background(), telemetry.Options{Env: telemetrytest.Env(env)})
	if err == nil {
		t.Fatal("Setup accepted three bad variables")
	}
	for name := range env {
		if !strings.Contains(err.Error(), name+"=") {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

func TestSetupAcceptsValidConfigurations(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"nothing set", nil},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "garbage-is-ignored"}},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console,prometheus"}},
		{"otlp grpc", map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret%20value",
			"OTEL_EXPORTER_OTLP_TIMEOUT": "500", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_INSECURE": "true",
			"OTEL_METRIC_EXPORT_INTERVAL": "1000",
		}},
		{"otlp http traces", map[string]string{
			"OTEL_TRACES_EXPORTER": "OTLP", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example:4318/custom/traces",
		}},
		{"bad otlp variables are ignored when otlp is off", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "nonsense", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}},
		{"samplers", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}},
		{"resource", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=mesh, deployment.environment.name=prod%2Ceu", "OTEL_SERVICE_NAME": "orch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Options{Env: telemetrytest.Env(tt.env), Console: &bytes.Buffer{}})
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			// The OTLP metrics reader exports once more on shutdown, to a port where no
			// one listens: only the configurations without it must shut down cleanly.
			if err := tel.Shutdown(context.Background()); err != nil && tt.env["OTEL_METRICS_EXPORTER"] != "otlp" {
				t.Fatalf("Shutdown: %v", err)
			}
		})
	}
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
			rec := telemetrytest.New(t, telemetry.Options{ServiceName: "orchestrator", ServiceVersion: "1.2.3", Env: telemetrytest.Env(tt.env)})
			_, span := rec.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r1"})
			rec.EndRun(span, telemetry.RunResult{})
			res := rec.Span(t, "invoke_agent toolmesh").Resource()
			if got, _ := res.Set().Value(semconv.ServiceNameKey); got.AsString() != tt.want {
				t.Errorf("service.name = %q, want %q", got.AsString(), tt.want)
			}
			if got, _ := res.Set().Value(semconv.ServiceVersionKey); got.AsString() != "1.2.3" {
				t.Errorf("service.version = %q, want 1.2.3", got.AsString())
			}
			if res.SchemaURL() != semconv.SchemaURL {
				t.Errorf("schema URL = %q", res.SchemaURL())
			}
		})
	}
}

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
			rec := telemetrytest.New(t, telemetry.Options{Env: telemetrytest.Env(map[string]string{"OTEL_TRACES_SAMPLER": tt.sampler})})
			_, span := rec.StartRun(context.Background(), telemetry.RunAttrs{})
			rec.EndRun(span, telemetry.RunResult{})
			if got := len(rec.Ended()) == 1; got != tt.recorded {
				t.Errorf("recorded = %v, want %v", got, tt.recorded)
			}
		})
	}
}

func TestSDKDisabled(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{Prometheus: true, Env: telemetrytest.Env(map[string]string{"OTEL_SDK_DISABLED": "true"})})
	ctx, span := rec.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r1"})
	if span.IsRecording() {
		t.Error("span records with the SDK disabled")
	}
	rec.EndRun(span, telemetry.RunResult{})
	rec.RecordToolCall(ctx, "add", "math", "ok", 1)
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded with the SDK disabled", n)
	}
	srv := httptest.NewServer(rec.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics status %d with the SDK disabled", resp.StatusCode)
	}
}

func TestPropagatorsVariableOnlyWarns(t *testing.T) {
	var logs bytes.Buffer
	rec := telemetrytest.New(t, telemetry.Options{
		Env:    telemetrytest.Env(map[string]string{"OTEL_PROPAGATORS": "tracecontext,baggage"}),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if !strings.Contains(logs.String(), "OTEL_PROPAGATORS") {
		t.Errorf("no warning about OTEL_PROPAGATORS; logs: %s", logs.String())
	}
	if got := rec.Propagator().Fields(); !slices.Equal(got, []string{"traceparent", "tracestate"}) {
		t.Errorf("propagator fields = %v, want traceparent and tracestate only", got)
	}
}

func TestConsoleExporters(t *testing.T) {
	var out syncBuffer
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		Env:     telemetrytest.Env(map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"}),
		Console: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add", Group: "math"})
	tel.EndTool(span, telemetry.ToolResult{})
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"execute_tool add"`, telemetry.MetricToolCallDuration} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}
