package telemetry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

func TestMetricsRecorded(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx := context.Background()
	telemetrytest.Exercise(ctx, rec.Telemetry)

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

	// The worker's and the orchestrator's calls in flight are separate instruments, each
	// with its own description.
	descriptions := map[string]string{}
	for name, want := range map[string]int64{telemetry.MetricInFlight: 1, telemetry.MetricDispatched: 2} {
		m := rec.Metric(t, name)
		if m.Unit != "{call}" {
			t.Errorf("%s unit %q", name, m.Unit)
		}
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || sum.IsMonotonic || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != want {
			t.Errorf("%s = %+v, want one non-monotonic point at %d", name, m.Data, want)
		}
		descriptions[name] = m.Description
	}
	if d := descriptions[telemetry.MetricInFlight]; !strings.Contains(d, "this worker is running") {
		t.Errorf("%s description %q does not say it counts the worker's own calls", telemetry.MetricInFlight, d)
	}
	if d := descriptions[telemetry.MetricDispatched]; !strings.Contains(d, "this orchestrator has sent to a worker") {
		t.Errorf("%s description %q does not say it counts the orchestrator's calls", telemetry.MetricDispatched, d)
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

// TestMetricLabelsAreBounded: model names come from clients, so a stream of made-up ones
// must not add a series each; past the bound they share one. A model the configuration
// names keeps its own.
func TestMetricLabelsAreBounded(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{KnownModels: []string{"gpt-4o"}})
	ctx := context.Background()
	for i := range 5000 {
		name := fmt.Sprintf("made-up-%d", i)
		rec.RecordTokens(ctx, "openai", name, 1, 1)
		rec.RecordCost(ctx, name, 0.01)
	}
	series := func(name string) (n int, other bool) {
		m := rec.Metric(t, name)
		var sets []attribute.Set
		switch d := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Sum[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		default:
			t.Fatalf("%s: data %T", name, m.Data)
		}
		for _, s := range sets {
			for _, kv := range s.ToSlice() {
				other = other || kv.Value.AsString() == telemetry.OtherValue
			}
		}
		return len(sets), other
	}
	for _, c := range []struct {
		metric string
		max    int
	}{
		{telemetry.MetricTokenUsage, 2 * 129}, // input and output, 128 models and _OTHER
		{telemetry.MetricCost, 129},
	} {
		n, other := series(c.metric)
		if n > c.max || !other {
			t.Errorf("%s has %d series (want at most %d) and _OTHER %v (want true)", c.metric, n, c.max, other)
		}
	}

	// A model the orchestrator is configured with keeps its name after the flood.
	rec.RecordCost(ctx, "gpt-4o", 1)
	found := false
	for _, p := range rec.Metric(t, telemetry.MetricCost).Data.(metricdata.Sum[float64]).DataPoints {
		v, _ := p.Attributes.Value(telemetry.KeyRequestModel)
		found = found || v.AsString() == "gpt-4o"
	}
	if !found {
		t.Error("the known model gpt-4o was recorded as _OTHER after the flood")
	}

	// ... and so does the dated version that answers for it.
	_, span := rec.StartChat(ctx, "openai", "gpt-4o")
	rec.EndChat(span, telemetry.ChatResult{ResponseModel: "gpt-4o-2024-08-06"})
	found = false
	for _, p := range rec.Metric(t, telemetry.MetricOperationDuration).Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := p.Attributes.Value(telemetry.KeyResponseModel)
		found = found || v.AsString() == "gpt-4o-2024-08-06"
	}
	if !found {
		t.Error("the model that answered for gpt-4o was recorded as _OTHER after the flood")
	}
}
