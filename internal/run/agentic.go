package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// configSpecs are the config's agentic tools as specs, in name order; an error names the
// key of the first that is wrong in itself.
func configSpecs(cfg config.Config) ([]agentic.Spec, error) {
	var out []agentic.Spec
	for _, name := range slices.Sorted(maps.Keys(cfg.AgenticTools)) {
		a := cfg.AgenticTools[name]
		key := "agentic_tools." + name
		s := agentic.Spec{
			Key: key, Name: name, Description: a.Description, Kind: agentic.Kind(a.Kind),
			SystemPrompt: a.SystemPrompt, SystemPromptTemplate: a.SystemPromptTemplate,
			Model: a.Model, Role: a.Role, MaxIterations: a.MaxIterations, Tools: a.Tools, Groups: a.ToolGroups,
			CaptureNestedArtifacts: a.CaptureNestedArtifacts, ChainFromAny: a.ChainFromAny, OutputType: a.OutputType,
		}
		for _, c := range a.ChainingSources {
			s.Chaining = append(s.Chaining, agentic.ChainingSpec{Type: c.Type, When: c.When})
		}
		if s.Kind == "" {
			s.Kind = agentic.KindSimple
		}
		if len(a.Parameters) > 0 {
			raw, err := json.Marshal(a.Parameters)
			if err != nil {
				return nil, &agentic.FieldError{Field: key + ".parameters", Problem: err.Error()}
			}
			if s.Parameters, err = schema.FromJSON(raw); err != nil {
				return nil, &agentic.FieldError{Field: key + ".parameters", Problem: err.Error()}
			}
		}
		if len(a.OutputSchema) > 0 {
			raw, err := json.Marshal(a.OutputSchema)
			if err != nil {
				return nil, &agentic.FieldError{Field: key + ".output_schema", Problem: err.Error()}
			}
			s.OutputSchema = string(raw)
		}
		if len(a.Context) > 0 {
			s.Context = toolctx.FromMap(a.Context)
		}
		for _, l := range a.LockedTools {
			s.Locks = append(s.Locks, agentic.Lock{Tool: l.Tool, AfterAll: l.AfterAll, AfterAny: l.AfterAny, ArtifactType: l.ArtifactType, BlackboardType: l.BlackboardType, When: l.When})
		}
		if sm := a.StateMachine; sm != nil {
			s.Initial = sm.InitialState
			for _, st := range sm.States {
				state := agentic.State{Name: st.Name}
				for _, t := range st.Tools {
					state.Tools = append(state.Tools, agentic.StateTool{Tool: t.Tool, TransitionsTo: t.TransitionsTo})
				}
				s.States = append(s.States, state)
			}
		}
		if err := agentic.Check(s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// catalog resolves an agentic tool's sub-tools for a run: tools workers serve, the
// built-in groups' tools, and groups by role as the run would get them.
type catalog struct {
	s   *Service
	ctx context.Context
}

func (c catalog) Tool(name string) (tool.Tool, bool) {
	if t, ok := c.served(name); ok {
		return t, true
	}
	for _, role := range slices.Sorted(maps.Keys(c.s.mcp)) {
		if t, ok := c.s.mcp[role].ToolByName(c.ctx, name); ok {
			return t, true
		}
	}
	return nil, false
}

// served finds a tool that workers, the built-in groups or the in-process groups serve, connecting nothing.
func (c catalog) served(name string) (tool.Tool, bool) {
	if t, err := c.s.namedTool(name); err == nil {
		return t, true
	}
	for _, role := range slices.Sorted(maps.Keys(process.Groups)) {
		ts, _ := process.GroupTools(role, c.s.formatter)
		if t, ok := findTool(ts, name); ok {
			return t, true
		}
	}
	return nil, false
}

// findTool finds a tool by name among ts and the children of the facades among them.
func findTool(ts []tool.Tool, name string) (tool.Tool, bool) {
	for _, t := range ts {
		if t.Definition().Name == name {
			return t, true
		}
		if f, ok := tool.As[tool.Facade](t); ok {
			if c, ok := findTool(f.Children(), name); ok {
				return c, true
			}
		}
	}
	return nil, false
}

func (c catalog) Serves(name string) bool {
	_, ok := c.served(name)
	return ok
}

func (c catalog) Group(role string) ([]tool.Tool, bool) {
	ts, err := c.s.groupTools(c.ctx, role)
	return ts, err == nil
}

func (s *Service) configAgentic(name string) bool {
	return slices.ContainsFunc(s.agentic, func(a agentic.Spec) bool { return a.Name == name })
}

// compileAgentic builds the agentic tools a run offers (want): the request's own specs
// and the config's, which a request's spec may not reuse the name of.
func (s *Service) compileAgentic(ctx context.Context, own []agentic.Spec, want []string) ([]tool.Tool, error) {
	specs := append(slices.Clone(s.agentic), own...)
	ts, err := agentic.Compile(specs, want, catalog{s: s, ctx: ctx})
	return ts, asFieldErr(err)
}

// chainingSources compiles tool-chaining sources; an error names the field.
func chainingSources(field string, specs []ChainingSource) ([]agentic.Source, error) {
	out, err := agentic.CompileSources(field, specs)
	return out, asFieldErr(err)
}

// receiverTypes are the receiver types of the methods the mesh serves.
func (s *Service) receiverTypes() []string {
	var out []string
	for _, m := range s.router.Methods() {
		if typ := m.Metadata().ReceiverType; !slices.Contains(out, typ) {
			out = append(out, typ)
		}
	}
	return out
}

// loopChaining is what a loop needs for tool chaining: its bindings, in the context of
// its calls, and with auto-discovery the strategy that adds the methods of a type once
// an object of it binds.
func (s *Service) loopChaining(sources []agentic.Source, fromAny bool) (*agentic.Bindings, loop.Strategy) {
	b := agentic.NewBindings(s.receiverTypes, sources).Checking(s.fitsDomainType).Hiding(s.cfg.PromptHides)
	if !fromAny {
		return b, nil
	}
	return b, agentic.Discovery(b, s.router.Methods)
}

// withAgent refuses a request's agentic tool that reuses the name of one of the config's,
// and applies the agent req names: the agent's system prompt (or the default one for
// its description) before the request's, its model or role and its iteration limit
// unless the request sets them, its context under the request's interaction context,
// its output schema unless the request sets one. Its sub-tools join the request's when the tools are resolved.
func (s *Service) withAgent(req Request) (Request, error) {
	for _, a := range req.Agentic {
		if s.configAgentic(a.Name) {
			return req, fieldErr(a.Key+".name", ErrInvalid, "%q is the name of an agentic tool of the orchestrator's config (agentic_tools.%s)", a.Name, a.Name)
		}
	}
	if req.Agent == "" {
		return req, nil
	}
	var spec *agentic.Spec
	for _, list := range [][]agentic.Spec{req.Agentic, s.agentic} {
		for i := range list {
			if list[i].Name == req.Agent {
				spec = &list[i]
				break
			}
		}
		if spec != nil {
			break
		}
	}
	if spec == nil {
		return req, fieldErr("agent", ErrInvalid, "no agent is named %q in agentic_tools or the orchestrator's config", req.Agent)
	}
	if spec.Kind != agentic.KindAgent {
		return req, fieldErr("agent", ErrInvalid, "%q is a %s agentic tool, not an agent (kind agent)", req.Agent, spec.Kind)
	}
	req.Interaction = spec.Context.Merge(req.Interaction)
	system, err := s.agentPrompt(spec, req)
	if err != nil {
		return req, err
	}
	if req.System != "" {
		system += "\n\n" + req.System
	}
	req.System = system
	// The agent's sub-tools are offered as it has them (see resolveTools).
	if req.Model == "" && req.Role == "" {
		req.Model, req.Role = spec.Model, spec.Role
	}
	if req.MaxIterations == 0 {
		req.MaxIterations = spec.MaxIterations
	}
	if req.OutputSchema == "" {
		req.OutputSchema = spec.OutputSchema // the agent's result object, unless the request asks for another
	}
	return req, nil
}

// agentPrompt is the system prompt of an agent run directly: its own, its template
// rendered once as the run starts (over the run's last user message, its context and
// its blackboard, empty yet), or the default one for its description.
func (s *Service) agentPrompt(spec *agentic.Spec, req Request) (string, error) {
	def := agentic.DefaultSystemPrompt(cmp.Or(spec.Description, agentic.AgentDescription(spec.Name)))
	switch {
	case spec.SystemPrompt != "":
		return spec.SystemPrompt, nil
	case spec.SystemPromptTemplate == "":
		return def, nil
	}
	p, err := agentic.ParsePrompt(spec.SystemPromptTemplate)
	if err != nil {
		return "", fieldErr(spec.Key+".system_prompt_template", ErrInvalid, "%v", err)
	}
	var input string
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser {
			input = m.Text
		}
	}
	bag := req.Context.Merge(req.Interaction)
	if req.Tenant != "" {
		bag = bag.With(TenantKey, req.Tenant)
	}
	out, err := p.Render(spec, "", def, agentic.PromptCall{Input: input, Context: bag, Hidden: s.cfg.PromptHides})
	if err != nil {
		return "", fieldErr("agent", ErrInvalid, "agent '%s' was not run: its system_prompt_template failed: %v", spec.Name, err)
	}
	return out, nil
}

// fitsDomainType reports whether an object satisfies the schema of its domain type, as a
// worker declared it; a type nobody declared, or declared without a schema, takes any.
func (s *Service) fitsDomainType(typ string, e tool.Entry) bool {
	d, ok := s.router.DomainType(typ)
	if !ok || d.Schema.Equal(schema.Schema{}) {
		return true
	}
	_, err := d.Schema.Validate(string(e.JSON))
	return err == nil
}

// asFieldErr is an agentic spec's refusal as the run service's: INVALID_ARGUMENT naming
// the field. Other errors pass as they are.
func asFieldErr(err error) error {
	var fe *agentic.FieldError
	if errors.As(err, &fe) {
		return fieldErr(fe.Field, ErrInvalid, "%s", fe.Problem)
	}
	return err
}
