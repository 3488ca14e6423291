package server

import (
	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// maxRunAgenticTools bounds a request's agentic tools.
const maxRunAgenticTools = 32

// validateAgentic checks the bounds and encodings of a request's agentic tools; the
// specs themselves (names, kinds, locks, states, CEL, sub-tools) are checked when the
// run is prepared.
func validateAgentic(specs []*toolpb.AgenticToolSpec) *fieldError {
	if len(specs) > maxRunAgenticTools {
		return invalid("agentic_tools", "has %d agentic tools; the limit is %d", len(specs), maxRunAgenticTools)
	}
	for i, s := range specs {
		f := indexed("agentic_tools", i)
		for _, t := range []struct {
			field, s string
			limit    int
		}{
			{".name", s.GetName(), 64},
			{".description", s.GetDescription(), wire.MaxDescriptionBytes},
			{".system_prompt", s.GetSystemPrompt(), wire.MaxPromptBytes},
			{".system_prompt_template", s.GetSystemPromptTemplate(), agentic.MaxPromptTemplateBytes},
			{".parameters_json_schema", s.GetParametersJsonSchema(), wire.MaxSchemaBytes},
			{".output_schema_json", s.GetOutputSchemaJson(), agentic.MaxOutputSchemaBytes},
			{".output_type", s.GetOutputType(), agentic.MaxOutputTypeBytes},
		} {
			if p := wire.CheckText(t.s, t.limit); p != "" {
				return invalid(f+t.field, "%s", p)
			}
		}
		if js := s.GetParametersJsonSchema(); js != "" {
			if _, err := schema.FromJSON([]byte(js)); err != nil {
				return invalid(f+".parameters_json_schema", "%v", err)
			}
		}
		if js := s.GetOutputSchemaJson(); js != "" {
			if err := agentic.CheckOutputSchema(js); err != nil {
				return invalid(f+".output_schema_json", "%s", wire.Truncate(err.Error(), 256))
			}
		}
		if fe := validatePromptTemplate(f, s); fe != nil {
			return fe
		}
		if fe := validateLLM(s.GetLlm()); fe != nil {
			fe.field = f + "." + fe.field
			return fe
		}
		if n := s.GetMaxIterations(); n < 0 || n > 1000 {
			return invalid(f+".max_iterations", "must be between 0 and 1000, got %d", n)
		}
		if fe := checkContext(f+".context", s.GetContext()); fe != nil {
			return fe
		}
		for _, names := range []struct {
			field string
			names []string
		}{{".tools", s.GetTools()}, {".tool_groups", s.GetToolGroups()}} {
			if len(names.names) > agentic.MaxTools {
				return invalid(f+names.field, "has %d names; the limit is %d", len(names.names), agentic.MaxTools)
			}
			for j, n := range names.names {
				if p := wire.CheckPrintable(n, 130); p != "" {
					return invalid(indexed(f+names.field, j), "%s", p)
				}
			}
		}
		if n := len(s.GetLockedTools()); n > agentic.MaxLocks {
			return invalid(f+".locked_tools", "has %d locked tools; the limit is %d", n, agentic.MaxLocks)
		}
		for j, l := range s.GetLockedTools() {
			lf := indexed(f+".locked_tools", j)
			if p := wire.CheckText(l.GetWhen(), maxExpressionSize); p != "" {
				return invalid(lf+".when", "%s", p)
			}
			for _, t := range []struct{ field, s string }{{".artifact_type", l.GetArtifactType()}, {".blackboard_type", l.GetBlackboardType()}} {
				if p := wire.CheckText(t.s, wire.MaxTypeNameBytes); p != "" {
					return invalid(lf+t.field, "%s", p)
				}
			}
			if len(l.GetAfterAll())+len(l.GetAfterAny()) > agentic.MaxTools {
				return invalid(lf, "names more than %d tools", agentic.MaxTools)
			}
		}
		if fe := validateChaining(f+".chaining_sources", s.GetChainingSources()); fe != nil {
			return fe
		}
		if n := len(s.GetStateMachine().GetStates()); n > agentic.MaxStates {
			return invalid(f+".state_machine.states", "has %d states; the limit is %d", n, agentic.MaxStates)
		}
		switch s.GetKind() {
		case toolpb.AgenticKind_AGENTIC_KIND_UNSPECIFIED, toolpb.AgenticKind_AGENTIC_KIND_SIMPLE,
			toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK, toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE, toolpb.AgenticKind_AGENTIC_KIND_AGENT:
		default:
			return invalid(f+".kind", "unknown kind %d", s.GetKind())
		}
	}
	return nil
}

// validatePromptTemplate checks the system prompt template of the spec at f: alone, and
// parsing.
func validatePromptTemplate(f string, s *toolpb.AgenticToolSpec) *fieldError {
	text := s.GetSystemPromptTemplate()
	switch {
	case text == "":
	case s.GetSystemPrompt() != "":
		return invalid(f+".system_prompt_template", "set at most one of system_prompt and system_prompt_template")
	default:
		if _, err := agentic.ParsePrompt(text); err != nil {
			return invalid(f+".system_prompt_template", "%s", wire.Truncate(err.Error(), 256))
		}
	}
	return nil
}

var agenticKinds = map[toolpb.AgenticKind]agentic.Kind{
	toolpb.AgenticKind_AGENTIC_KIND_UNSPECIFIED:   agentic.KindSimple,
	toolpb.AgenticKind_AGENTIC_KIND_SIMPLE:        agentic.KindSimple,
	toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK:      agentic.KindPlaybook,
	toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE: agentic.KindStateMachine,
	toolpb.AgenticKind_AGENTIC_KIND_AGENT:         agentic.KindAgent,
}

// kindProto is the wire form of a kind.
func kindProto(k string) toolpb.AgenticKind {
	for p, kind := range agenticKinds {
		if string(kind) == k && p != toolpb.AgenticKind_AGENTIC_KIND_UNSPECIFIED {
			return p
		}
	}
	return toolpb.AgenticKind_AGENTIC_KIND_UNSPECIFIED
}

// agenticSpecs are a request's agentic tools as the run service takes them (validated).
func agenticSpecs(specs []*toolpb.AgenticToolSpec) []agentic.Spec {
	out := make([]agentic.Spec, 0, len(specs))
	for i, s := range specs {
		a := agentic.Spec{
			Key: indexed("agentic_tools", i), Name: s.GetName(), Description: s.GetDescription(), Kind: agenticKinds[s.GetKind()],
			SystemPrompt: s.GetSystemPrompt(), SystemPromptTemplate: s.GetSystemPromptTemplate(), Model: s.GetLlm().GetModel(), Role: s.GetLlm().GetRole(),
			MaxIterations: int(s.GetMaxIterations()), Tools: s.GetTools(), Groups: s.GetToolGroups(),
			CaptureNestedArtifacts: s.GetCaptureNestedArtifacts(), Context: toolctx.FromMap(s.GetContext()),
			ChainFromAny: s.GetChainFromAny(), Chaining: chainingSpecs(s.GetChainingSources()),
			OutputSchema: s.GetOutputSchemaJson(), OutputType: s.GetOutputType(), OutputSchemaField: "output_schema_json",
		}
		if js := s.GetParametersJsonSchema(); js != "" {
			a.Parameters, _ = schema.FromJSON([]byte(js)) // validated
		}
		if o := s.GetLlm(); o != nil {
			a.MaxOutputTokens = int(o.GetMaxOutputTokens())
			if o.Temperature != nil {
				t := o.GetTemperature()
				a.Temperature = &t
			}
		}
		for _, l := range s.GetLockedTools() {
			a.Locks = append(a.Locks, agentic.Lock{Tool: l.GetTool(), AfterAll: l.GetAfterAll(), AfterAny: l.GetAfterAny(),
				ArtifactType: l.GetArtifactType(), BlackboardType: l.GetBlackboardType(), When: l.GetWhen()})
		}
		if sm := s.GetStateMachine(); sm != nil {
			a.Initial = sm.GetInitialState()
			for _, st := range sm.GetStates() {
				state := agentic.State{Name: st.GetName()}
				for _, t := range st.GetTools() {
					state.Tools = append(state.Tools, agentic.StateTool{Tool: t.GetTool(), TransitionsTo: t.GetTransitionsTo()})
				}
				a.States = append(a.States, state)
			}
		}
		out = append(out, a)
	}
	return out
}

// maxChainingSources bounds the chaining sources of a request or an agentic tool.
const maxChainingSources = 32

func validateChaining(field string, srcs []*toolpb.ChainingSource) *fieldError {
	if len(srcs) > maxChainingSources {
		return invalid(field, "has %d sources; the limit is %d", len(srcs), maxChainingSources)
	}
	for i, src := range srcs {
		f := indexed(field, i)
		if p := wire.CheckText(src.GetTypeName(), wire.MaxTypeNameBytes); p != "" {
			return invalid(f+".type_name", "%s", p)
		}
		if blank(src.GetTypeName()) {
			return invalid(f+".type_name", "is empty: a source needs a type name")
		}
		if p := wire.CheckText(src.GetWhen(), maxExpressionSize); p != "" {
			return invalid(f+".when", "%s", p)
		}
	}
	return nil
}

// chainingSpecs are a request's chaining sources as the run service takes them.
func chainingSpecs(srcs []*toolpb.ChainingSource) []run.ChainingSource {
	out := make([]run.ChainingSource, 0, len(srcs))
	for _, s := range srcs {
		out = append(out, run.ChainingSource{Type: s.GetTypeName(), When: s.GetWhen()})
	}
	return out
}
