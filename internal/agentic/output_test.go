package agentic

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

const quoteSchema = `{"type":"object","properties":{"total":{"type":"integer"}},"required":["total"],"additionalProperties":false}`

// An agent with an output schema returns its result object: the nested loop's answer,
// corrected once when it does not satisfy the schema, as canonical JSON, both as the
// text the calling model reads and as an artifact of its output type (default: its
// name).
func TestAgentReturnsItsResultObject(t *testing.T) {
	for _, tc := range []struct{ outputType, wantType string }{{"", "quote"}, {"shop.Quote", "shop.Quote"}} {
		t.Run(tc.wantType, func(t *testing.T) {
			cat := &catalog{}
			cat.add("price", tool.ArtifactResult("priced", tool.Artifact{TypeName: "Price", JSON: []byte(`{"p":1}`)}))
			n := newNester(t,
				turn(1, call("price")),
				turn(2, scripted.Reply{Text: "It costs 12."}),
				scripted.Rule{Reply: scripted.Reply{Text: "```json\n{ \"total\": 12 }\n```"}})
			ts, err := Compile([]Spec{{Key: "agentic_tools[0]", Name: "quote", Kind: KindAgent, Tools: []string{"price"},
				OutputSchema: quoteSchema, OutputType: tc.outputType}}, []string{"quote"}, cat)
			if err != nil {
				t.Fatal(err)
			}
			res, err := ts[0].Call(WithNester(ctxT(t), n), `{}`)
			if err != nil {
				t.Fatal(err)
			}
			if res.Kind != tool.KindArtifact || res.Content != `{"total":12}` || res.Artifact.TypeName != tc.wantType || string(res.Artifact.JSON) != `{"total":12}` {
				t.Errorf("result %+v %+v", res, res.Artifact)
			}
			if n.runs[0].OutputSchema == nil {
				t.Error("the nested loop got no output schema")
			}
		})
	}
}

// An answer that does not satisfy the schema after the corrective turn fails the call:
// the calling model reads why.
func TestAgentResultObjectRefused(t *testing.T) {
	cat := &catalog{}
	cat.add("price", tool.Text("12"))
	n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: `{"total":"twelve"}`}})
	ts, err := Compile([]Spec{{Key: "k", Name: "quote", Kind: KindAgent, Tools: []string{"price"}, OutputSchema: quoteSchema}}, []string{"quote"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ts[0].Call(WithNester(ctxT(t), n), `{}`)
	if err != nil || !res.IsError() || !strings.HasPrefix(res.Content, "the final answer does not satisfy the output schema: ") {
		t.Errorf("result %+v, %v", res, err)
	}
}

// Output schemas that are wrong are refused, naming the field.
func TestOutputSchemaRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string
	}{
		{"not an agent", Spec{Kind: KindSimple, OutputSchema: quoteSchema}, "k.output_schema_json"},
		{"not JSON", Spec{Kind: KindAgent, OutputSchema: `{`}, "k.output_schema_json"},
		{"not an object", Spec{Kind: KindAgent, OutputSchema: `{"type":"array"}`}, "k.output_schema_json"},
		{"no type", Spec{Kind: KindAgent, OutputSchema: `{}`}, "k.output_schema_json"},
		{"bad schema", Spec{Kind: KindAgent, OutputSchema: `{"type":"object","properties":{"a":{"type":"objekt"}}}`}, "k.output_schema_json"},
		{"over the bound", Spec{Kind: KindAgent, OutputSchema: `{"type":"object","description":"` + strings.Repeat("x", MaxOutputSchemaBytes) + `"}`}, "k.output_schema_json"},
		{"a type without a schema", Spec{Kind: KindAgent, OutputType: "Quote"}, "k.output_type"},
		{"a type too long", Spec{Kind: KindAgent, OutputSchema: quoteSchema, OutputType: strings.Repeat("T", 257)}, "k.output_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.Key, s.Name, s.Description, s.Tools, s.OutputSchemaField = "k", "a", "A.", []string{"x"}, "output_schema_json"
			var fe *FieldError
			if err := Check(s); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("got %v, want an error naming %s", err, tc.field)
			}
		})
	}
	if err := Check(Spec{Key: "agentic_tools.q", Name: "q", Kind: KindAgent, Tools: []string{"x"}, OutputSchema: `{"type":"array"}`}); err == nil ||
		!strings.HasPrefix(err.Error(), "agentic_tools.q.output_schema: ") {
		t.Errorf("config key: %v", err)
	}
}
