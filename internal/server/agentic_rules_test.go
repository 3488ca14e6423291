package server

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The config's artifact and asset rules on an agentic tool take the artifact it
// captured from its sub-tools, a list element by element, like any tool's: a program's
// sink and the run's assets get each customer, named after the agentic tool.
func TestAgenticToolArtifactRules(t *testing.T) {
	archive := &decorators.ListSink{}
	script := scripted.Script{Name: "lookup", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "lookup", Turn: 1}, Reply: scriptedCall("lookup", `{}`)},
		{When: scripted.When{HasTool: "lookup"}, Reply: scripted.Reply{Text: "done"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("find_customers", `{"query":"london"}`)},
		{Reply: scripted.Reply{Text: "two customers"}},
	}}
	e := newEnv(t, envOptions{script: script, sinks: map[string]decorators.Sink{"archive": archive}, configure: func(c *config.Config) {
		c.AgenticTools = map[string]config.AgenticTool{"lookup": {Description: "Look customers up.", Tools: []string{"find_customers"}}}
		c.Tools = map[string]config.Tool{"lookup": {
			Artifacts: []config.ArtifactSink{{ArtifactFilter: config.ArtifactFilter{Type: "Customer"}, Sinks: []string{"archive"}}},
			Assets:    []config.ArtifactFilter{{Type: "crm.Customer"}},
		}}
	}})
	e.startWorker("w1", examplegroups.CRMGroup())
	ctx := testContext(t)
	var events []string
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "lookup-1", Prompt: "go", Tools: []string{"lookup"}}, func(ev *toolpb.RunResponse) {
		if a := ev.GetAssetAdded(); a != nil {
			events = append(events, a.GetAsset().GetTool()+":"+a.GetAsset().GetObject().GetJson())
		}
	}); err != nil {
		t.Fatal(err)
	}
	var sunk []string
	for _, it := range archive.Items() {
		sunk = append(sunk, it.TypeName+" "+string(it.JSON))
	}
	want := []string{
		`crm.Customer {"id":1,"name":"Ada Lovelace","city":"London","status":"active"}`,
		`crm.Customer {"id":3,"name":"Alan Turing","city":"London","status":"blocked"}`,
	}
	if !slices.Equal(sunk, want) {
		t.Errorf("the program's sink got %q, want %q", sunk, want)
	}
	r, err := e.cl.GetRun(ctx, "lookup-1")
	if err != nil {
		t.Fatal(err)
	}
	var assets []string
	for _, a := range r.GetAssets() {
		assets = append(assets, a.GetTool()+" "+a.GetObject().GetTypeName()+" "+a.GetObject().GetJson())
	}
	if len(assets) != 2 || !strings.HasPrefix(assets[0], "lookup crm.Customer ") || !strings.HasPrefix(assets[1], "lookup crm.Customer ") || len(events) != 2 {
		t.Errorf("assets %q, asset_added events %q", assets, events)
	}
}

// A subagent with an output schema returns its result object: the calling model reads
// the JSON, and the artifact, of the spec's output type, reaches the config's rules (the
// blackboard here).
func TestAgentResultObjectInARun(t *testing.T) {
	script := scripted.Script{Name: "quote", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "quote", Turn: 1}, Reply: scriptedCall("quote", `{}`)},
		{When: scripted.When{HasTool: "quote"}, Reply: scripted.Reply{Text: "outer: {{ result \"quote\" }}"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("add", `{"a":5,"b":7}`)},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "twelve"}},
		{Reply: scripted.Reply{Text: `{ "total": 12 }`}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Tools = map[string]config.Tool{"quote": {Artifacts: []config.ArtifactSink{{Sinks: []string{"blackboard"}}}}}
	}})
	e.startWorker("w1", examplegroups.Math())
	schema := `{"type":"object","properties":{"total":{"type":"integer"}},"required":["total"]}`
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{RunId: "quote-1", Prompt: "go", Tools: []string{"quote"},
		AgenticTools: []*toolpb.AgenticToolSpec{{Name: "quote", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add"},
			OutputSchemaJson: schema, OutputType: "shop.Quote"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != `outer: {"total":12}` {
		t.Errorf("final %q", final.GetText())
	}
	r, err := e.cl.GetRun(testContext(t), "quote-1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range r.GetBlackboard() {
		found = found || (b.GetTypeName() == "shop.Quote" && b.GetJson() == `{"total":12}`)
	}
	if !found {
		t.Errorf("blackboard %v: no shop.Quote result object", r.GetBlackboard())
	}

	for _, tc := range []struct {
		spec  *toolpb.AgenticToolSpec
		field string
	}{
		{&toolpb.AgenticToolSpec{Name: "q", Description: "Q.", Tools: []string{"add"}, OutputSchemaJson: schema}, "agentic_tools[0].output_schema_json"},
		{&toolpb.AgenticToolSpec{Name: "q", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add"}, OutputSchemaJson: `{"type":"string"}`}, "agentic_tools[0].output_schema_json"},
		{&toolpb.AgenticToolSpec{Name: "q", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add"}, OutputSchemaJson: strings.Repeat(" ", 64<<10+1)}, "agentic_tools[0].output_schema_json"},
		{&toolpb.AgenticToolSpec{Name: "q", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add"}, OutputType: "Quote"}, "agentic_tools[0].output_type"},
	} {
		_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"q"}, AgenticTools: []*toolpb.AgenticToolSpec{tc.spec}}, nil)
		st, _ := status.FromError(errors.Unwrap(err))
		if st == nil {
			st, _ = status.FromError(err)
		}
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", tc.field, err, tc.field)
		}
	}
}
