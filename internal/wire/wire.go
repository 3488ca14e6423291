// Package wire converts between the public tool model (pkg/tool) and the generated
// protobuf types (pkg/toolpb). It is shared by the orchestrator's router and the worker
// SDK so that both sides encode a tool, a result and an error the same way.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// DefinitionToProto encodes a tool's definition and metadata.
func DefinitionToProto(def tool.Definition, meta tool.Metadata) *toolpb.ToolDefinition {
	p := &toolpb.ToolDefinition{
		Name:             def.Name,
		Description:      def.Description,
		InputSchemaJson:  string(def.InputSchema.JSON()),
		ReturnDirect:     meta.ReturnDirect,
		Idempotent:       meta.Idempotent,
		BlackboardTypes:  slices.Clone(meta.Needs),
		ReportsProgress:  meta.ReportsProgress,
		ReceiverType:     meta.ReceiverType,
		RequiresApproval: meta.RequiresApproval,
	}
	if len(def.Metadata) > 0 {
		p.Metadata = make(map[string]string, len(def.Metadata))
		for k, v := range def.Metadata {
			p.Metadata[k] = v
		}
	}
	if meta.Timeout > 0 {
		p.Timeout = durationpb.New(meta.Timeout)
	}
	if meta.OncePerLoop {
		p.OncePerLoop = &toolpb.OncePerLoop{Advice: meta.OnceAdvice}
	}
	return p
}

// DefinitionFromProto decodes a tool definition, checking its schema.
func DefinitionFromProto(p *toolpb.ToolDefinition) (tool.Definition, tool.Metadata, error) {
	if p == nil {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("definition missing")
	}
	schema, err := schema.FromJSON([]byte(p.GetInputSchemaJson()))
	if err != nil {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("input schema: %w", err)
	}
	var timeout time.Duration
	if p.GetTimeout() != nil {
		if err := p.GetTimeout().CheckValid(); err != nil {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("timeout: %w", err)
		}
		timeout = p.GetTimeout().AsDuration()
		if timeout < 0 {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("timeout: negative (%s)", timeout)
		}
	}
	def := tool.Definition{
		Name:        p.GetName(),
		Description: p.GetDescription(),
		InputSchema: schema,
	}
	if len(p.GetMetadata()) > 0 {
		def.Metadata = make(map[string]string, len(p.GetMetadata()))
		for k, v := range p.GetMetadata() {
			def.Metadata[k] = v
		}
	}
	meta := tool.Metadata{ReturnDirect: p.GetReturnDirect(), Idempotent: p.GetIdempotent(), Timeout: timeout,
		Needs: slices.Clone(p.GetBlackboardTypes()), ReportsProgress: p.GetReportsProgress(), ReceiverType: p.GetReceiverType(),
		RequiresApproval: p.GetRequiresApproval()}
	if o := p.GetOncePerLoop(); o != nil {
		meta.OncePerLoop, meta.OnceAdvice = true, o.GetAdvice()
	}
	return def, meta, nil
}

var codesToProto = map[tool.ErrorCode]toolpb.ToolErrorCode{
	tool.CodeFailed:           toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED,
	tool.CodeInvalidArguments: toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS,
	tool.CodeUnknownTool:      toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNKNOWN_TOOL,
	tool.CodeTimeout:          toolpb.ToolErrorCode_TOOL_ERROR_CODE_TIMEOUT,
	tool.CodePanic:            toolpb.ToolErrorCode_TOOL_ERROR_CODE_PANIC,
	tool.CodeUnavailable:      toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNAVAILABLE,
}

// CodeToProto encodes an error code; an unknown or empty code becomes FAILED.
func CodeToProto(c tool.ErrorCode) toolpb.ToolErrorCode {
	if p, ok := codesToProto[c]; ok {
		return p
	}
	return toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED
}

// CodeFromProto decodes an error code; UNSPECIFIED or unknown values become FAILED.
func CodeFromProto(p toolpb.ToolErrorCode) tool.ErrorCode {
	for c, v := range codesToProto {
		if v == p {
			return c
		}
	}
	return tool.CodeFailed
}

// ArtifactToProto encodes an artifact. A value without JSON is marshalled.
func ArtifactToProto(a *tool.Artifact) (*toolpb.Artifact, error) {
	if a == nil {
		return nil, nil
	}
	p := &toolpb.Artifact{TypeName: a.TypeName, MediaType: a.MediaType}
	switch {
	case a.Data != nil:
		p.Payload = &toolpb.Artifact_Data{Data: a.Data}
	case a.JSON != nil:
		p.Payload = &toolpb.Artifact_Json{Json: string(a.JSON)}
	case a.Value != nil:
		b, err := json.Marshal(a.Value)
		if err != nil {
			return nil, fmt.Errorf("artifact of type %q: %w", a.TypeName, err)
		}
		p.Payload = &toolpb.Artifact_Json{Json: string(b)}
	}
	return p, nil
}

// ArtifactFromProto decodes an artifact.
func ArtifactFromProto(p *toolpb.Artifact) *tool.Artifact {
	if p == nil {
		return nil
	}
	a := &tool.Artifact{TypeName: p.GetTypeName(), MediaType: p.GetMediaType()}
	switch pl := p.GetPayload().(type) {
	case *toolpb.Artifact_Data:
		a.Data = pl.Data
	case *toolpb.Artifact_Json:
		a.JSON = json.RawMessage(pl.Json)
	}
	return a
}

// ResultToProto encodes a tool result as an InvokeResponse.
func ResultToProto(r tool.Result) (*toolpb.InvokeResponse, error) {
	resp := &toolpb.InvokeResponse{}
	switch r.Kind {
	case tool.KindError:
		resp.Outcome = &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{Message: r.Content, Code: CodeToProto(r.Code)}}
	case tool.KindArtifact:
		a, err := ArtifactToProto(r.Artifact)
		if err != nil {
			return nil, err
		}
		resp.Outcome = &toolpb.InvokeResponse_Artifact{Artifact: &toolpb.ArtifactResult{Content: r.Content, Artifact: a}}
	default:
		resp.Outcome = &toolpb.InvokeResponse_Text{Text: r.Content}
	}
	return resp, nil
}

// ResultFromProto decodes an InvokeResponse into a tool result. A response with no
// outcome is an error result: a worker must always say what happened.
func ResultFromProto(p *toolpb.InvokeResponse) tool.Result {
	switch o := p.GetOutcome().(type) {
	case *toolpb.InvokeResponse_Text:
		return tool.Text(o.Text)
	case *toolpb.InvokeResponse_Artifact:
		a := ArtifactFromProto(o.Artifact.GetArtifact())
		if a == nil {
			return tool.Text(o.Artifact.GetContent())
		}
		return tool.ArtifactResult(o.Artifact.GetContent(), *a)
	case *toolpb.InvokeResponse_Error:
		return tool.ErrorWithCode(CodeFromProto(o.Error.GetCode()), o.Error.GetMessage())
	default:
		return tool.ErrorWithCode(tool.CodeFailed, "worker returned no outcome")
	}
}

// BindingToProto encodes a blackboard entry and its binding name: a JSON value as json,
// a blob as data, media_type and size.
func BindingToProto(b tool.Binding) *toolpb.BlackboardObject {
	p := &toolpb.BlackboardObject{TypeName: b.Entry.TypeName, Json: string(b.Entry.JSON), Name: b.Name}
	if b.Entry.IsBlob() {
		p.Data, p.MediaType, p.Size = b.Entry.Data, b.Entry.MediaType, int64(len(b.Entry.Data))
	}
	return p
}

// BindingToProtoWithin is BindingToProto for a message of bounded size: a blob of more
// than maxData bytes goes without its data, its media type and size saying what it is.
func BindingToProtoWithin(b tool.Binding, maxData int) *toolpb.BlackboardObject {
	p := BindingToProto(b)
	if len(p.Data) > maxData {
		p.Data = nil
	}
	return p
}

// BindingsToProto encodes blackboard entries.
func BindingsToProto(bs []tool.Binding) []*toolpb.BlackboardObject {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*toolpb.BlackboardObject, len(bs))
	for i, b := range bs {
		out[i] = BindingToProto(b)
	}
	return out
}

// BindingsFromProto decodes blackboard entries as they are, an object with a media type
// or data as a blob (size is not read: data says it); the receiver checks them
// (tool.CheckEntry).
func BindingsFromProto(ps []*toolpb.BlackboardObject) []tool.Binding {
	if len(ps) == 0 {
		return nil
	}
	out := make([]tool.Binding, len(ps))
	for i, p := range ps {
		e := tool.Entry{TypeName: p.GetTypeName(), JSON: json.RawMessage(p.GetJson())}
		if p.GetMediaType() != "" || len(p.GetData()) > 0 {
			e.Data, e.MediaType = p.GetData(), p.GetMediaType()
			if e.Data == nil {
				e.Data = []byte{}
			}
			if p.GetJson() == "" {
				e.JSON = nil
			}
		}
		out[i] = tool.Binding{Name: p.GetName(), Entry: e}
	}
	return out
}

// SignalToProto encodes a control-flow signal; false for a signal the wire does not
// carry.
func SignalToProto(sig tool.Signal) (*toolpb.ControlSignal, bool) {
	switch s := sig.(type) {
	case tool.ReplanRequested:
		return &toolpb.ControlSignal{Signal: &toolpb.ControlSignal_Replan{Replan: &toolpb.Replan{
			Reason: s.Reason, BlackboardUpdates: BindingsToProto(s.Add)}}}, true
	case *tool.ReplanRequested:
		return SignalToProto(*s)
	case tool.Terminate:
		scope := toolpb.TerminateScope_TERMINATE_SCOPE_AGENT
		if s.Scope == tool.TerminateAction {
			scope = toolpb.TerminateScope_TERMINATE_SCOPE_ACTION
		}
		return &toolpb.ControlSignal{Signal: &toolpb.ControlSignal_Terminate{Terminate: &toolpb.Terminate{Scope: scope, Reason: s.Reason}}}, true
	case *tool.Terminate:
		return SignalToProto(*s)
	}
	return nil, false
}

// SignalFromProto decodes a control-flow signal; nil for an empty one.
func SignalFromProto(p *toolpb.ControlSignal) tool.Signal {
	switch s := p.GetSignal().(type) {
	case *toolpb.ControlSignal_Replan:
		return tool.ReplanRequested{Reason: s.Replan.GetReason(), Add: BindingsFromProto(s.Replan.GetBlackboardUpdates())}
	case *toolpb.ControlSignal_Terminate:
		scope := tool.TerminateAgent
		if s.Terminate.GetScope() == toolpb.TerminateScope_TERMINATE_SCOPE_ACTION {
			scope = tool.TerminateAction
		}
		return tool.Terminate{Scope: scope, Reason: s.Terminate.GetReason()}
	}
	return nil
}

// MaxDomainTypes bounds the domain types of one group.
const MaxDomainTypes = 64

// DomainTypeToProto encodes a domain type.
func DomainTypeToProto(d tool.DomainType) *toolpb.DomainType {
	p := &toolpb.DomainType{TypeName: d.TypeName, Description: d.Description}
	if !d.Schema.Equal(schema.Schema{}) {
		p.SchemaJson = string(d.Schema.JSON())
	}
	return p
}

// DomainTypeFromProto decodes a domain type that CheckDomainType accepted.
func DomainTypeFromProto(p *toolpb.DomainType) (tool.DomainType, error) {
	d := tool.DomainType{TypeName: p.GetTypeName(), Description: p.GetDescription()}
	if p.GetSchemaJson() != "" {
		s, err := schema.FromJSON([]byte(p.GetSchemaJson()))
		if err != nil {
			return tool.DomainType{}, err
		}
		d.Schema = s
	}
	return d, nil
}

// CheckDomainType checks a domain type's bounds and schema.
func CheckDomainType(p *toolpb.DomainType) error {
	if strings.TrimSpace(p.GetTypeName()) == "" {
		return errors.New("a domain type has an empty type name")
	}
	if msg := CheckText(p.GetTypeName(), MaxTypeNameBytes); msg != "" {
		return fmt.Errorf("domain type name %s", msg)
	}
	if msg := CheckText(p.GetDescription(), MaxDescriptionBytes); msg != "" {
		return fmt.Errorf("domain type %q: description %s", Truncate(p.GetTypeName(), 64), msg)
	}
	if msg := CheckText(p.GetSchemaJson(), MaxSchemaBytes); msg != "" {
		return fmt.Errorf("domain type %q: schema %s", Truncate(p.GetTypeName(), 64), msg)
	}
	if _, err := DomainTypeFromProto(p); err != nil {
		return fmt.Errorf("domain type %q: %v", Truncate(p.GetTypeName(), 64), err)
	}
	return nil
}

// Loopback reports whether a listen address (host:port) is on a loopback interface
// ("localhost", 127.0.0.0/8, ::1): the addresses that may serve plaintext without being
// told to. An address without a host (":7070", all interfaces) is not.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
