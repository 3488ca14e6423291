package wire

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// overTheWire marshals and unmarshals a message, as a gRPC hop does.
func overTheWire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

var schemaEqual = cmp.Comparer(func(a, b schema.Schema) bool { return a.Equal(b) })

func mustSchema(t *testing.T, s string) schema.Schema {
	t.Helper()
	schema, err := schema.FromJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return schema
}

func TestDefinitionRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		def  tool.Definition
		meta tool.Metadata
	}{
		{"empty schema", tool.Definition{Name: "now", Description: "Current time."}, tool.Metadata{}},
		{"parameters", tool.Definition{Name: "add", Description: "Adds.", InputSchema: schema.Params(schema.Integer("a", "first"), schema.Integer("b", "second").AsOptional())}, tool.Metadata{}},
		{"hand-written schema keeps key order", tool.Definition{Name: "find", InputSchema: mustSchema(t, `{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer","minimum":1}},"required":["z"]}`)}, tool.Metadata{}},
		{"metadata and flags", tool.Definition{Name: "charge", Description: "Charges.", Metadata: map[string]string{"owner": "billing", "tier": "1"}},
			tool.Metadata{ReturnDirect: true, Idempotent: true, Timeout: 1500 * time.Millisecond}},
		{"unicode", tool.Definition{Name: "greet", Description: "Grüße — 你好 \U0001F600"}, tool.Metadata{}},
		{"once per loop", tool.Definition{Name: "skill"}, tool.Metadata{OncePerLoop: true, OnceAdvice: "Use the body you have."}},
		{"once per loop without advice", tool.Definition{Name: "skill"}, tool.Metadata{OncePerLoop: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := overTheWire(t, DefinitionToProto(tc.def, tc.meta))
			def, meta, err := DefinitionFromProto(p)
			if err != nil {
				t.Fatalf("DefinitionFromProto: %v", err)
			}
			if diff := cmp.Diff(tc.def, def, schemaEqual, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("definition (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.meta, meta); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			if Hash(def, meta) != Hash(tc.def, tc.meta) {
				t.Error("the content hash changed across the wire")
			}
			if tc.meta.OncePerLoop && Hash(def, meta) == Hash(def, tool.Metadata{}) {
				t.Error("once per loop does not change the content hash")
			}
		})
	}
}

func TestDefinitionToProto(t *testing.T) {
	def := tool.Definition{Name: "charge", Description: "Charges.", Metadata: map[string]string{"k": "v"}}
	got := DefinitionToProto(def, tool.Metadata{Idempotent: true, Timeout: 2 * time.Second})
	want := &toolpb.ToolDefinition{
		Name: "charge", Description: "Charges.", InputSchemaJson: `{"type":"object","properties":{}}`,
		Metadata: map[string]string{"k": "v"}, Idempotent: true, Timeout: durationpb.New(2 * time.Second),
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	def.Metadata["k"] = "changed"
	if got.GetMetadata()["k"] != "v" {
		t.Error("the proto shares the definition's metadata map")
	}
	if p := DefinitionToProto(tool.Definition{Name: "x"}, tool.Metadata{}); p.Timeout != nil || p.Metadata != nil {
		t.Errorf("zero timeout and metadata should be absent: %v", p)
	}
}

func TestDefinitionFromProtoErrors(t *testing.T) {
	tests := []struct {
		name string
		p    *toolpb.ToolDefinition
		want string
	}{
		{"nil", nil, "definition missing"},
		{"empty schema", &toolpb.ToolDefinition{Name: "x"}, "input schema"},
		{"schema not JSON", &toolpb.ToolDefinition{Name: "x", InputSchemaJson: "{"}, "input schema"},
		{"schema not an object", &toolpb.ToolDefinition{Name: "x", InputSchemaJson: `{"type":"array"}`}, "input schema"},
		{"negative timeout", &toolpb.ToolDefinition{Name: "x", InputSchemaJson: `{"type":"object"}`, Timeout: durationpb.New(-time.Second)}, "timeout"},
		{"malformed timeout", &toolpb.ToolDefinition{Name: "x", InputSchemaJson: `{"type":"object"}`, Timeout: &durationpb.Duration{Seconds: 1, Nanos: 2e9}}, "timeout"},
		{"timeout out of range", &toolpb.ToolDefinition{Name: "x", InputSchemaJson: `{"type":"object"}`, Timeout: &durationpb.Duration{Seconds: math.MaxInt64}}, "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DefinitionFromProto(tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCodesRoundTrip(t *testing.T) {
	all := map[tool.ErrorCode]toolpb.ToolErrorCode{
		tool.CodeFailed:           toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED,
		tool.CodeInvalidArguments: toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS,
		tool.CodeUnknownTool:      toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNKNOWN_TOOL,
		tool.CodeTimeout:          toolpb.ToolErrorCode_TOOL_ERROR_CODE_TIMEOUT,
		tool.CodePanic:            toolpb.ToolErrorCode_TOOL_ERROR_CODE_PANIC,
		tool.CodeUnavailable:      toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNAVAILABLE,
	}
	for c, p := range all {
		if got := CodeToProto(c); got != p {
			t.Errorf("CodeToProto(%s) = %v, want %v", c, got, p)
		}
		if got := CodeFromProto(p); got != c {
			t.Errorf("CodeFromProto(%v) = %s, want %s", p, got, c)
		}
	}
	// Every wire code but UNSPECIFIED has a tool code.
	for v := range toolpb.ToolErrorCode_name {
		p := toolpb.ToolErrorCode(v)
		if p == toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNSPECIFIED {
			continue
		}
		if CodeToProto(CodeFromProto(p)) != p {
			t.Errorf("wire code %v has no tool code", p)
		}
	}
	for _, c := range []tool.ErrorCode{"", "SOMETHING_NEW"} {
		if got := CodeToProto(c); got != toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED {
			t.Errorf("CodeToProto(%q) = %v, want FAILED", c, got)
		}
	}
	for _, p := range []toolpb.ToolErrorCode{toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNSPECIFIED, 99} {
		if got := CodeFromProto(p); got != tool.CodeFailed {
			t.Errorf("CodeFromProto(%v) = %s, want FAILED", p, got)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   tool.Result
		want tool.Result
	}{
		{"text", tool.Text("hello"), tool.Text("hello")},
		{"empty text", tool.Text(""), tool.Text("")},
		{"error", tool.Error("disk full"), tool.ErrorWithCode(tool.CodeFailed, "disk full")},
		{"error with code", tool.ErrorWithCode(tool.CodeTimeout, "too slow"), tool.ErrorWithCode(tool.CodeTimeout, "too slow")},
		{"error without code", tool.Result{Kind: tool.KindError, Content: "?"}, tool.ErrorWithCode(tool.CodeFailed, "?")},
		{"error cause stays behind", tool.ErrorFrom(json.Unmarshal([]byte("{"), new(any))), tool.ErrorWithCode(tool.CodeFailed, "unexpected end of JSON input")},
		{"JSON artifact", tool.ArtifactResult("a point", tool.Artifact{TypeName: "Point", JSON: json.RawMessage(`{"x":1}`)}),
			tool.ArtifactResult("a point", tool.Artifact{TypeName: "Point", JSON: json.RawMessage(`{"x":1}`)})},
		{"value artifact is sent as JSON", tool.ArtifactResult("a point", tool.Artifact{TypeName: "Point", Value: struct {
			X int `json:"x"`
		}{1}}), tool.ArtifactResult("a point", tool.Artifact{TypeName: "Point", JSON: json.RawMessage(`{"x":1}`)})},
		{"bytes artifact", tool.ArtifactResult("an image", tool.Artifact{TypeName: "Image", Data: []byte{0, 1, 0xff}, MediaType: "image/png"}),
			tool.ArtifactResult("an image", tool.Artifact{TypeName: "Image", Data: []byte{0, 1, 0xff}, MediaType: "image/png"})},
		{"bytes win over JSON", tool.ArtifactResult("both", tool.Artifact{Data: []byte("raw"), JSON: json.RawMessage(`1`)}),
			tool.ArtifactResult("both", tool.Artifact{Data: []byte("raw")})},
		{"artifact without payload", tool.ArtifactResult("nothing", tool.Artifact{TypeName: "Empty"}),
			tool.ArtifactResult("nothing", tool.Artifact{TypeName: "Empty"})},
		{"artifact result without artifact", tool.Result{Kind: tool.KindArtifact, Content: "bare"}, tool.Text("bare")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ResultToProto(tc.in)
			if err != nil {
				t.Fatalf("ResultToProto: %v", err)
			}
			got := ResultFromProto(overTheWire(t, p))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultToProtoUnencodableValue(t *testing.T) {
	_, err := ResultToProto(tool.ArtifactResult("x", tool.Artifact{TypeName: "Chan", Value: make(chan int)}))
	if err == nil || !strings.Contains(err.Error(), `"Chan"`) {
		t.Errorf("err = %v, want an error naming the artifact type", err)
	}
}

func TestResultFromProtoWithoutOutcome(t *testing.T) {
	for _, p := range []*toolpb.InvokeResponse{nil, {}} {
		got := ResultFromProto(p)
		if !got.IsError() || got.Code != tool.CodeFailed || got.Content != "worker returned no outcome" {
			t.Errorf("ResultFromProto(%v) = %+v", p, got)
		}
	}
}

func TestArtifactNil(t *testing.T) {
	if p, err := ArtifactToProto(nil); p != nil || err != nil {
		t.Errorf("ArtifactToProto(nil) = %v, %v", p, err)
	}
	if a := ArtifactFromProto(nil); a != nil {
		t.Errorf("ArtifactFromProto(nil) = %v", a)
	}
}

// A blackboard object travels as a JSON value or as a blob (data, media type, size),
// and comes back as the entry it was, through the protobuf encoding.
func TestBlackboardObjectRoundTrip(t *testing.T) {
	png := []byte{0x89, 'P', 'N', 'G', 0, 1, 2}
	for _, b := range []tool.Binding{
		{Name: "chart", Entry: tool.Entry{TypeName: "chart.Png", Data: png, MediaType: "image/png"}},
		{Entry: tool.Entry{TypeName: "Empty", Data: []byte{}, MediaType: "text/plain"}},
		{Name: "c", Entry: tool.Entry{TypeName: "crm.Customer", JSON: json.RawMessage(`{"id":1}`)}},
	} {
		p := BindingToProto(b)
		if b.Entry.IsBlob() && (p.GetJson() != "" || p.GetMediaType() != b.Entry.MediaType || p.GetSize() != int64(len(b.Entry.Data))) {
			t.Errorf("%s: encoded as %v", b.Entry.TypeName, p)
		}
		if !b.Entry.IsBlob() && (p.GetSize() != 0 || p.GetMediaType() != "" || p.GetData() != nil) {
			t.Errorf("%s: a JSON value encoded as %v", b.Entry.TypeName, p)
		}
		raw, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		back := &toolpb.BlackboardObject{}
		if err := proto.Unmarshal(raw, back); err != nil {
			t.Fatal(err)
		}
		got := BindingsFromProto([]*toolpb.BlackboardObject{back})
		if diff := cmp.Diff([]tool.Binding{b}, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		if got[0].Entry.IsBlob() != b.Entry.IsBlob() {
			t.Errorf("%s: IsBlob %v after the round trip", b.Entry.TypeName, got[0].Entry.IsBlob())
		}
	}
}

// An object bounded for an event keeps a blob's bytes up to the bound; over it, only its
// type name, media type and size.
func TestBindingToProtoWithin(t *testing.T) {
	e := tool.Entry{TypeName: "Pdf", Data: []byte("%PDF-1.7"), MediaType: "application/pdf"}
	if p := BindingToProtoWithin(tool.Binding{Entry: e}, 8); string(p.GetData()) != "%PDF-1.7" || p.GetSize() != 8 {
		t.Errorf("at the bound: %v", p)
	}
	want := &toolpb.BlackboardObject{TypeName: "Pdf", MediaType: "application/pdf", Size: 8, Name: "report"}
	if diff := cmp.Diff(want, BindingToProtoWithin(tool.Binding{Name: "report", Entry: e}, 7), protocmp.Transform()); diff != "" {
		t.Errorf("over the bound (-want +got):\n%s", diff)
	}
	j := tool.Entry{TypeName: "N", JSON: json.RawMessage(`[1,2,3]`)}
	if p := BindingToProtoWithin(tool.Binding{Entry: j}, 1); p.GetJson() != `[1,2,3]` {
		t.Errorf("a JSON value is never cut: %v", p)
	}
}

func TestCheckUTF8NamesTheField(t *testing.T) {
	ok := &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "café ☕"},
		BlackboardUpdates: []*toolpb.BlackboardObject{{TypeName: "Point", Json: `{"x":1}`, Data: []byte{0xff}}}}
	if err := CheckUTF8(ok.ProtoReflect()); err != nil {
		t.Errorf("valid text (bytes fields may hold anything): %v", err)
	}
	for _, tc := range []struct {
		m    *toolpb.InvokeResponse
		want string
	}{
		{&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "caf\xe9"}}, "text: not valid UTF-8"},
		{&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{Message: "\xff"}}}, "error.message: not valid UTF-8"},
		{&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Artifact{Artifact: &toolpb.ArtifactResult{Content: "ok",
			Artifact: &toolpb.Artifact{TypeName: "P\xffoint"}}}}, "artifact.artifact.type_name: not valid UTF-8"},
		{&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "ok"},
			BlackboardUpdates: []*toolpb.BlackboardObject{{TypeName: "A"}, {TypeName: "B", Json: "\"\xc3\""}}}, "blackboard_updates[1].json: not valid UTF-8"},
		{&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "ok"},
			Selection: &toolpb.Selection{Tools: []string{"a", "b\xff"}}}, "selection.tools[1]: not valid UTF-8"},
	} {
		err := CheckUTF8(tc.m.ProtoReflect())
		if err == nil || err.Error() != tc.want {
			t.Errorf("CheckUTF8(%v) = %v, want %q", tc.m, err, tc.want)
		}
		if _, merr := proto.Marshal(tc.m); merr == nil {
			t.Errorf("proto.Marshal(%v) succeeded: the case does not test what protocol buffers refuse", tc.m)
		}
	}
}

func TestFixUTF8MakesItEncodable(t *testing.T) {
	m := &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "caf\xe9"},
		BlackboardUpdates: []*toolpb.BlackboardObject{{TypeName: "ok"}, {TypeName: "b\xff", Json: "\"\xc3\"", Data: []byte{0xff}}},
		Selection:         &toolpb.Selection{Tools: []string{"a", "b\xff"}}}
	FixUTF8(m.ProtoReflect())
	if err := CheckUTF8(m.ProtoReflect()); err != nil {
		t.Fatalf("after FixUTF8: %v", err)
	}
	want := &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "caf\uFFFD"},
		BlackboardUpdates: []*toolpb.BlackboardObject{{TypeName: "ok"}, {TypeName: "b\uFFFD", Json: "\"\uFFFD\"", Data: []byte{0xff}}},
		Selection:         &toolpb.Selection{Tools: []string{"a", "b\uFFFD"}}}
	if !proto.Equal(m, want) {
		t.Errorf("FixUTF8 = %v, want %v", m, want)
	}
}
