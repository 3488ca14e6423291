package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// errShutdown is the cause of runs cancelled because the orchestrator stops.
var errShutdown = errors.New("orchestrator shutting down")

// orchestratorServer serves OrchestratorService.
type orchestratorServer struct {
	toolpb.UnimplementedOrchestratorServiceServer
	s *Server
}

// Run validates the request, resolves its tools, runs the loop and streams its events.
func (o *orchestratorServer) Run(req *toolpb.RunRequest, stream toolpb.OrchestratorService_RunServer) error {
	s := o.s
	if fe := validateRun(req); fe != nil {
		return fe.status()
	}
	tools, fe := s.resolveTools(req)
	if fe != nil {
		return fe.status()
	}
	// The interaction level wins over the run level (the seed's merge table).
	bag := toolctx.Effective(toolctx.FromMap(req.GetContext()), toolctx.FromMap(req.GetInteractionContext()))
	if err := (ctxcodec.Codec{MaxBytes: s.cfg.Context.MaxBytes}).Check(bag); err != nil {
		var tl *ctxcodec.TooLargeError
		if errors.As(err, &tl) {
			field := "context"
			if _, ok := req.GetInteractionContext()[tl.LargestKey]; ok {
				field = "interaction_context"
			}
			return invalid(fmt.Sprintf("%s[%q]", field, tl.LargestKey), "%v", err).status()
		}
		return invalid("context", "%v", err).status()
	}
	provider, modelName, mfe := s.chooseModel(req.GetLlm())
	if mfe != nil {
		return mfe.status()
	}
	var outputSchema *loop.OutputSchema
	if js := req.GetOutputSchemaJson(); js != "" {
		var err error
		if outputSchema, err = loop.CompileOutputSchema([]byte(js)); err != nil {
			return invalid("output_schema_json", "%v", err).status()
		}
	}

	runID := req.GetRunId()
	if runID == "" {
		runID = "run_" + randomHex(8)
	}
	timeout := s.cfg.Loop.RunTimeout.D()
	if t := req.GetLimits().GetTimeout(); t != nil && t.AsDuration() > 0 {
		timeout = t.AsDuration()
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()

	r, code := s.runs.start(runID, cancel)
	switch code {
	case startExists:
		return statusError(codes.AlreadyExists, ReasonRunExists, fmt.Sprintf("run_id: a run with id %q already exists", runID), map[string]string{"field": "run_id"})
	case startFull:
		return statusError(codes.ResourceExhausted, ReasonOverloaded, fmt.Sprintf("the orchestrator is running its maximum of %d runs; retry later", s.cfg.Loop.MaxConcurrentRuns), nil)
	case startClosed:
		return statusError(codes.Unavailable, ReasonShuttingDown, "the orchestrator is shutting down", nil)
	}
	defer s.runs.finish(r)

	loopID := "loop_" + randomHex(8)
	ctx, runSpan := s.tel.StartRun(ctx, telemetry.RunAttrs{RunID: runID, LoopID: loopID, Provider: provider.Name(), Model: modelName})
	s.tel.ContextAttributes(runSpan, bag.Map())
	log := s.log.With("run_id", runID)
	em := &emitter{stream: stream, runID: runID}
	maxIter := s.cfg.Loop.MaxIterations
	if n := req.GetLimits().GetMaxIterations(); n > 0 {
		maxIter = int(n)
	}
	maxPar := s.cfg.Loop.MaxParallelToolCalls
	if n := req.GetLimits().GetMaxParallelToolCalls(); n > 0 {
		maxPar = int(n)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Definition().Name
	}
	model := llm.Label(provider, modelName)
	_ = em.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_Started{Started: &toolpb.RunStarted{
		Model: model, Tools: names, LoopId: loopID, MaxIterations: int32(maxIter),
	}}})
	log.InfoContext(ctx, "run started", "model", model, "tools", len(tools), "loop_id", loopID)

	opts := loop.Options{
		Provider:        tracedProvider{provider, s.tel},
		Model:           modelName,
		MaxOutputTokens: int(req.GetLlm().GetMaxOutputTokens()),
		MaxIterations:   maxIter,
		MaxParallel:     maxPar,
		EmptyRetries:    s.cfg.Loop.EmptyResponseRetries,
		OutputSchema:    outputSchema,
		Context:         bag,
		Budget:          loop.Budget{MaxTokens: req.GetLimits().GetMaxTokens(), MaxCostUSD: req.GetLimits().GetMaxCostUsd()},
		Cost:            func(m string, u llm.Usage) float64 { return s.cost(m, model, u) },
		RunID:           runID,
		LoopID:          loopID,
		Strategies:      []loop.Strategy{progressive.New()},
		Decorate:        s.decorate,
		Observer: func(ev loop.Event) {
			switch x := ev.(type) {
			case loop.ModelCalled:
				s.tel.RecordCost(ctx, x.Model, x.CostUSD)
			case loop.ToolsChanged:
				s.tel.ToolsChanged(ctx, x.Added, x.Removed)
			}
			em.observe(r, ev)
		},
		Logger: log,
	}
	if o := req.GetLlm(); o != nil && o.Temperature != nil {
		t := o.GetTemperature()
		opts.Temperature = &t
	}
	res, err := loop.Run(ctx, opts, loop.Input{System: req.GetSystemPrompt(), Messages: messages(req), Tools: tools})

	r.mu.Lock()
	r.ended = time.Now()
	if err == nil {
		r.state = toolpb.RunState_RUN_STATE_SUCCEEDED
		r.finalText = res.Text
		r.iterations = int32(res.Iterations)
	}
	r.mu.Unlock()
	if err == nil {
		s.tel.EndRun(runSpan, telemetry.RunResult{Outcome: "completed", InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens})
		log.InfoContext(ctx, "run succeeded", "iterations", res.Iterations, "tool_calls", res.ToolCalls)
		return em.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{
			Text: res.Text, Iterations: int32(res.Iterations), ReturnDirect: res.ReturnDirect,
			Usage: &toolpb.Usage{Model: model, InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CostUsd: res.CostUSD},
		}}})
	}

	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		err = cause // CancelRun: "run cancelled: <reason>"
	case errors.Is(cause, errShutdown):
		err = fmt.Errorf("run stopped: %w; retry it on another orchestrator", cause)
	}
	code2, reason := classify(err)
	msg := err.Error()
	runErr := &toolpb.RunError{Code: int32(code2), Message: msg, Reason: reason}
	r.mu.Lock()
	r.err = runErr
	r.state = toolpb.RunState_RUN_STATE_FAILED
	if code2 == codes.Canceled || reason == ReasonShuttingDown {
		r.state = toolpb.RunState_RUN_STATE_CANCELLED
	}
	r.mu.Unlock()
	r.mu.Lock()
	usage := r.usage
	r.mu.Unlock()
	s.tel.EndRun(runSpan, telemetry.RunResult{Outcome: strings.ToLower(reason), ErrorType: reason, Err: err, InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens})
	log.WarnContext(ctx, "run failed", "code", code2.String(), "reason", reason, "error", msg)
	_ = em.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_Error{Error: runErr}})
	return statusError(code2, reason, msg, map[string]string{"run_id": runID})
}

// chooseModel picks the provider and model of a run: llm.model as "provider/model" (a
// model name without a configured provider prefix goes to the default provider, so
// names such as "meta-llama/Llama-3" work), else llm.role mapped by models.roles, else
// the default provider's default model.
func (s *Server) chooseModel(o *toolpb.LlmOptions) (llm.Provider, string, *fieldError) {
	model, field := o.GetModel(), "llm.model"
	if model == "" && o.GetRole() != "" {
		m, ok := s.cfg.Models.Roles[o.GetRole()]
		if !ok {
			return nil, "", invalid("llm.role", "unknown role %q (configured roles: [%s])", o.GetRole(), strings.Join(slices.Sorted(maps.Keys(s.cfg.Models.Roles)), ", "))
		}
		model, field = m, "llm.role"
	}
	if p, m, ok := strings.Cut(model, "/"); ok {
		if prov, ok := s.providers[p]; ok {
			return prov, m, nil
		}
		if slices.Contains(knownProviders, p) {
			return nil, "", invalid(field, "provider %q is not configured on this orchestrator (configured: [%s])", p, strings.Join(slices.Sorted(maps.Keys(s.providers)), ", "))
		}
	}
	return s.provider, model, nil
}

// knownProviders are the provider names toolmesh has; a model prefixed with one of them
// that is not configured is a mistake, not a model name with a slash.
var knownProviders = []string{"scripted", "openai", "anthropic"}

// cost prices a model call from the configured price table: by the model that answered
// (providers report dated versions), else by the model the run asked for.
func (s *Server) cost(answered, requested string, u llm.Usage) float64 {
	p, ok := s.cfg.Models.Prices[answered]
	if !ok {
		if p, ok = s.cfg.Models.Prices[requested]; !ok {
			return 0
		}
	}
	return p.Cost(u.InputTokens, u.OutputTokens)
}

// resolveTools turns the requested groups and tools into remote tools, de-duplicated by
// name (first wins), sorted by name, and decorated.
func (s *Server) resolveTools(req *toolpb.RunRequest) ([]tool.Tool, *fieldError) {
	byName := map[string]tool.Tool{}
	add := func(t tool.Tool) {
		if _, dup := byName[t.Definition().Name]; !dup {
			byName[t.Definition().Name] = t
		}
	}
	for i, g := range req.GetToolGroups() {
		info, ts, err := s.router.Group(g)
		if err == nil {
			ts = s.groupFacade(info, ts)
		}
		if err != nil {
			return nil, &fieldError{code: codes.NotFound, reason: ReasonUnknownGroup, field: fmt.Sprintf("tool_groups[%d]", i),
				desc: fmt.Sprintf("no worker serves tool group %q (known groups: [%s])", g, strings.Join(s.groupRoles(), ", "))}
		}
		for _, t := range ts {
			add(t)
		}
	}
	for i, n := range req.GetTools() {
		t, err := s.router.Tool(n)
		if err != nil {
			return nil, &fieldError{code: codes.NotFound, reason: ReasonUnknownTool, field: fmt.Sprintf("tools[%d]", i),
				desc: fmt.Sprintf("no worker serves tool %q", n)}
		}
		add(t)
	}
	out := make([]tool.Tool, 0, len(byName))
	for _, t := range byName {
		out = append(out, s.decorate(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Definition().Name < out[j].Definition().Name })
	return out, nil
}

// groupFacade offers a group as one facade when the config says so.
func (s *Server) groupFacade(info *toolpb.ToolGroupInfo, ts []tool.Tool) []tool.Tool {
	f := s.cfg.Groups[info.GetRole()].Facade
	if f == nil || len(ts) == 0 {
		return ts
	}
	name, desc, notes := f.Name, f.Description, f.UsageNotes
	if name == "" {
		name = info.GetRole()
	}
	if desc == "" {
		desc = info.GetDescription()
	}
	if notes == "" {
		notes = info.GetUsageNotes()
	}
	return []tool.Tool{tool.Of(name, desc, ts, tool.UsageNotes(notes))}
}

// decorate wraps a tool of a run, offered at the start or injected later (a facade's
// children), in the orchestrator's decorator chain and the configured one-shot rule.
func (s *Server) decorate(t tool.Tool) tool.Tool {
	t = decorators.Apply(t, append(decorators.Default(), decorators.Telemetry(s.tel))...)
	if tc, ok := s.cfg.Tools[t.Definition().Name]; ok && tc.OneShot != nil {
		t = toolctx.OneShotPerLoop(t, tc.OneShot.Advice)
	}
	return t
}

func (s *Server) groupRoles() []string {
	var roles []string
	for _, g := range s.router.ListGroups() {
		roles = append(roles, g.GetGroup().GetRole())
	}
	return roles
}

// messages builds the loop's conversation: earlier messages, then the prompt.
func messages(req *toolpb.RunRequest) []llm.Message {
	var out []llm.Message
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
	if strings.TrimSpace(req.GetPrompt()) != "" {
		out = append(out, llm.Message{Role: llm.RoleUser, Text: req.GetPrompt()})
	}
	return out
}

// emitter serialises sends on a run's stream (tool calls finish on many goroutines) and
// numbers the events.
type emitter struct {
	mu     sync.Mutex
	stream toolpb.OrchestratorService_RunServer
	runID  string
	seq    int64
	broken bool
}

func (e *emitter) send(ev *toolpb.RunResponse) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken {
		return nil
	}
	e.seq++
	ev.RunId = e.runID
	ev.Sequence = e.seq
	ev.Time = timestamppb.Now()
	if err := e.stream.Send(ev); err != nil {
		// The client went away; the run's context is cancelled with the stream.
		e.broken = true
		return err
	}
	return nil
}

// observe records a loop event in the run and streams it.
func (e *emitter) observe(r *run, ev loop.Event) {
	switch x := ev.(type) {
	case loop.ModelCalled:
		r.mu.Lock()
		r.iterations = int32(x.Iteration)
		r.usage = r.usage.Add(x.Usage)
		r.costUSD += x.CostUSD
		r.mu.Unlock()
		_ = e.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_Usage{Usage: &toolpb.Usage{Model: x.Model, InputTokens: x.Usage.InputTokens, OutputTokens: x.Usage.OutputTokens, CostUsd: x.CostUSD}}})
	case loop.ToolsChanged:
		_ = e.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_ToolsChanged{ToolsChanged: &toolpb.ToolsChanged{
			Added: x.Added, Removed: x.Removed, Tools: x.Tools, Iteration: int32(x.Iteration), LoopId: x.LoopID,
		}}})
	case loop.AssistantText:
		_ = e.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_Message{Message: &toolpb.AssistantMessage{Text: x.Text, Iteration: int32(x.Iteration)}}})
	case loop.ToolCallStarted:
		_ = e.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallStarted{ToolCallStarted: &toolpb.ToolCallStarted{
			CallId: x.Call.ID, Tool: x.Call.Name, ArgumentsJson: x.Call.Arguments, Iteration: int32(x.Iteration), LoopId: x.LoopID,
		}}})
	case loop.ToolCallFinished:
		r.mu.Lock()
		r.toolCalls++
		r.mu.Unlock()
		fin := &toolpb.ToolCallFinished{
			CallId: x.Call.ID, Tool: x.Call.Name, Outcome: outcomeToProto(x.Outcome), Content: x.Content,
			WorkerId: x.WorkerID, Duration: durationpb.New(x.Duration), Attempts: int32(x.Attempts), LoopId: x.LoopID,
		}
		if x.Result.Artifact != nil {
			if a, err := wire.ArtifactToProto(x.Result.Artifact); err == nil {
				fin.Artifact = a
			}
		}
		_ = e.send(&toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: fin}})
	}
}

func outcomeToProto(o loop.Outcome) toolpb.ToolCallOutcome {
	switch o {
	case loop.OutcomeOK:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK
	case loop.OutcomeUnknownTool:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL
	case loop.OutcomeInvalidArguments:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS
	default:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR
	}
}

// ListTools lists the registered tools.
func (o *orchestratorServer) ListTools(_ context.Context, req *toolpb.ListToolsRequest) (*toolpb.ListToolsResponse, error) {
	for i, g := range req.GetToolGroups() {
		if _, _, err := o.s.router.Group(g); err != nil {
			return nil, (&fieldError{code: codes.NotFound, reason: ReasonUnknownGroup, field: fmt.Sprintf("tool_groups[%d]", i), desc: fmt.Sprintf("no worker serves tool group %q", g)}).status()
		}
	}
	return &toolpb.ListToolsResponse{Tools: o.s.router.ListTools(req.GetToolGroups()...)}, nil
}

// ListToolGroups lists the tool groups.
func (o *orchestratorServer) ListToolGroups(context.Context, *toolpb.ListToolGroupsRequest) (*toolpb.ListToolGroupsResponse, error) {
	return &toolpb.ListToolGroupsResponse{Groups: o.s.router.ListGroups()}, nil
}

// ListWorkers lists the registered workers.
func (o *orchestratorServer) ListWorkers(context.Context, *toolpb.ListWorkersRequest) (*toolpb.ListWorkersResponse, error) {
	return &toolpb.ListWorkersResponse{Workers: o.s.router.ListWorkers()}, nil
}

// GetRun reports a run.
func (o *orchestratorServer) GetRun(_ context.Context, req *toolpb.GetRunRequest) (*toolpb.GetRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, invalid("run_id", "is empty").status()
	}
	r := o.s.runs.get(req.GetRunId())
	if r == nil {
		return nil, (&fieldError{code: codes.NotFound, reason: ReasonRunNotFound, field: "run_id", desc: fmt.Sprintf("no run with id %q (finished runs are kept for the last %d)", req.GetRunId(), o.s.cfg.Loop.RetainRuns)}).status()
	}
	return r.snapshot(), nil
}

// CancelRun cancels a running run; cancelling a finished run reports its final state.
func (o *orchestratorServer) CancelRun(ctx context.Context, req *toolpb.CancelRunRequest) (*toolpb.CancelRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, invalid("run_id", "is empty").status()
	}
	r := o.s.runs.get(req.GetRunId())
	if r == nil {
		return nil, (&fieldError{code: codes.NotFound, reason: ReasonRunNotFound, field: "run_id", desc: fmt.Sprintf("no run with id %q", req.GetRunId())}).status()
	}
	r.mu.Lock()
	state := r.state
	r.mu.Unlock()
	if state != toolpb.RunState_RUN_STATE_RUNNING {
		return &toolpb.CancelRunResponse{State: state}, nil
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by client"
	}
	r.cancel(fmt.Errorf("%w: %s", errCancelled, reason))
	// Report how the run really ended: one that finished just as it was cancelled keeps
	// its own outcome. A run ends promptly once cancelled; the wait is bounded anyway.
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	select {
	case <-r.over:
	case <-wait.Done():
		return &toolpb.CancelRunResponse{State: toolpb.RunState_RUN_STATE_CANCELLED}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &toolpb.CancelRunResponse{State: r.state}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
