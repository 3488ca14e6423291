package process_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A tool's usage report counts as an embedding invocation of its process and of the
// processes above it, names the model, and never joins the blackboard.
func TestEmbeddingUsageReports(t *testing.T) {
	var outputs []process.Output
	parent := process.New("run", process.Limits{}, process.Bounds{MaxEntries: 1}, func(o process.Output) error { outputs = append(outputs, o); return nil })
	sub := parent.Spawn("sub", "helper", nil)
	report := func(provider, model string) tool.Entry {
		return entry(t, process.EmbeddingUsageType, `{"provider":"`+provider+`","model":"`+model+`","inputs":3}`)
	}
	if err := parent.Add(process.Origin{Tool: "embed"}, "", report("openai", "text-embedding-3-small")); err != nil {
		t.Fatal(err)
	}
	if err := parent.Board(process.Origin{Tool: "embed"}).Add(report("openai", "text-embedding-3-small")); err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(process.Origin{Tool: "embed"}, "named", report("cohere", "embed-english-v3.0")); err != nil {
		t.Fatal(err)
	}
	p, c := parent.Snapshot(), sub.Snapshot()
	if p.Usage.EmbeddingCalls != 3 || c.Usage.EmbeddingCalls != 1 {
		t.Errorf("embedding calls: parent %d, child %d; want 3 and 1", p.Usage.EmbeddingCalls, c.Usage.EmbeddingCalls)
	}
	if len(p.Blackboard.Entries) != 0 || len(c.Blackboard.Entries) != 0 || len(outputs) != 0 {
		t.Errorf("a usage report joined a blackboard: parent %v, child %v, outputs %v", p.Blackboard, c.Blackboard, outputs)
	}
	wantCost := "Cost and Usage:\n\nTotal cost: $0.000000\nLLM invocations: 0\nEmbedding invocations: 3\n\n" +
		"Tokens used:\n  Prompt tokens: 0\n  Completion tokens: 0\n  Total tokens: 0"
	if got := call(t, process.NewContext(context.Background(), parent), child(t, process.AgentProcessTools(), "process_cost"), "{}").Content; got != wantCost {
		t.Errorf("process_cost:\n%s\nwant:\n%s", got, wantCost)
	}
	wantModels := "Models used (2):\n\n- text-embedding-3-small (openai)\n- embed-english-v3.0 (cohere)"
	if got := call(t, process.NewContext(context.Background(), parent), child(t, process.AgentProcessTools(), "process_models"), "{}").Content; got != wantModels {
		t.Errorf("process_models:\n%s\nwant:\n%s", got, wantModels)
	}

	// A report takes no room on the blackboard: one fits a full blackboard.
	if err := parent.Add(process.Origin{}, "", entry(t, "Note", `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := parent.CanAdd([]tool.Binding{{Entry: report("openai", "m")}}); err != nil {
		t.Errorf("CanAdd of a report on a full blackboard: %v", err)
	}
	// An object of another type with the same simple name is an object like any other.
	if err := parent.Add(process.Origin{}, "", entry(t, "billing.EmbeddingUsage", `{"provider":"a","model":"b"}`)); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("billing.EmbeddingUsage was not taken for an object: %v", err)
	}
}

// A report that does not say which model it used is refused, counted nowhere.
func TestEmbeddingUsageReportRefused(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	for _, js := range []string{
		`{"model":"text-embedding-3-small"}`,
		`{"provider":"openai"}`,
		`{"provider":"openai","model":" "}`,
		`{"provider":1,"model":"m"}`,
		`{"provider":"openai","model":"` + strings.Repeat("m", process.MaxTypeNameBytes+1) + `"}`,
		`["openai","m"]`,
		`null`,
		`"openai/m"`,
	} {
		e := entry(t, process.EmbeddingUsageType, js)
		if err := p.Add(process.Origin{}, "", e); err == nil || !strings.Contains(err.Error(), `usage report of type "toolmesh.EmbeddingUsage"`) {
			t.Errorf("Add %s = %v, want a refusal", js, err)
		}
		if err := p.CanAdd([]tool.Binding{{Entry: e}}); err == nil {
			t.Errorf("CanAdd %s accepted it", js)
		}
	}
	if st := p.Snapshot(); st.Usage.EmbeddingCalls != 0 || len(st.Models) != 0 || len(st.Blackboard.Entries) != 0 {
		t.Errorf("refused reports left %+v", st)
	}
}
