package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// prepared is a request resolved against the mesh and the config, ready to run.
type prepared struct {
	// req is the request, until the run's loop started (startLoop drops it); tenant and
	// chainFromAny are what its nested loops read of it.
	req          *Request
	tenant       string
	chainFromAny bool
	tools        []tool.Tool
	bag          toolctx.Context
	provider     llm.Provider
	model        string // as the provider takes it
	label        string // "provider/model"
	timeout      time.Duration
	opts         loop.Options
	warnings     []Warning
	// decorate is the run's decorator chain, for the tools nested loops add.
	decorate func(tool.Tool) tool.Tool
	// sources are the run's tool-chaining sources; chaining is set when the run chains
	// at all (the mesh serves methods, or it discovers them).
	sources  []agentic.Source
	chaining bool
	// nests is set when the run offers agentic tools, whose calls need a Nester.
	nests bool
	// journal is the run's journal, once it runs with one.
	journal *journal
}

// prepare resolves a request: its tools, context, model and limits.
func (s *Service) prepare(ctx context.Context, req Request) (*prepared, error) {
	req, err := s.withAgent(req)
	if err != nil {
		return nil, err
	}
	rules, err := s.requestRules(req.Sinks)
	if err != nil {
		return nil, err
	}
	// Chaining costs nothing to a run when the mesh serves no method (a method that
	// registers while the run goes on does not chain in it).
	chaining := len(s.router.Methods()) > 0 || req.ChainFromAny
	sources, err := chainingSources("chaining_sources", req.ChainingSources)
	if err != nil {
		return nil, err
	}
	// The interaction level wins over the run level; a verified tenant wins over both.
	bag := req.Context.Merge(req.Interaction)
	if req.Tenant != "" {
		bag = bag.With(TenantKey, req.Tenant)
	}
	keep := func(string, string) bool { return true }
	tg, limited := s.tenantGrant(req.Tenant)
	if limited {
		if err := s.checkGrant(ctx, req, tg); err != nil {
			return nil, err
		}
		if max := tg.MaxMessages; max > 0 && len(req.Messages) > max {
			return nil, fieldErr("messages", ErrTenantQuota, "tenant %q's runs start with at most %d messages; this one has %d", req.Tenant, max, len(req.Messages))
		}
		keep = func(role, name string) bool {
			_, builtin := process.Groups[role]
			return builtin || tg.Allows(role, name)
		}
	}
	decorate := s.offer(req, s.runPipeline(req, tg, limited, chaining, rules), tg, limited, chaining)
	if err := checkContext(bag, req.Context, req.Interaction, s.cfg.Context.MaxBytes); err != nil {
		return nil, err
	}
	// An MCP server that authenticates each caller connects, and lists its tools, with
	// the run's own credentials.
	// Resolving may wait for an MCP server to connect: no longer than the run may take.
	// Without MCP groups nothing waits, and the run goes without the deadline's context
	// (a child of the call's, it would leave the call's context a map of its children
	// for as long as the call lasts).
	rctx := toolctx.NewContext(ctx, bag)
	if len(s.mcp) > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(rctx, cmpOr(req.Timeout, s.cfg.Loop.RunTimeout.D()))
		defer cancel()
	}
	tools, warnings, err := s.resolveTools(rctx, req, decorate, keep)
	if err != nil {
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
	// Groups offered as references bring their usage notes into the system prompt.
	var roles []string
	for _, rq := range req.Required {
		roles = append(roles, rq.Role)
	}
	roles = append(append(roles, req.Groups...), s.cfg.Loop.DefaultToolGroups...)
	if notes := s.referenceNotes(rctx, roles); notes != "" {
		req.System = strings.TrimLeft(req.System+notes, "\n")
	}
	lc := s.cfg.Loop
	p := &prepared{
		req: &req, tenant: req.Tenant, chainFromAny: req.ChainFromAny, tools: tools, warnings: warnings, bag: bag, provider: provider, model: model, decorate: decorate, sources: sources, chaining: chaining,
		nests:   len(req.Agentic) > 0 || req.Agent != "" || slices.ContainsFunc(req.Tools, s.configAgentic),
		label:   llm.Label(provider, model),
		timeout: cmpOr(req.Timeout, lc.RunTimeout.D()),
	}
	label := p.label
	p.opts = loop.Options{
		Provider:        s.modelProvider(provider, req.Tenant),
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
		Strategies:      append([]loop.Strategy{progressive.New(), s.newMCPRefresh(rctx, roles)}, s.strategies...),
		Decorate:        decorate,
	}
	return p, nil
}

// The names of the run service's own layers of the call pipeline.
const (
	LayerGrant    = "tenant grant"
	LayerApproval = "approval"
)

// pipeline is the pipeline of a run's tool calls, outermost first: the tenant's grant
// and call budget, the call policy, approval, tool chaining (binding, receiver), then the config's layers
// (decorators.Chain: telemetry, events, one-shot, assets, artifact sinks, replan,
// output bound). Every layer is in the list; one with nothing to do for a tool (no
// tenant, chaining off, no rule that covers it) is left out of that tool's calls.
func (s *Service) pipeline(tenant string, caller Caller, tg config.Tenant, limited, chaining bool, chain *decorators.Chain) toolcall.Pipeline {
	grant := toolcall.Layer{Name: LayerGrant}
	if limited {
		grant = s.grantLayer(tenant, tg)
	}
	p := toolcall.Pipeline{grant, s.policyLayer(tenant, caller), approvalLayer(s.approvalOf), agentic.BindingLayer(chaining), agentic.ReceiverLayer(chaining)}
	return insertLayers(append(p, chain.Layers()...), s.layers)
}

// runPipeline is the pipeline of req's tool calls (see pipeline), with the request's
// own rules: the shared one of its kind when the run has no tenant, no caller and no
// rules, which leave nothing of the run's own in it.
func (s *Service) runPipeline(req Request, tg config.Tenant, limited, chaining bool, rules []decorators.Rule) toolcall.Pipeline {
	c := req.Caller
	if req.Tenant == "" && !limited && len(rules) == 0 && c.ID == "" && len(c.Scopes) == 0 && len(c.Claims) == 0 && s.plain[0] != nil {
		if chaining {
			return s.plain[1]()
		}
		return s.plain[0]()
	}
	return s.pipeline(req.Tenant, req.Caller, tg, limited, chaining, s.chain.With(rules))
}

// offer is how a run offers a tool, the tools injected mid-loop included: a worker's
// tool outside the tenant's grant is not offered (nil); a run taken over keeps the
// workers' definitions it was shown, where replicas of them remain; a method is
// described as one; every call goes through the run's pipeline. The function keeps
// only what it reads of the request, since a run holds it as long as it lives.
func (s *Service) offer(req Request, p toolcall.Pipeline, tg config.Tenant, limited, chaining bool) func(tool.Tool) tool.Tool {
	o := &offering{s: s, pipeline: p, chaining: chaining, runID: req.ID, exclude: req.ExcludeTools, pinned: req.Pinned, names: req.ToolNames}
	if limited {
		o.grant = &tg
	}
	return o.offer
}

// offering is what a run's offer function reads: the request's exclusions, pinned
// versions and renames, the tenant's grant (nil when the tenant is not limited to one)
// and the run's pipeline.
type offering struct {
	s        *Service
	pipeline toolcall.Pipeline
	grant    *config.Tenant
	chaining bool
	runID    string
	exclude  []string
	pinned   map[string]string
	names    map[string]string
}

// offer is the tool t as the run offers it, or nil when the run does not offer it.
func (o *offering) offer(t tool.Tool) tool.Tool {
	s := o.s
	if role, served := groupOf(t); o.grant != nil && served && !o.grant.Allows(role, t.Definition().Name) {
		return nil
	}
	if excludedByRun(o.exclude, t.Definition().Name) {
		return nil
	}
	if len(o.pinned) > 0 {
		pinned, same := s.router.Pin(t, o.pinned)
		if !same {
			s.log.Warn("a run taken over calls a tool whose definition changed since it started: no replica serves the one it was shown",
				"run_id", o.runID, "tool", t.Definition().Name)
		}
		t = pinned
	}
	if o.chaining {
		t = agentic.MethodOf(t)
	}
	name := t.Definition().Name
	t = o.pipeline.Wrap(redescribe(t, s.cfg.Tools[name]))
	if to, ok := o.names[name]; ok {
		// Outside the pipeline: its layers (the config's rules by tool name, the
		// tenant's grant) see the tool's own name; the model sees the new one.
		t = tool.WithName(t, to)
	}
	return t
}

// excludedByRun reports whether a run's exclude_tools leave a tool of that name out.
func excludedByRun(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// redescribe gives t the description and note the config sets for it, as the model reads
// them (tools.<name>.description, tools.<name>.note).
func redescribe(t tool.Tool, tc config.Tool) tool.Tool {
	if tc.Description != "" {
		t = tool.WithDescription(t, tc.Description)
	}
	if tc.Note != "" {
		t = tool.WithNote(t, tc.Note)
	}
	return t
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
// the orchestrator's own; any other group is served by workers, through the router, or
// by an MCP server. A tool of a group that keep(role, name) refuses (outside the
// tenant's grant) is left out.
func (s *Service) resolveTools(ctx context.Context, req Request, decorate func(tool.Tool) tool.Tool, keep func(role, name string) bool) ([]tool.Tool, []Warning, error) {
	byName := map[string]tool.Tool{}
	add := func(t tool.Tool) {
		if _, dup := byName[t.Definition().Name]; !dup {
			byName[t.Definition().Name] = t
		}
	}
	addOf := func(role string, ts []tool.Tool) {
		for _, t := range ts {
			if keep(role, t.Definition().Name) {
				add(t)
			}
		}
	}
	// Required groups first: a run that cannot start should say so before anything else.
	for i, rq := range req.Required {
		ts, err := s.required(ctx, indexed("required_tool_groups", i), rq)
		if err != nil {
			return nil, nil, err
		}
		addOf(rq.Role, ts)
	}
	warnings := s.optionalGroups(ctx, req, addOf)
	// Agentic tools, the request's own or the config's, that it names among its tools;
	// every one of the request's is compiled (so checked), offered or not, and so is the
	// agent it runs directly, whose sub-tools it offers.
	isAgentic := func(n string) bool {
		return s.configAgentic(n) || slices.ContainsFunc(req.Agentic, func(a agentic.Spec) bool { return a.Name == n })
	}
	var offer []string
	for i, n := range req.Tools {
		t, err := s.requestedTool(ctx, n)
		switch {
		case err == nil && isAgentic(n):
			return nil, nil, fieldErr(indexed("tools", i), ErrInvalid, "%q names both an agentic tool and a tool the mesh serves: rename the agentic tool", n)
		case err == nil:
			add(t)
		case isAgentic(n):
			offer = append(offer, n)
		default:
			return nil, nil, fieldErr(indexed("tools", i), router.ErrUnknownTool, "no worker, MCP server or tool group serves tool %q, and no agentic tool has that name", n)
		}
	}
	want := slices.Clone(offer)
	for _, a := range req.Agentic {
		if !slices.Contains(want, a.Name) {
			want = append(want, a.Name)
		}
	}
	if req.Agent != "" && !slices.Contains(want, req.Agent) {
		want = append(want, req.Agent)
	}
	if len(want) > 0 {
		ts, err := s.compileAgentic(ctx, req.Agentic, want)
		if err != nil {
			return nil, nil, err
		}
		for i, t := range ts {
			switch name := want[i]; {
			case slices.Contains(offer, name):
				add(t)
			case name == req.Agent:
				for _, sub := range agentic.SubTools(t) {
					add(sub)
				}
			}
		}
	}
	// The config's default groups come after the run's own: a name the run asked for wins.
	for _, g := range s.cfg.Loop.DefaultToolGroups {
		ts, err := s.groupTools(ctx, g)
		if err != nil {
			s.log.Warn("a default tool group is not served: the run starts without it", "group", g)
			continue
		}
		addOf(g, ts)
	}
	out := make([]tool.Tool, 0, len(byName))
	for _, t := range byName {
		if d := decorate(t); d != nil {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Definition().Name < out[j].Definition().Name })
	return out, warnings, nil
}

// required resolves a required group: one nobody serves, one without tools, or one that
// lacks a named tool refuses the run, with the texts docs/run-lifecycle.md gives.
// The tools it checks are those the model is offered first (a facade, when the config
// offers the group as one, counts with its children).
func (s *Service) required(ctx context.Context, field string, rq Requirement) ([]tool.Tool, error) {
	ts, err := s.groupTools(ctx, rq.Role)
	if err != nil {
		why := fmt.Sprintf("No tool group matching role '%s'", rq.Role)
		if !errors.Is(err, router.ErrUnknownGroup) {
			why = err.Error()
		}
		return nil, fieldErr(field, router.ErrUnknownGroup, "Required tool group with role='%s' could not be resolved: %s", rq.Role, why)
	}
	names := groupToolNames(ts)
	switch {
	case len(names) == 0 && len(rq.Tools) == 0:
		return nil, fieldErr(field, ErrRequiredMissing, "Required tool group with role='%s' has no tools", rq.Role)
	case len(names) == 0:
		return nil, fieldErr(field+".tools", ErrRequiredMissing, "Required tool group with role='%s' has no tools; required: [%s]", rq.Role, strings.Join(rq.Tools, ", "))
	case len(rq.Tools) == 0:
		return ts, nil
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

// groupTools are the tools a group offers a run: those it holds (see groupSource),
// offered as the config says (flat, as one facade, or as a reference).
func (s *Service) groupTools(ctx context.Context, role string) ([]tool.Tool, error) {
	ts, desc, notes, err := s.groupSource(ctx, role)
	if err != nil {
		return nil, err
	}
	gc := s.cfg.Groups[role]
	return s.groupFacade(role, cmp.Or(gc.Description, desc), cmp.Or(gc.UsageNotes, notes), ts), nil
}

// groupSource is what a group holds, with its description and usage notes: a config
// group's included tools, else what serves the role (see served).
func (s *Service) groupSource(ctx context.Context, role string) ([]tool.Tool, string, string, error) {
	gc := s.cfg.Groups[role]
	if len(gc.Include) == 0 {
		return s.served(ctx, role)
	}
	var out []tool.Tool
	seen := map[string]bool{}
	var unserved []string
	sources := map[string][]tool.Tool{}
	for _, p := range gc.Include {
		src, glob, _ := strings.Cut(p, "/")
		ts, ok := sources[src]
		if !ok {
			var err error
			if ts, _, _, err = s.served(ctx, src); err != nil {
				unserved = append(unserved, src)
			}
			// A pattern names the tools a group serves, inside its facades too.
			ts = flatten(ts)
			sources[src] = ts
		}
		for _, t := range ts {
			name := t.Definition().Name
			if ok, _ := path.Match(glob, name); ok && !seen[name] && !excluded(gc.Exclude, src, name) {
				seen[name] = true
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 && len(unserved) > 0 {
		return nil, "", "", fmt.Errorf("none of the groups it includes is served (%s)", strings.Join(slices.Compact(unserved), ", "))
	}
	return out, gc.Description, gc.UsageNotes, nil
}

// optionalGroups hands addOf the tools of each of the request's groups (but those a run
// taken over started without): a group that is not served, or has no tools, is not an
// error but a warning, and the run goes on without it.
func (s *Service) optionalGroups(ctx context.Context, req Request, addOf func(role string, ts []tool.Tool)) []Warning {
	var warnings []Warning
	for i, g := range req.Groups {
		if slices.Contains(req.Without, g) {
			continue // a run taken over goes on without what it started without
		}
		ts, err := s.groupTools(ctx, g)
		if err != nil {
			why := fmt.Sprintf("No tool group matching role '%s': no worker serves it (known groups: [%s])", g, strings.Join(s.groupRoles(), ", "))
			if !errors.Is(err, router.ErrUnknownGroup) {
				why = fmt.Sprintf("Tool group with role '%s' is not available: %v", g, err)
			}
			warnings = append(warnings, Warning{Field: indexed("tool_groups", i), Message: why + "; the run goes on without it", Role: g})
			continue
		}
		if len(ts) == 0 {
			warnings = append(warnings, Warning{Field: indexed("tool_groups", i), Message: fmt.Sprintf("Tool group with role '%s' has no tools; the run goes on without it", g), Role: g})
		}
		addOf(g, ts)
	}
	return warnings
}

// excluded reports whether "<src>/<name>" matches one of the exclude patterns.
func excluded(patterns []string, src, name string) bool {
	for _, p := range patterns {
		psrc, glob, _ := strings.Cut(p, "/")
		if ok, _ := path.Match(glob, name); ok && psrc == src {
			return true
		}
	}
	return false
}

// served is what serves a role: a built-in group, an MCP group (which connects on the
// first run that asks for it), or the workers that registered the group.
func (s *Service) served(ctx context.Context, role string) ([]tool.Tool, string, string, error) {
	if ts, ok := process.GroupTools(role, s.formatter); ok {
		return ts, process.Groups[role], "", nil
	}
	if g, ok := s.local[role]; ok {
		return slices.Clone(g.tools), g.description, g.notes, nil
	}
	if g, ok := s.mcp[role]; ok {
		ts, err := g.Tools(ctx)
		return ts, "", "", err
	}
	info, ts, err := s.router.Group(role)
	if err != nil {
		return nil, "", "", err
	}
	return ts, info.GetDescription(), info.GetUsageNotes(), nil
}

// Catalog is the mesh's tools as a run would be offered them, every group together: the
// groups workers serve, the MCP groups (which this connects) and the config's own; not
// the built-in groups, which need a run. The first tool of a name wins.
func (s *Service) Catalog(ctx context.Context) []tool.Tool {
	return s.CatalogFor(ctx, "")
}

// CatalogFor is Catalog as tenant may use it: only its groups, each tool refusing a call
// past the tenant's budget (tenants.<name>.tool_calls_per_minute); with tenant "",
// every group.
func (s *Service) CatalogFor(ctx context.Context, tenant string) []tool.Tool {
	roles := s.groupRoles()
	tg, limited := s.tenantGrant(tenant)
	var out []tool.Tool
	seen := map[string]bool{}
	for _, role := range roles {
		if _, builtin := process.Groups[role]; builtin {
			continue
		}
		if limited && !slices.Contains(tg.Groups, role) {
			continue
		}
		ts, err := s.groupTools(ctx, role)
		if err != nil {
			continue
		}
		for _, t := range ts {
			if name := t.Definition().Name; !seen[name] && (!limited || tg.Allows(role, name)) {
				seen[name] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// TenantView is what a caller of tenant outside a run (an MCP client) gets: wrap, which
// every tool it is offered goes through (nil for a worker's tool outside the tenant's
// grant, which is not offered; a call of a group outside the tenant's, or past its
// tool-call budget, is refused before it leaves), and the context entries that
// override the caller's own (the verified tenant as tenant_id). Without a tenant, wrap
// changes nothing and the entries are empty.
func (s *Service) TenantView(tenant string) (wrap func(tool.Tool) tool.Tool, fixed toolctx.Context) {
	tg, limited := s.tenantGrant(tenant)
	if !limited {
		return func(t tool.Tool) tool.Tool { return t }, toolctx.Context{}
	}
	grant := toolcall.Pipeline{s.grantLayer(tenant, tg)}
	return func(t tool.Tool) tool.Tool {
		if role, served := groupOf(t); served && !tg.Allows(role, t.Definition().Name) {
			return nil // a facade's child outside the grant is not offered
		}
		return grant.Wrap(t)
	}, toolctx.MustOf(TenantKey, tenant)
}

// GroupTools are the tools a group of the config's own, an MCP group or an in-process
// group offers (listing them connects the MCP server); false for another role.
func (s *Service) GroupTools(ctx context.Context, role string) ([]tool.Tool, bool, error) {
	gc, configured := s.cfg.Groups[role]
	_, isMCP := s.mcp[role]
	if _, isLocal := s.local[role]; !isMCP && !isLocal && (!configured || len(gc.Include) == 0) {
		return nil, false, nil
	}
	ts, err := s.groupTools(ctx, role)
	return ts, true, err
}

// Decorate runs a tool's calls through the config's layers of the call pipeline
// (decorators.Chain), as a run's calls are.
func (s *Service) Decorate(t tool.Tool) tool.Tool { return s.chain.Decorate(t) }

// Listing is a group the orchestrator's config or its MCP servers make, as ListToolGroups
// shows it: Source says where its tools come from; Tools are its tools' names, those of
// an MCP server only once it is connected.
type Listing struct {
	Role, Description, UsageNotes, Source string
	Tools                                 []string
	// Provider, Version and Permissions are what the config says of the group
	// (groups.<role>.provider, .version, .permissions); an MCP group's provider is its
	// server's name unless the config says otherwise.
	Provider, Version string
	Permissions       []string
}

// Listings describes the config's own groups and the MCP groups, by role, without
// connecting any MCP server.
func (s *Service) Listings() []Listing {
	var out []Listing
	for _, role := range sortedKeys(s.local) {
		if _, narrowed := s.cfg.Groups[role]; narrowed {
			continue // the config's view of it, below
		}
		g := s.local[role]
		l := Listing{Role: role, Description: g.description, UsageNotes: g.notes, Source: "in-process", Tools: toolNames(g.tools)}
		slices.Sort(l.Tools)
		out = append(out, l)
	}
	for _, role := range sortedKeys(s.cfg.Groups) {
		gc := s.cfg.Groups[role]
		l := Listing{Role: role, Description: gc.Description, UsageNotes: gc.UsageNotes,
			Provider: gc.Provider, Version: gc.Version, Permissions: slices.Clone(gc.Permissions)}
		switch g, isMCP := s.mcp[role]; {
		case isMCP:
			l.Source = "mcp:" + gc.MCP.Server
			l.Provider = cmp.Or(l.Provider, "MCP server "+gc.MCP.Server)
			if g.Connected() {
				ts, _ := g.Tools(context.Background())
				l.Tools = toolNames(ts)
			}
		case s.local[role].tools != nil:
			l.Source = "in-process"
			l.Description, l.UsageNotes = cmp.Or(l.Description, s.local[role].description), cmp.Or(l.UsageNotes, s.local[role].notes)
			l.Tools = toolNames(s.local[role].tools)
		case len(gc.Include) > 0:
			l.Source = "config: " + strings.Join(gc.Include, ", ")
			if len(gc.Exclude) > 0 {
				l.Source += " (except " + strings.Join(gc.Exclude, ", ") + ")"
			}
			if s.includesConnectedOnly(gc) {
				ts, _, _, _ := s.groupSource(context.Background(), role)
				l.Tools = toolNames(ts)
			}
		default:
			continue
		}
		slices.Sort(l.Tools)
		out = append(out, l)
	}
	return out
}

// includesConnectedOnly reports whether listing a config group's tools connects no MCP
// server: every MCP group it includes is connected already.
func (s *Service) includesConnectedOnly(gc config.Group) bool {
	for _, p := range gc.Include {
		src, _, _ := strings.Cut(p, "/")
		if g, ok := s.mcp[src]; ok && !g.Connected() {
			return false
		}
	}
	return true
}

// referenceNotes is what the groups offered as references add to the system prompt: each
// one's description and usage notes, in the order the run names them.
func (s *Service) referenceNotes(ctx context.Context, roles []string) string {
	var b strings.Builder
	for _, role := range roles {
		gc := s.cfg.Groups[role]
		if gc.Offer != "reference" {
			continue
		}
		_, desc, notes, err := s.groupSource(ctx, role)
		if err != nil {
			continue
		}
		desc, notes = cmp.Or(gc.Description, desc), cmp.Or(gc.UsageNotes, notes)
		if strings.TrimSpace(notes) == "" && strings.TrimSpace(desc) == "" {
			continue
		}
		fmt.Fprintf(&b, "\n\nTools of '%s'", role)
		if desc != "" {
			fmt.Fprintf(&b, " (%s)", desc)
		}
		b.WriteString(":")
		if notes != "" {
			b.WriteString("\n" + notes)
		}
	}
	return b.String()
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// groupFacade offers a group as one facade when the config says so.
func (s *Service) groupFacade(role, description, usageNotes string, ts []tool.Tool) []tool.Tool {
	gc := s.cfg.Groups[role]
	if gc.Offer == "flat" {
		// Asked for in so many words: each tool, the workers' facades opened.
		ts = flatten(ts)
	}
	if len(gc.Facades) > 0 {
		ts = subFacades(gc.Facades, ts)
	}
	f := gc.Facade
	if f == nil && gc.Offer == "facade" {
		f = &config.GroupFacade{}
	}
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

// flatten replaces each facade of ts with the tools inside it, at any depth.
func flatten(ts []tool.Tool) []tool.Tool {
	var out []tool.Tool
	for _, t := range ts {
		if f, ok := tool.As[tool.Facade](t); ok {
			out = append(out, flatten(f.Children())...)
			continue
		}
		out = append(out, t)
	}
	return out
}

// subFacades puts the tools each spec takes behind a facade of its own (a tool goes to
// the first spec that takes it); the tools none takes stay, after the facades.
func subFacades(specs []config.SubFacade, ts []tool.Tool) []tool.Tool {
	taken := make([]bool, len(ts))
	var out []tool.Tool
	for _, spec := range specs {
		var res []*regexp.Regexp
		for _, m := range spec.Matching {
			res = append(res, regexp.MustCompile(m)) // validated with the config
		}
		var kids []tool.Tool
		for i, t := range ts {
			name := t.Definition().Name
			if !taken[i] && (slices.Contains(spec.Tools, name) || slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(name) })) {
				taken[i] = true
				kids = append(kids, t)
			}
		}
		if len(kids) > 0 {
			out = append(out, tool.Of(spec.Name, spec.Description, kids, tool.UsageNotes(spec.UsageNotes)))
		}
	}
	for i, t := range ts {
		if !taken[i] {
			out = append(out, t)
		}
	}
	return out
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
	for role := range s.local {
		roles = append(roles, role)
	}
	for role, gc := range s.cfg.Groups {
		if len(gc.Include) > 0 && !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
	}
	slices.Sort(roles)
	return roles
}

// TenantKey is the context key that carries a run's verified tenant to its workers.
const TenantKey = "tenant_id"

// tenantGrant is what tenant may use (its groups and tools) and its bounds; false when
// it has no grant (no tenancy, or a tenant the config does not list).
func (s *Service) tenantGrant(tenant string) (config.Tenant, bool) {
	if tenant == "" {
		return config.Tenant{}, false
	}
	t, ok := s.cfg.Tenants[tenant]
	return t, ok
}

// checkGrant refuses a request that names a tool group or tool outside the tenant's
// grant (the orchestrator's own groups are everyone's).
func (s *Service) checkGrant(ctx context.Context, req Request, tg config.Tenant) error {
	allowed := tg.Groups
	ok := func(role string) bool {
		_, builtin := process.Groups[role]
		return builtin || slices.Contains(allowed, role)
	}
	for i, rq := range req.Required {
		if !ok(rq.Role) {
			return fieldErr(indexed("required_tool_groups", i), ErrPermission, "tenant %q may not use tool group %q (its groups: [%s])", req.Tenant, rq.Role, strings.Join(allowed, ", "))
		}
		if _, builtin := process.Groups[rq.Role]; builtin {
			continue
		}
		for j, n := range rq.Tools {
			if !tg.Allows(rq.Role, n) {
				return fieldErr(fmt.Sprintf("%s.tools[%d]", indexed("required_tool_groups", i), j), ErrPermission,
					"tenant %q may not use tool %q (its tools: [%s])", req.Tenant, n, strings.Join(tg.Tools, ", "))
			}
		}
	}
	for i, g := range req.Groups {
		if !ok(g) {
			return fieldErr(indexed("tool_groups", i), ErrPermission, "tenant %q may not use tool group %q (its groups: [%s])", req.Tenant, g, strings.Join(allowed, ", "))
		}
	}
	for i, n := range req.Tools {
		if role, served := s.groupOfRequested(ctx, n); served && !ok(role) {
			return fieldErr(indexed("tools", i), ErrPermission, "tenant %q may not use tool %q, of group %q (its groups: [%s])", req.Tenant, n, role, strings.Join(allowed, ", "))
		} else if served && !tg.Allows(role, n) {
			return fieldErr(indexed("tools", i), ErrPermission, "tenant %q may not use tool %q (its tools: [%s])", req.Tenant, n, strings.Join(tg.Tools, ", "))
		}
	}
	return nil
}

// namedTool is the tool of a name a run names in tools: one of an in-process group, else
// a worker's (a worker cannot take an in-process tool's place by registering its name).
func (s *Service) namedTool(name string) (tool.Tool, error) {
	for _, role := range sortedKeys(s.local) {
		if t, ok := findTool(s.local[role].tools, name); ok {
			return t, nil
		}
	}
	return s.router.Tool(name)
}

// requestedTool is the tool of a name a run names in tools: one of an in-process group
// or a worker's (namedTool), else one of the built-in groups, else an MCP server's
// (connecting its group if need be), else one a group of the config's own offers (a
// facade it makes, a tool inside one).
func (s *Service) requestedTool(ctx context.Context, name string) (tool.Tool, error) {
	if t, ok := (catalog{s: s, ctx: ctx}).served(name); ok {
		return t, nil
	}
	for _, role := range sortedKeys(s.mcp) {
		ts, terr := s.mcp[role].Tools(ctx)
		if terr != nil {
			continue // a server that cannot be reached serves nothing now
		}
		if t, ok := findTool(ts, name); ok {
			return t, nil
		}
	}
	for _, role := range sortedKeys(s.cfg.Groups) {
		gc := s.cfg.Groups[role]
		if len(gc.Include) == 0 && gc.Facade == nil && gc.Offer != "facade" && len(gc.Facades) == 0 {
			continue // what serves the role offers its tools as they are: found above
		}
		ts, gerr := s.groupTools(ctx, role)
		if gerr != nil {
			continue
		}
		if t, ok := findTool(ts, name); ok {
			return t, nil
		}
	}
	return nil, router.ErrUnknownTool
}

// groupOfRequested is the group of a tool a run names in tools (requestedTool), when a
// worker, an MCP server or an in-process group serves it.
func (s *Service) groupOfRequested(ctx context.Context, name string) (string, bool) {
	if role, ok := s.groupOfName(name); ok {
		return role, true
	}
	t, err := s.requestedTool(ctx, name)
	if err != nil {
		return "", false
	}
	return groupOf(t)
}

// groupOfName is the group of a tool an in-process group or a worker serves.
func (s *Service) groupOfName(name string) (string, bool) {
	for _, role := range sortedKeys(s.local) {
		if _, ok := findTool(s.local[role].tools, name); ok {
			return role, true
		}
	}
	return s.router.GroupOf(name)
}

// groupOf is the group of a worker's or an MCP server's tool, seen through its
// wrappers; false for the orchestrator's own tools (built-in groups, a facade's guide and
// context tools, agentic tools).
func groupOf(t tool.Tool) (string, bool) {
	g, ok := tool.As[decorators.Grouped](t)
	if !ok {
		return "", false
	}
	return g.Group(), true
}

// grantLayer refuses, before it leaves, a call of a worker's tool outside the tenant's
// grant (a tool the model names though it was never offered: a name read in a tool
// result, a sub-tool of an agentic tool), and one past the tenant's tool-call budget.
func (s *Service) grantLayer(tenant string, tg config.Tenant) toolcall.Layer {
	return toolcall.Layer{Name: LayerGrant, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		role, served := groupOf(t)
		if !served {
			return nil
		}
		name := t.Definition().Name
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				if answeredFromJournal(ctx) {
					// A resumed run's call the journal answers: it passed before the crash,
					// and nothing leaves now; refused now, the model would read another
					// result than it did. Marked, so that it is never sent unchecked.
					return next(context.WithValue(ctx, toolinternal.ReplayOnlyKey{}, true), c)
				}
				if !tg.Allows(role, name) {
					s.log.WarnContext(ctx, "tool call refused: outside the tenant's grant", "event", "audit", "tenant", tenant, "tool", name, "group", role)
					return tool.ErrorWithCode(tool.CodeUnknownTool, fmt.Sprintf("Tool '%s' is not available to this run. Use only the tools you were given.", name)), nil
				}
				if wait, limit := s.tenantCall(tenant); wait > 0 {
					return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("Tool '%s' was not called: this run's tenant has made its %d tool calls of the last minute. Try again in %s.",
						name, limit, wait.Round(time.Second))), nil
				}
				return next(ctx, c)
			}
		}
	}}
}

// answeredFromJournal reports whether the run's journal holds the outcome of the call of
// ctx, which a resumed run replays rather than send.
func answeredFromJournal(ctx context.Context) bool {
	j, ok := toolinternal.JournalFrom(ctx).(*journal)
	if !ok {
		return false
	}
	info, _ := tool.CallInfoFrom(ctx)
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok = j.outcomes[callKey(info)]
	return ok
}

// tenantCall takes a tool call from tenant's budget (tenants.<name>.
// tool_calls_per_minute): zero when it may go now, else how long until it may, and the
// bound.
func (s *Service) tenantCall(tenant string) (time.Duration, int) {
	n := s.cfg.Tenants[tenant].ToolCallsPerMinute
	if n <= 0 {
		return 0, 0
	}
	r := s.perMinute(&s.rates, tenant, n).Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return max(d, time.Second), n
	}
	return 0, n
}

// perMinute is tenant's bucket of n a minute in *m, made on first use.
func (s *Service) perMinute(m *map[string]*rate.Limiter, tenant string, n int) *rate.Limiter {
	s.ratesMu.Lock()
	defer s.ratesMu.Unlock()
	lim, ok := (*m)[tenant]
	if !ok {
		if *m == nil {
			*m = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(rate.Limit(float64(n)/60), n)
		(*m)[tenant] = lim
	}
	return lim
}
