package run

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// prepared is a request resolved against the mesh and the config, ready to run.
type prepared struct {
	req      Request
	tools    []tool.Tool
	bag      toolctx.Context
	provider llm.Provider
	model    string // as the provider takes it
	label    string // "provider/model"
	timeout  time.Duration
	opts     loop.Options
	warnings []Warning
}

// prepare resolves a request: its tools, context, model and limits.
func (s *Service) prepare(req Request) (*prepared, error) {
	rules, err := s.requestRules(req.Sinks)
	if err != nil {
		return nil, err
	}
	chain := s.chain.With(rules)
	tools, warnings, err := s.resolveTools(req, chain.Decorate)
	if err != nil {
		return nil, err
	}
	// The interaction level wins over the run level.
	bag := toolctx.Effective(req.Context, req.Interaction)
	if err := checkContext(bag, req.Context, req.Interaction, s.cfg.Context.MaxBytes); err != nil {
		return nil, err
	}
	provider, model, err := s.chooseModel(req.Model, req.Role)
	if err != nil {
		return nil, err
	}
	var outputSchema *loop.OutputSchema
	if req.OutputSchema != "" {
		if outputSchema, err = loop.CompileOutputSchema([]byte(req.OutputSchema)); err != nil {
			return nil, fieldErr("output_schema_json", ErrInvalid, "%v", err)
		}
	}
	lc := s.cfg.Loop
	p := &prepared{
		req: req, tools: tools, warnings: warnings, bag: bag, provider: provider, model: model,
		label:   llm.Label(provider, model),
		timeout: cmpOr(req.Timeout, lc.RunTimeout.D()),
	}
	label := p.label
	p.opts = loop.Options{
		Provider:        tracedProvider{provider, s.tel},
		Model:           model,
		Temperature:     req.Temperature,
		MaxOutputTokens: req.MaxOutputTokens,
		MaxIterations:   cmpOr(req.MaxIterations, lc.MaxIterations),
		MaxParallel:     cmpOr(req.MaxParallel, lc.MaxParallelToolCalls),
		MaxResultBytes:  lc.MaxToolResultBytes,
		EmptyRetries:    lc.EmptyResponseRetries,
		OutputSchema:    outputSchema,
		Context:         bag,
		Budget:          loop.Budget{MaxTokens: req.MaxTokens, MaxCostUSD: req.MaxCostUSD, MaxActions: req.MaxActions},
		StreamText:      req.StreamText,
		Cost:            func(m string, u llm.Usage) float64 { return s.cost(m, label, u) },
		Strategies:      []loop.Strategy{progressive.New()},
		Decorate:        chain.Decorate,
	}
	return p, nil
}

// cmpOr is v when it is positive, else def.
func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// chooseModel picks the provider and model of a run: model as "provider/model" (a
// model name without a configured provider prefix goes to the default provider, so
// names such as "meta-llama/Llama-3" work), else role mapped by models.roles, else the
// default provider's default model.
func (s *Service) chooseModel(model, role string) (llm.Provider, string, error) {
	field := "llm.model"
	if model == "" && role != "" {
		m, ok := s.cfg.Models.Roles[role]
		if !ok {
			return nil, "", fieldErr("llm.role", ErrInvalid, "unknown role %q (configured roles: [%s])", role, strings.Join(slices.Sorted(maps.Keys(s.cfg.Models.Roles)), ", "))
		}
		model, field = m, "llm.role"
	}
	if p, m, ok := strings.Cut(model, "/"); ok {
		if prov, ok := s.providers[p]; ok {
			return prov, m, nil
		}
		if slices.Contains(knownProviders, p) {
			return nil, "", fieldErr(field, ErrInvalid, "provider %q is not configured on this orchestrator (configured: [%s])", p, strings.Join(slices.Sorted(maps.Keys(s.providers)), ", "))
		}
	}
	return s.provider, model, nil
}

// knownProviders are the provider names toolmesh has; a model prefixed with one of them
// that is not configured is a mistake, not a model name with a slash.
var knownProviders = []string{"scripted", "openai", "anthropic"}

// cost prices a model call from the configured price table: by the model that answered
// (providers report dated versions), else by the model the run asked for.
func (s *Service) cost(answered, requested string, u llm.Usage) float64 {
	p, ok := s.cfg.Models.Prices[answered]
	if !ok {
		if p, ok = s.cfg.Models.Prices[requested]; !ok {
			return 0
		}
	}
	return p.Cost(u.InputTokens, u.OutputTokens)
}

// resolveTools turns the requested groups and tools into tools, de-duplicated by name
// (first wins), sorted by name, and decorated. The built-in groups (process.Groups) are
// the orchestrator's own; any other group is served by workers, through the router.
func (s *Service) resolveTools(req Request, decorate func(tool.Tool) tool.Tool) ([]tool.Tool, []Warning, error) {
	byName := map[string]tool.Tool{}
	add := func(t tool.Tool) {
		if _, dup := byName[t.Definition().Name]; !dup {
			byName[t.Definition().Name] = t
		}
	}
	// Required groups first: a run that cannot start should say so before anything else.
	for i, rq := range req.Required {
		ts, err := s.required(indexed("required_tool_groups", i), rq)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range ts {
			add(t)
		}
	}
	var warnings []Warning
	for i, g := range req.Groups {
		ts, err := s.groupTools(g)
		if err != nil {
			// The seed's rule: a group that is not required does not fail the run.
			why := fmt.Sprintf("No tool group matching role '%s': no worker serves it (known groups: [%s])", g, strings.Join(s.groupRoles(), ", "))
			if !errors.Is(err, router.ErrUnknownGroup) {
				why = fmt.Sprintf("Tool group with role '%s' is not available: %v", g, err)
			}
			warnings = append(warnings, Warning{Field: indexed("tool_groups", i), Message: why + "; the run goes on without it"})
			continue
		}
		for _, t := range ts {
			add(t)
		}
	}
	for i, n := range req.Tools {
		t, err := s.router.Tool(n)
		if err != nil {
			return nil, nil, fieldErr(indexed("tools", i), router.ErrUnknownTool, "no worker serves tool %q", n)
		}
		add(t)
	}
	// The config's default groups come after the run's own: a name the run asked for wins.
	for _, g := range s.cfg.Loop.DefaultToolGroups {
		ts, err := s.groupTools(g)
		if err != nil {
			s.log.Warn("a default tool group is not served: the run starts without it", "group", g)
			continue
		}
		for _, t := range ts {
			add(t)
		}
	}
	out := make([]tool.Tool, 0, len(byName))
	for _, t := range byName {
		out = append(out, decorate(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Definition().Name < out[j].Definition().Name })
	return out, warnings, nil
}

// required resolves a required group: one nobody serves, one without tools, or one that
// lacks a named tool refuses the run, with the texts of the seed's tool-group resolution.
// The tools it checks are those the model is offered first (a facade, when the config
// offers the group as one, counts with its children).
func (s *Service) required(field string, rq Requirement) ([]tool.Tool, error) {
	ts, err := s.groupTools(rq.Role)
	if err != nil {
		why := fmt.Sprintf("No tool group matching role '%s'", rq.Role)
		if !errors.Is(err, router.ErrUnknownGroup) {
			why = err.Error()
		}
		return nil, fieldErr(field, router.ErrUnknownGroup, "Required tool group with role='%s' could not be resolved: %s", rq.Role, why)
	}
	if len(rq.Tools) == 0 {
		return ts, nil
	}
	names := groupToolNames(ts)
	if len(names) == 0 {
		return nil, fieldErr(field+".tools", ErrRequiredMissing, "Required tool group with role='%s' has no tools; required: [%s]", rq.Role, strings.Join(rq.Tools, ", "))
	}
	var missing []string
	for _, n := range rq.Tools {
		if !slices.Contains(names, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fieldErr(field+".tools", ErrRequiredMissing, "Tool group with role='%s' is missing required tools: [%s]. Available: [%s]", rq.Role, strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	return ts, nil
}

// groupToolNames are the names of ts and of the children of any facade among them,
// sorted.
func groupToolNames(ts []tool.Tool) []string {
	var names []string
	var walk func(ts []tool.Tool)
	walk = func(ts []tool.Tool) {
		for _, t := range ts {
			names = append(names, t.Definition().Name)
			if f, ok := tool.As[tool.Facade](t); ok {
				walk(f.Children())
			}
		}
	}
	walk(ts)
	slices.Sort(names)
	return slices.Compact(names)
}

// groupTools are the tools a group offers: a built-in group's, or those its workers
// serve (as one facade when the config says so).
func (s *Service) groupTools(role string) ([]tool.Tool, error) {
	if ts, ok := process.GroupTools(role, nil); ok {
		return ts, nil
	}
	if g, ok := s.mcp[role]; ok {
		// Connects on the first run that asks for the group.
		ts, err := g.Tools(context.Background())
		if err != nil {
			return nil, err
		}
		gc := s.cfg.Groups[role]
		return s.groupFacade(role, gc.Description, gc.UsageNotes, ts), nil
	}
	info, ts, err := s.router.Group(role)
	if err != nil {
		return nil, err
	}
	return s.groupFacade(info.GetRole(), info.GetDescription(), info.GetUsageNotes(), ts), nil
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// groupFacade offers a group as one facade when the config says so.
func (s *Service) groupFacade(role, description, usageNotes string, ts []tool.Tool) []tool.Tool {
	f := s.cfg.Groups[role].Facade
	if f == nil || len(ts) == 0 {
		return ts
	}
	name, desc, notes := f.Name, f.Description, f.UsageNotes
	if name == "" {
		name = role
	}
	if desc == "" {
		desc = description
	}
	if notes == "" {
		notes = usageNotes
	}
	return []tool.Tool{tool.Of(name, desc, ts, tool.UsageNotes(notes))}
}

func (s *Service) groupRoles() []string {
	var roles []string
	for _, g := range s.router.ListGroups() {
		roles = append(roles, g.GetGroup().GetRole())
	}
	for role := range process.Groups {
		roles = append(roles, role)
	}
	for role := range s.mcp {
		roles = append(roles, role)
	}
	slices.Sort(roles)
	return roles
}
