package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/deep"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// orchestratorServer serves OrchestratorService.
type orchestratorServer struct {
	toolpb.UnimplementedOrchestratorServiceServer
	s *Server
}

// Run validates the request, runs it and streams its events. A detached run goes on when
// the client goes away.
//
// The stream's goroutine lives as long as the run: what needs a deep stack (checking the
// request, turning it into the run service's) runs off it (deep.Run), so that it stays
// small while the run waits for its model.
//
// Run's frame stays on the stream's stack while an attached run waits: it is kept small,
// the detached run's work in a function of its own.
func (o *orchestratorServer) Run(req *toolpb.RunRequest, stream toolpb.OrchestratorService_RunServer) error {
	if req.GetDetached() {
		return o.runDetached(req, stream)
	}
	a := &attached{o: o, req: req, em: emitter{stream: stream}}
	_, err := o.s.runs.RunAccepted(stream.Context(), a.accept, a.em.observe)
	if a.refused != nil {
		return a.refused
	}
	return o.s.runError(err)
}

// attached is what an attached run's accept needs.
type attached struct {
	o       *orchestratorServer
	req     *toolpb.RunRequest
	em      emitter
	refused error
}

func (a *attached) accept() (run.Request, error) {
	rr, err := a.o.accept(a.em.stream.Context(), a.req)
	a.refused = err
	return rr, err
}

// runDetached runs a run that goes on when its client goes away.
func (o *orchestratorServer) runDetached(req *toolpb.RunRequest, stream toolpb.OrchestratorService_RunServer) error {
	em := &emitter{stream: stream}
	var rr run.Request
	var refused error
	deep.Run(func() { rr, refused = o.accept(stream.Context(), req) })
	if refused != nil {
		return refused
	}
	done := make(chan error, 1)
	go func() {
		_, err := o.s.runs.Run(context.WithoutCancel(stream.Context()), rr, em.observe)
		done <- err
	}()
	select {
	case err := <-done:
		return o.s.runError(err)
	case <-stream.Context().Done():
		em.detach() // the run goes on; it sends no more to this stream
		return stream.Context().Err()
	}
}

// accept checks a Run request and turns it into the run service's, or returns the
// status it is refused with.
func (o *orchestratorServer) accept(ctx context.Context, req *toolpb.RunRequest) (run.Request, error) {
	if fe := o.s.overTenantSize(ctx, req); fe != nil {
		return run.Request{}, fe.status()
	}
	if fe := validateRun(req); fe != nil {
		return run.Request{}, fe.status()
	}
	// A run that arrives while the orchestrator warms up waits for the workers it knew.
	if err := o.s.awaitReady(ctx); err != nil {
		return run.Request{}, statusError(toolpb.ErrorReason_ERROR_REASON_CANCELLED, "the client went away while the orchestrator warmed up", nil)
	}
	rr := runRequest(req)
	rr.Tenant = tenantOf(ctx)
	rr.Caller = runCaller(ctx)
	if rr.Tenant != "" {
		if rr.ID == "" {
			rr.ID = run.NewID()
		}
		rr.ID = runKey(rr.Tenant, rr.ID)
	}
	if o.s.journaled {
		wire, err := protojson.Marshal(req)
		if err != nil {
			return run.Request{}, statusError(toolpb.ErrorReason_ERROR_REASON_INTERNAL, "the request cannot be journaled: "+err.Error(), nil)
		}
		rr.Wire = wire
	}
	return rr, nil
}

// runError maps the error a run was refused or ended with to its status (nil for none).
// A run that started had its error event sent already, as its last event.
func (s *Server) runError(err error) error {
	var fe *run.FieldError
	var re *run.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return (&fieldError{reason: classify(fe.Kind), field: fe.Field, desc: fe.Problem}).status()
	case errors.Is(err, run.ErrExists):
		return statusError(toolpb.ErrorReason_ERROR_REASON_RUN_EXISTS, "run_id: "+err.Error(), map[string]string{"field": "run_id"})
	case errors.Is(err, run.ErrFull):
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_OVERLOADED, Message: "the orchestrator is running its maximum of runs; retry later",
			RetryAfter: run.RetryDelay(err)}.Err()
	case errors.Is(err, run.ErrTenantFull):
		return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_OVERLOADED, Message: err.Error() + "; retry later", RetryAfter: run.RetryDelay(err)}.Err()
	case errors.Is(err, run.ErrClosed):
		return statusError(toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN, "the orchestrator is shutting down", nil)
	case errors.Is(err, run.ErrUnavailable):
		return statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	case errors.As(err, &re) && errors.Is(err, run.ErrResumable):
		// No error event: the run is not over. The client watches it again.
		reason := toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE
		if errors.Is(err, run.ErrShutdown) {
			reason = toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN
		}
		return statusError(reason, err.Error()+"; watch it with WatchRun after the last sequence you saw", map[string]string{"run_id": clientRunID(re.RunID), "resume": "WatchRun"})
	case errors.As(err, &re):
		runErr := runErrorProto(re.Err)
		return statusError(runErr.GetReason(), runErr.GetMessage(), map[string]string{"run_id": clientRunID(re.RunID)})
	}
	return statusError(toolpb.ErrorReason_ERROR_REASON_INTERNAL, err.Error(), nil)
}

// runErrorProto describes the error a run ended with.
func runErrorProto(err error) *toolpb.RunError {
	reason := classify(err)
	return &toolpb.RunError{Code: code.Code(wire.Reasons[reason].Code), Message: err.Error(), Reason: reason}
}

// runRequest is the run service's view of a validated request.
func runRequest(req *toolpb.RunRequest) run.Request {
	l, o := req.GetLimits(), req.GetLlm()
	r := run.Request{
		ID: req.GetRunId(), System: req.GetSystemPrompt(), Messages: messages(req),
		Groups: req.GetToolGroups(), Tools: req.GetTools(),
		Context: toolctx.FromMap(req.GetContext()), Interaction: toolctx.FromMap(req.GetInteractionContext()),
		Model: o.GetModel(), Role: o.GetRole(), MaxOutputTokens: int(o.GetMaxOutputTokens()),
		MaxIterations: int(l.GetMaxIterations()), MaxParallel: int(l.GetMaxParallelToolCalls()),
		MaxTokens: l.GetMaxTokens(), MaxCostUSD: l.GetMaxCostUsd(), OutputSchema: req.GetOutputSchemaJson(),
		MaxActions: int(l.GetMaxActions()), StreamText: req.GetStreamText(),
		Agentic:         agenticSpecs(req.GetAgenticTools()),
		ChainingSources: chainingSpecs(req.GetChainingSources()),
		ChainFromAny:    req.GetChainFromAny(),
		Agent:           req.GetAgent(),
		Goal:            req.GetGoal(),
		ToolNames:       req.GetToolNames(),
		ExcludeTools:    req.GetExcludeTools(),
	}
	for _, rq := range req.GetRequiredToolGroups() {
		r.Required = append(r.Required, run.Requirement{Role: rq.GetRole(), Tools: rq.GetTools()})
	}
	for _, sp := range req.GetArtifactSinks() {
		r.Sinks = append(r.Sinks, decorators.RuleSpec{Tools: sp.GetTools(), Groups: sp.GetToolGroups(), Sinks: sp.GetSinks(),
			FilterSpec: decorators.FilterSpec{TypeName: sp.GetTypeName(), When: sp.GetWhen(), Transform: sp.GetTransform(), TransformType: sp.GetTransformTypeName()}})
	}
	if t := l.GetTimeout(); t != nil {
		r.Timeout = t.AsDuration()
	}
	if o != nil && o.Temperature != nil {
		t := o.GetTemperature()
		r.Temperature = &t
	}
	return r
}

// messages builds the loop's conversation: earlier messages, then the prompt.
func messages(req *toolpb.RunRequest) []llm.Message {
	out := make([]llm.Message, 0, len(req.GetMessages())+1)
	for _, m := range req.GetMessages() {
		role := llm.RoleUser
		switch m.GetRole() {
		case toolpb.Role_ROLE_SYSTEM:
			role = llm.RoleSystem
		case toolpb.Role_ROLE_ASSISTANT:
			role = llm.RoleAssistant
		}
		out = append(out, llm.Message{Role: role, Text: m.GetText()})
	}
	if req.GetPrompt() != "" && !blank(req.GetPrompt()) {
		out = append(out, llm.Message{Role: llm.RoleUser, Text: req.GetPrompt()})
	}
	return out
}

// ListTools lists the registered tools.
func (o *orchestratorServer) ListTools(ctx context.Context, req *toolpb.ListToolsRequest) (*toolpb.ListToolsResponse, error) {
	visible := o.s.visible(ctx)
	for i, g := range req.GetToolGroups() {
		if !visible(g) {
			return nil, (&fieldError{reason: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED, field: indexed("tool_groups", i), desc: "tool group " + quote(g) + " is not granted to your tenant"}).status()
		}
	}
	resp, err := o.listTools(ctx, req)
	if resp != nil {
		usable, tenant, caller := o.s.usable(ctx), tenantOf(ctx), runCaller(ctx)
		resp.Tools = slices.DeleteFunc(resp.Tools, func(t *toolpb.ToolInfo) bool {
			role, name := t.GetGroup(), t.GetDefinition().GetName()
			return !usable(role, name) || !o.s.runs.MayCall(role, name, tenant, caller)
		})
	}
	return resp, err
}

func (o *orchestratorServer) listTools(ctx context.Context, req *toolpb.ListToolsRequest) (*toolpb.ListToolsResponse, error) {
	if fe := validateListTools(req); fe != nil {
		return nil, fe.status()
	}
	var builtin []*toolpb.ToolInfo
	var served []string
	for i, g := range req.GetToolGroups() {
		if ts, ok := process.GroupTools(g, nil); ok {
			builtin = append(builtin, builtinInfos(g, ts)...)
			continue
		}
		if ts, ok, err := o.s.runs.GroupTools(ctx, g); ok {
			if err != nil {
				return nil, (&fieldError{reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP, field: indexed("tool_groups", i), desc: "tool group " + quote(g) + " is not available: " + err.Error()}).status()
			}
			builtin = append(builtin, builtinInfos(g, ts)...)
			continue
		}
		served = append(served, g)
		if _, _, err := o.s.router.Group(g); err != nil {
			return nil, (&fieldError{reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP, field: indexed("tool_groups", i), desc: "no worker serves tool group " + quote(g)}).status()
		}
	}
	if len(req.GetToolGroups()) == 0 {
		for _, g := range builtinRoles() {
			ts, _ := process.GroupTools(g, nil)
			builtin = append(builtin, builtinInfos(g, ts)...)
		}
	} else if len(served) == 0 {
		return &toolpb.ListToolsResponse{Tools: sortInfos(builtin)}, nil
	}
	return &toolpb.ListToolsResponse{Tools: sortInfos(append(o.s.router.ListTools(served...), builtin...))}, nil
}

// builtinRoles are the roles of the orchestrator's own groups, sorted.
func builtinRoles() []string {
	return slices.Sorted(maps.Keys(process.Groups))
}

// builtinInfos describes the top-level tools of a built-in group; no worker serves them.
func builtinInfos(role string, ts []tool.Tool) []*toolpb.ToolInfo {
	out := make([]*toolpb.ToolInfo, 0, len(ts))
	for _, t := range ts {
		def, meta := t.Definition(), t.Metadata()
		out = append(out, &toolpb.ToolInfo{Definition: wire.DefinitionToProto(def, meta), Group: role, ContentHash: wire.Hash(def, meta)})
	}
	return out
}

func sortInfos(infos []*toolpb.ToolInfo) []*toolpb.ToolInfo {
	slices.SortFunc(infos, func(a, b *toolpb.ToolInfo) int {
		return strings.Compare(a.GetDefinition().GetName(), b.GetDefinition().GetName())
	})
	return infos
}

// ListToolGroups lists the tool groups: those workers serve, and the orchestrator's own
// (agent_process, blackboard, communication), which no worker serves.
func (o *orchestratorServer) ListToolGroups(ctx context.Context, _ *toolpb.ListToolGroupsRequest) (*toolpb.ListToolGroupsResponse, error) {
	visible := o.s.visible(ctx)
	groups := o.s.router.ListGroups()
	for _, g := range groups {
		g.Source = "workers"
	}
	for _, l := range o.s.runs.Listings() {
		// A config group of a worker group's own role narrows it: the listing shows the
		// config's view.
		groups = slices.DeleteFunc(groups, func(g *toolpb.ToolGroupStatus) bool { return g.GetGroup().GetRole() == l.Role })
		info := &toolpb.ToolGroupInfo{Role: l.Role, Description: l.Description, UsageNotes: l.UsageNotes, Provider: l.Provider, Version: l.Version}
		for _, p := range l.Permissions {
			info.Permissions = append(info.Permissions, toolpb.Permission(toolpb.Permission_value["PERMISSION_"+strings.ToUpper(p)]))
		}
		groups = append(groups, &toolpb.ToolGroupStatus{Group: info, Tools: l.Tools, Source: l.Source})
	}
	for _, role := range builtinRoles() {
		if slices.ContainsFunc(groups, func(g *toolpb.ToolGroupStatus) bool { return g.GetGroup().GetRole() == role }) {
			continue
		}
		ts, _ := process.GroupTools(role, nil)
		var names []string
		for _, t := range ts {
			names = append(names, t.Definition().Name)
		}
		slices.Sort(names)
		groups = append(groups, &toolpb.ToolGroupStatus{Group: &toolpb.ToolGroupInfo{Role: role, Description: process.Groups[role], Provider: "toolmesh orchestrator"}, Tools: names, Source: "orchestrator"})
	}
	groups = slices.DeleteFunc(groups, func(g *toolpb.ToolGroupStatus) bool { return !visible(g.GetGroup().GetRole()) })
	slices.SortFunc(groups, func(a, b *toolpb.ToolGroupStatus) int {
		return strings.Compare(a.GetGroup().GetRole(), b.GetGroup().GetRole())
	})
	return &toolpb.ListToolGroupsResponse{Groups: groups}, nil
}

// ListWorkers lists the registered workers; a tenant's caller sees only the workers of
// its groups, and of each only those groups.
func (o *orchestratorServer) ListWorkers(ctx context.Context, _ *toolpb.ListWorkersRequest) (*toolpb.ListWorkersResponse, error) {
	ws := o.s.router.ListWorkers()
	if t, ok := o.s.cfg.Tenants[tenantOf(ctx)]; ok {
		ws = slices.DeleteFunc(ws, func(w *toolpb.WorkerStatus) bool {
			w.Groups = slices.DeleteFunc(w.Groups, func(g string) bool { return !slices.Contains(t.Groups, g) })
			return len(w.Groups) == 0
		})
	}
	return &toolpb.ListWorkersResponse{Workers: ws}, nil
}

// GetRun reports a run.
func (o *orchestratorServer) GetRun(ctx context.Context, req *toolpb.GetRunRequest) (*toolpb.GetRunResponse, error) {
	if fe := checkRunID("run_id", req.GetRunId(), true); fe != nil {
		return nil, fe.status()
	}
	key, err := o.s.resolveRun(ctx, req.GetRunId())
	if err != nil {
		return nil, err
	}
	snap, err := o.s.runs.Get(key)
	if errors.Is(err, run.ErrUnavailable) {
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	}
	if err != nil {
		return nil, notFound(err).status()
	}
	resp := snapshotProto(snap)
	resp.Tenant = o.s.keyTenant(key)
	if resp.GetState() == toolpb.RunState_RUN_STATE_RUNNING {
		// What it waits for from a person; a journal that cannot say leaves it out.
		waits, _ := o.s.runs.Waiting(ctx, key)
		for _, w := range waits {
			resp.Waiting = append(resp.Waiting, approvalRequestedProto(w))
		}
	}
	return resp, nil
}

// ListTenants reports the configured tenants' use of their quotas here; a caller of a
// tenant sees its own.
func (o *orchestratorServer) ListTenants(ctx context.Context, _ *toolpb.ListTenantsRequest) (*toolpb.ListTenantsResponse, error) {
	caller := tenantOf(ctx)
	resp := &toolpb.ListTenantsResponse{}
	for _, u := range o.s.runs.Tenants() {
		if caller != "" && u.Tenant != caller {
			continue
		}
		resp.Tenants = append(resp.Tenants, &toolpb.TenantUsage{Tenant: u.Tenant, RunningRuns: int32(u.Running),
			MaxConcurrentRuns: int32(u.MaxRunning), ToolCallsPerMinute: int32(u.ToolCallsPerMinute), ToolCallsAvailable: u.ToolCallsAvailable,
			ModelCallsPerMinute: int32(u.ModelCallsPerMinute), ModelCallsAvailable: u.ModelCallsAvailable})
	}
	return resp, nil
}

// CancelRun cancels a running run; cancelling a finished run reports its final state.
func (o *orchestratorServer) CancelRun(ctx context.Context, req *toolpb.CancelRunRequest) (*toolpb.CancelRunResponse, error) {
	if fe := validateCancel(req); fe != nil {
		return nil, fe.status()
	}
	key, err := o.s.resolveRun(ctx, req.GetRunId())
	if err != nil {
		return nil, err
	}
	st, err := o.s.runs.Cancel(ctx, key, req.GetReason())
	switch {
	case errors.Is(err, run.ErrUnavailable):
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	case err != nil:
		return nil, notFound(err).status()
	}
	return &toolpb.CancelRunResponse{State: stateProto(st)}, nil
}

func notFound(err error) *fieldError {
	return &fieldError{reason: toolpb.ErrorReason_ERROR_REASON_RUN_NOT_FOUND, field: "run_id", desc: err.Error()}
}

func snapshotProto(s run.Snapshot) *toolpb.GetRunResponse {
	resp := &toolpb.GetRunResponse{
		RunId: clientRunID(s.ID), State: stateProto(s.State), Iterations: int32(s.Iterations), ToolCalls: int32(s.ToolCalls),
		FinalText: s.FinalText, StartedAt: timestamppb.New(s.Started), TraceId: s.TraceID, Model: s.Model, Agent: s.Agent,
		Usage: &toolpb.Usage{InputTokens: s.Usage.InputTokens, OutputTokens: s.Usage.OutputTokens, CostUsd: s.CostUSD},
	}
	if s.Err != nil {
		resp.Error = runErrorProto(s.Err)
	}
	if !s.Ended.IsZero() {
		resp.EndedAt = timestamppb.New(s.Ended)
	}
	ps := s.Process
	resp.Reason = s.Reason
	// The newest objects and assets that fit the response's budget, in order.
	budget := getRunBudget
	entries := ps.Blackboard.Entries
	objects := make([]*toolpb.BlackboardObject, len(entries))
	first := len(entries)
	for first > 0 {
		o, ok := fitObject(&budget, tool.Binding{Entry: entries[first-1]})
		if !ok {
			break
		}
		first--
		objects[first] = o
	}
	resp.BlackboardOmitted = int32(first)
	for i := first; i < len(entries); i++ {
		if names := ps.Blackboard.NameOf(i); len(names) > 0 {
			objects[i].Name = names[0]
		}
		resp.Blackboard = append(resp.Blackboard, objects[i])
	}
	resp.Budget = &toolpb.Budget{
		MaxCostUsd: ps.Limits.MaxCostUSD, CostUsd: ps.Usage.CostUSD, MaxTokens: ps.Limits.MaxTokens, Tokens: ps.Usage.Tokens(),
		MaxActions: int32(ps.Limits.MaxActions), Actions: int32(ps.Actions()),
	}
	assets := make([]*toolpb.Asset, len(ps.Assets))
	firstAsset := len(ps.Assets)
	for firstAsset > 0 {
		a := ps.Assets[firstAsset-1]
		o, ok := fitObject(&budget, tool.Binding{Entry: a.Entry})
		if !ok {
			break
		}
		firstAsset--
		assets[firstAsset] = &toolpb.Asset{Object: o, Tool: a.Tool, CallId: a.CallID}
	}
	resp.AssetsOmitted = int32(firstAsset)
	resp.Assets = assets[firstAsset:]
	for _, l := range s.Loops {
		resp.Loops = append(resp.Loops, &toolpb.LoopInfo{Scope: scopeProto(l.Scope), Iterations: int32(l.Iterations),
			ToolCalls: int32(l.ToolCalls), Running: l.Running, Error: l.Err})
	}
	return resp
}

// getRunBudget bounds the values (JSON, blobs' data), type names and media types of the
// blackboard objects and assets one GetRun response carries, so that it stays under the
// 4 MiB every message may have (binding names, tool names, call ids and framing take the
// rest).
const getRunBudget = 3 << 20

// fitObject is b as GetRun carries it, when it fits what is left of the budget, which
// it takes from: its type name, media type and value count. A blob whose data does not
// fit goes without it (its media type and size say what it is); an object that does
// not fit even so is not carried (false), nor is any older one.
func fitObject(budget *int, b tool.Binding) (*toolpb.BlackboardObject, bool) {
	o := wire.BindingToProto(b)
	names := len(o.TypeName) + len(o.MediaType)
	switch size := names + len(o.Json) + len(o.Data); {
	case size <= *budget:
		*budget -= size
	case b.Entry.IsBlob() && names <= *budget:
		*budget -= names
		o.Data = nil
	default:
		return nil, false
	}
	return o, true
}

func stateProto(s runlog.State) toolpb.RunState {
	switch s {
	case runlog.StateRunning:
		return toolpb.RunState_RUN_STATE_RUNNING
	case runlog.StateSucceeded:
		return toolpb.RunState_RUN_STATE_SUCCEEDED
	case runlog.StateFailed:
		return toolpb.RunState_RUN_STATE_FAILED
	case runlog.StateCancelled:
		return toolpb.RunState_RUN_STATE_CANCELLED
	case runlog.StateReplanRequested:
		return toolpb.RunState_RUN_STATE_REPLAN_REQUESTED
	case runlog.StateTerminated:
		return toolpb.RunState_RUN_STATE_TERMINATED
	case runlog.StateHeld:
		return toolpb.RunState_RUN_STATE_HELD
	}
	return toolpb.RunState_RUN_STATE_UNSPECIFIED
}
