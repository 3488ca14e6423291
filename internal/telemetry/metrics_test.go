package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

func TestMetricsRecorded(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx := context.Background()
	exerciseMetrics(ctx, rec.Telemetry)

	// A histogram's data points, as attribute set → count.
	counts := func(name string) map[string]uint64 {
		m := rec.Metric(t, name)
		out := map[string]uint64{}
		switch d := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Count
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				out[p.Attributes.Encoded(attribute.DefaultEncoder())] = uint64(p.Sum)
			}
		default:
			t.Fatalf("%s: data %T, want a histogram", name, m.Data)
		}
		return out
	}
	if diff := cmp.Diff(map[string]uint64{
		"gen_ai.tool.name=add,toolmesh.group=math,toolmesh.outcome=ok":    1,
		"gen_ai.tool.name=add,toolmesh.group=math,toolmesh.outcome=error": 1,
		"gen_ai.tool.name=fetch,toolmesh.outcome=ok":                      1,
	}, counts(telemetry.MetricToolCallDuration)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", telemetry.MetricToolCallDuration, diff)
	}
	// For token usage the value compared is the sum of tokens.
	if diff := cmp.Diff(map[string]uint64{
		"gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o,gen_ai.token.type=input":  100 + 7,
		"gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o,gen_ai.token.type=output": 20 + 3,
	}, counts(telemetry.MetricTokenUsage)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", telemetry.MetricTokenUsage, diff)
	}
	if diff := cmp.Diff(map[string]uint64{
		"gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o,gen_ai.response.model=gpt-4o-2024": 1,
		"error.type=_OTHER,gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o":                 1,
	}, counts(telemetry.MetricOperationDuration)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", telemetry.MetricOperationDuration, diff)
	}
	if diff := cmp.Diff(map[string]uint64{"toolmesh.outcome=completed": 1}, counts(telemetry.MetricRunDuration)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", telemetry.MetricRunDuration, diff)
	}

	inFlight := rec.Metric(t, telemetry.MetricInFlight)
	if inFlight.Unit != "{call}" {
		t.Errorf("in-flight unit %q", inFlight.Unit)
	}
	sum, ok := inFlight.Data.(metricdata.Sum[int64])
	if !ok || sum.IsMonotonic || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 {
		t.Errorf("in-flight = %+v, want one non-monotonic point at 1", inFlight.Data)
	}

	replicas := map[string]int64{}
	for _, p := range rec.Metric(t, telemetry.MetricReplicas).Data.(metricdata.Gauge[int64]).DataPoints {
		g, _ := p.Attributes.Value(telemetry.KeyGroup)
		replicas[g.AsString()] = p.Value
	}
	if diff := cmp.Diff(map[string]int64{"math": 3, "web": 1}, replicas); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}

	cost := rec.Metric(t, telemetry.MetricCost).Data.(metricdata.Sum[float64])
	if len(cost.DataPoints) != 1 || cost.DataPoints[0].Value != 0.0125 {
		t.Errorf("cost = %+v", cost.DataPoints)
	}

	for name, unit := range map[string]string{
		telemetry.MetricToolCallDuration:  "s",
		telemetry.MetricTokenUsage:        "{token}",
		telemetry.MetricOperationDuration: "s",
		telemetry.MetricRunDuration:       "s",
		telemetry.MetricReplicas:          "{replica}",
		telemetry.MetricCost:              "{USD}",
	} {
		if got := rec.Metric(t, name).Unit; got != unit {
			t.Errorf("%s unit %q, want %q", name, got, unit)
		}
	}
}

// exerciseMetrics records something in every toolmesh instrument.
func exerciseMetrics(ctx context.Context, tel *telemetry.Telemetry) {
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
	tel.RegisterReplicaGauge(func() map[string]int64 { return map[string]int64{"math": 3, "web": 1} })
	tel.RecordCost(ctx, "gpt-4o", 0.0125)
	tel.EndRun(run, telemetry.RunResult{Outcome: "completed"})
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
	rec := telemetrytest.New(t, telemetry.Options{Prometheus: true})

	// Valid before anything was recorded.
	before := scrape(t, rec.MetricsHandler())
	if _, ok := before["toolmesh_tool_call_duration_seconds"]; ok {
		t.Error("a tool call metric before any call")
	}

	exerciseMetrics(context.Background(), rec.Telemetry)
	after := scrape(t, rec.MetricsHandler())
	for name, typ := range map[string]dto.MetricType{
		"toolmesh_tool_call_duration_seconds":      dto.MetricType_HISTOGRAM,
		"toolmesh_worker_calls_in_flight":          dto.MetricType_GAUGE,
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
	var nilTel *telemetry.Telemetry
	for name, h := range map[string]http.Handler{
		"nil":            nilTel.MetricsHandler(),
		"prometheus off": telemetrytest.New(t, telemetry.Options{}).MetricsHandler(),
	} {
		t.Run(name, func(t *testing.T) {
			if got := scrape(t, h); len(got) != 0 {
				t.Errorf("families %v, want none", got)
			}
		})
	}
}
