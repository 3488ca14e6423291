package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// invoker serves ToolWorkerService.
type invoker struct {
	toolpb.UnimplementedToolWorkerServiceServer
	w *Worker
}

// Invoke runs one tool call. Tool failures and bad arguments are answered as error
// outcomes (the worker did its job: the model should hear about them); gRPC errors are
// reserved for calls the worker did not run: draining, and a tool it does not serve
// (NOT_FOUND, reason UNKNOWN_TOOL).
func (s *invoker) Invoke(ctx context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	return s.invokeOnce(ctx, req, nil)
}

// InvokeStream runs one call of a tool that reports progress: each report goes out on
// the stream as the tool makes it, then the result.
func (s *invoker) InvokeStream(sreq *toolpb.InvokeStreamRequest, stream toolpb.ToolWorkerService_InvokeStreamServer) error {
	req := sreq.GetRequest()
	var mu sync.Mutex
	failed := false
	report := func(status string) {
		mu.Lock()
		defer mu.Unlock()
		if failed {
			return
		}
		// Only UTF-8 crosses the wire: a report that is not would fail the whole stream.
		status = wire.Cut(strings.ToValidUTF8(status, "\uFFFD"), wire.MaxProgressBytes)
		if err := stream.Send(&toolpb.InvokeStreamResponse{Message: &toolpb.InvokeStreamResponse_Progress{Progress: &toolpb.ProgressReport{Status: status}}}); err != nil {
			failed = true // the orchestrator went away; the call's context ends too
		}
	}
	resp, err := s.invokeOnce(stream.Context(), req, report)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	failed = true // no report after the result
	return stream.Send(&toolpb.InvokeStreamResponse{Message: &toolpb.InvokeStreamResponse_Result{Result: resp}})
}

// invoke runs one call; progress, when not nil, receives the tool's progress reports.
// Its stages: admission (draining, capacity), the tool, its arguments, the call's
// authority (token and tenant), the run of the tool, the response.
func (s *invoker) invoke(ctx context.Context, req *toolpb.InvokeRequest, progress func(string)) (*toolpb.InvokeResponse, error) {
	w := s.w
	release, err := w.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	name := req.GetTool()
	t, isTool := w.tools[name]
	f, isFacade := w.facades[name]
	var input schema.Schema
	switch {
	case isTool:
		input = t.Definition().InputSchema
	case isFacade:
		input = f.tool.Definition().InputSchema
	default:
		// Not a tool result: the call did not run, and the orchestrator, which routed
		// it here from what this worker registered, sends it to another replica.
		return nil, wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL, Message: fmt.Sprintf("tool '%s' is not served by worker %s", wire.Truncate(name, 64), w.opts.ID)}.Err()
	}
	args := req.GetArgumentsJson()
	created := req.GetCreatedTool()
	// Only the orchestrator reaches Invoke with mutual TLS on: when it validated the
	// arguments against the very definition this worker serves, they are canonical and
	// valid already. A created tool's arguments are validated once it is rebuilt.
	if h := req.GetValidatedDefinitionHash(); created == "" && (w.opts.TLS == nil || h == "" || h != w.hashes[name]) {
		if args, err = input.Validate(args); err != nil {
			return invalidArguments(name, err)
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	ctx, tenant, err := w.authorizeCall(ctx, md, name, req.GetTenant())
	if err != nil {
		return nil, err
	}
	shown := name
	if created != "" {
		// A call of a tool a selector created: the template rebuilds it from the state it
		// is bound to, here, whichever replica ran the selection.
		ct, res := w.rebuild(ctx, name, created, req.GetState())
		if ct == nil {
			return wire.ResultToProto(repaired(res))
		}
		if args, err = ct.Definition().InputSchema.Validate(args); err != nil {
			return invalidArguments(created, err)
		}
		t, shown = ct, created
	}
	bag, err := w.codec.Decode(md)
	if err != nil {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeInvalidArguments, fmt.Sprintf("the call's context cannot be read: %v", err)))
	}
	// The tool sees the entries its group may see plus the loop id and the tenant, never
	// anything else; the state the orchestrator keeps for the call, which the tool may
	// replace; and the run's blackboard as far as the call needs it, what the tool adds
	// going back with the result.
	c := &call{name: shown, route: name, args: args, st: toolcall.NewState(req.GetState()), facade: isFacade,
		board: toolcall.NewCallBoard(wire.BindingsFromProto(req.GetBlackboard()), wire.MaxBlackboardUpdateBytes)}
	ctx = toolcall.NewScope(ctx, tool.CallInfo{RunID: req.GetRunId(), LoopID: req.GetLoopId(), CallID: req.GetCallId()}, tenant, bag, args, c.st, c.board)
	if progress != nil {
		ctx = toolcall.WithProgress(ctx, progress)
	}
	s.run(ctx, md, req.GetCallId(), c, t, f)
	return w.respond(ctx, c)
}

// call is one call as invoke runs it: what the tool is given and what it returned.
type call struct {
	// name is the tool as the model knows it; route the tool or facade the request names
	// (a created tool's template).
	name, route, args string
	st                *tool.State
	board             *toolcall.CallBoard
	facade            bool

	res tool.Result
	sel *toolpb.Selection
	sig *toolpb.ControlSignal
}

// invalidArguments answers a call whose arguments do not match the tool's schema.
func invalidArguments(name string, err error) (*toolpb.InvokeResponse, error) {
	return wire.ResultToProto(tool.ErrorWithCode(tool.CodeInvalidArguments, fmt.Sprintf("invalid arguments for tool '%s': %s", name, strings.TrimPrefix(err.Error(), schema.ErrInvalidArguments.Error()+": "))))
}

// rebuild makes the created tool a call names from its template and the call's state,
// or says, as an error result, why it cannot.
func (w *Worker) rebuild(ctx context.Context, template, created string, state []byte) (tool.Tool, tool.Result) {
	if msg := wire.CheckID(created, wire.ToolNameRE, 64); msg != "" {
		return nil, tool.ErrorWithCode(tool.CodeInvalidArguments, "created_tool "+msg)
	}
	tm, ok := w.templates[template]
	if !ok {
		return nil, tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' cannot be called: '%s' is not a template, so it serves no created tools", created, template))
	}
	var found tool.Tool
	res, _ := toolcall.Protect(ctx, w.log, template, func() (tool.Result, error) {
		made, err := tm.Create(ctx, state)
		if err != nil {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' cannot be rebuilt from its state: %v", created, err)), nil
		}
		for _, m := range made {
			if m.Definition().Name == created {
				found = m
				break
			}
		}
		return tool.Result{}, nil
	})
	if res.IsError() {
		return nil, res
	}
	if found == nil {
		return nil, tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' cannot be called: template '%s' creates no tool of that name from the state it is bound to", created, template))
	}
	return found, tool.Result{}
}

// admit takes a call in: none while draining, none whose caller has left, and no more at
// once than the worker's capacity (waiting for a slot). release gives the slot back.
func (w *Worker) admit(ctx context.Context) (release func(), err error) {
	if !w.beginCall() {
		return nil, drainingStatus()
	}
	if w.slots != nil {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			w.endCall()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-w.drainCh:
			w.endCall()
			return nil, drainingStatus()
		}
	}
	// A select takes a free slot as readily as a caller's end: a call whose caller left
	// (while it waited for its idempotency key, say) does not run.
	if err := ctx.Err(); err != nil {
		if w.slots != nil {
			<-w.slots
		}
		w.endCall()
		return nil, status.FromContextError(err).Err()
	}
	w.active.Add(1)
	return func() {
		w.active.Add(-1)
		if w.slots != nil {
			<-w.slots
		}
		w.endCall()
	}, nil
}

// authorizeCall checks, with mutual TLS on, the token by which the orchestrator vouches for
// the call (for this worker and this tool, valid until the call's deadline: a replayed,
// redirected or stale one is refused before anything runs), and returns the run's
// verified tenant: the orchestrator's word, never the call's metadata.
func (w *Worker) authorizeCall(ctx context.Context, md metadata.MD, name, tenant string) (context.Context, string, error) {
	if w.opts.TLS == nil {
		return ctx, tenant, nil
	}
	var raw string
	if v := md.Get(trust.CallTokenHeader); len(v) > 0 {
		raw = v[0]
	}
	claims, err := w.opts.TLS.VerifyCallToken(ctx, raw, w.opts.TLS.ID().String(), name)
	if err != nil {
		w.log.Warn("call refused: bad call token", "event", "audit", "tool", name, "error", err.Error())
		return ctx, "", wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED, Message: err.Error()}.Err()
	}
	switch {
	case tenant == "":
		tenant = claims.Tenant // an orchestrator that does not send the field yet
	case tenant != claims.Tenant:
		w.log.Warn("call refused: its tenant is not the one its call token names", "event", "audit", "tool", name, "tenant", tenant, "token_tenant", claims.Tenant)
		return ctx, "", wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED, Message: "the call's tenant is not the one its call token names"}.Err()
	}
	if claims.Tenant != "" {
		ctx = context.WithValue(ctx, tenantKey{}, claims.Tenant)
	}
	return ctx, tenant, nil
}

// run runs the tool (or the facade's selection) in the call's one span on this side, a
// child of the orchestrator's execute_tool span.
func (s *invoker) run(ctx context.Context, md metadata.MD, callID string, c *call, t tool.Tool, f *servedFacade) {
	w := s.w
	group := w.group[c.route]
	ctx = w.tel.TraceContextFrom(ctx, md)
	ctx, span := w.tel.StartTool(ctx, telemetry.ToolAttrs{Name: c.name, CallID: callID, Group: group, Served: true})
	w.tel.AddInFlight(ctx, w.opts.ID, group, 1)
	if c.facade {
		c.res, c.sel = s.selectFacade(ctx, f, c.args, c.st)
	} else {
		c.res, c.sig = s.call(ctx, t, c.args)
	}
	w.tel.AddInFlight(ctx, w.opts.ID, group, -1)
	end := telemetry.ToolResult{WorkerID: w.opts.ID, Arguments: c.args, Result: c.res.Content}
	if c.res.IsError() {
		end.ErrorType = string(c.res.Code)
	}
	w.tel.EndTool(span, end)
}

// respond is the response to a call that ran: its result, signal, selection, blackboard
// additions and state, or an error result that says why they cannot be sent.
func (w *Worker) respond(ctx context.Context, c *call) (*toolpb.InvokeResponse, error) {
	resp, err := wire.ResultToProto(repaired(c.res))
	if err != nil {
		return unsendable(c.name, err)
	}
	if c.sig != nil {
		resp.Outcome = &toolpb.InvokeResponse_Signal{Signal: c.sig}
	}
	resp.Selection = c.sel
	if added := c.board.Added(); len(added) > 0 {
		if len(added) > wire.MaxBlackboardUpdates {
			return wire.ResultToProto(tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf(
				"tool '%s' ran, but it added %d objects to the blackboard, over the %d a call may add, and they were dropped", c.name, len(added), wire.MaxBlackboardUpdates)))
		}
		resp.BlackboardUpdates = wire.BindingsToProto(added)
	}
	// A failed selection binds nothing; any other call returns the state it set.
	if toolcall.StateChanged(c.st) && (!c.facade || c.sel != nil) {
		resp.State = c.st.Bytes()
		resp.StateChanged = true
	}
	if err := wire.CheckUTF8(resp.ProtoReflect()); err != nil {
		return unsendable(c.name, err)
	}
	if n := proto.Size(resp); n > w.opts.MaxResultBytes {
		// The orchestrator would refuse the message; the call ran, so say so instead.
		w.log.WarnContext(ctx, "tool result over the size limit: answering with an error", "tool", c.name, "bytes", n, "limit", w.opts.MaxResultBytes)
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf(
			"tool '%s' ran, but its result is %d bytes, over the %d bytes a result may have, and was dropped. Call it again in a way that returns less.",
			c.name, n, w.opts.MaxResultBytes)))
	}
	return resp, nil
}

// repaired is res with its text for the model made UTF-8, each byte that is not a
// U+FFFD, as toolcall.Terminal repairs a tool's result and the orchestrator's journal
// encodes it: an error made here (a selector's, a rebuild's) often quotes what the tool
// was given (a file's name, the state's bytes), and the model should read it. What is
// not text for the model is checked before it is sent (see unsendable).
func repaired(res tool.Result) tool.Result {
	res.Content = toolinternal.ValidText(res.Content)
	return res
}

// unsendable is the error result of a call whose result cannot be sent: one that
// protocol buffers refuse to encode (text that is not UTF-8) would otherwise fail the
// call with a bare INTERNAL status, read as a worker that failed (and an idempotent
// call sent again). The call ran, so the model hears of it.
func unsendable(name string, err error) (*toolpb.InvokeResponse, error) {
	return wire.ResultToProto(tool.ErrorWithCode(tool.CodeFailed, strings.ToValidUTF8(fmt.Sprintf("tool '%s' returned a result that cannot be sent: %v", name, err), "\uFFFD")))
}

// selectFacade answers a call of a facade: its selection, as the unfold message and as a
// Selection with the state the selected tools are bound to. Only selectable facades
// reach a worker (the orchestrator unfolds the others itself), but any facade is
// answered the same way. Every selected tool must be a tool or facade the group
// registers, under the registered definition: the orchestrator sends later calls of a
// selected tool to any replica, which can only serve what the group registers.
func (s *invoker) selectFacade(ctx context.Context, f *servedFacade, args string, st *tool.State) (tool.Result, *toolpb.Selection) {
	name := f.tool.Definition().Name
	var sel *toolpb.Selection
	res, err := toolcall.Protect(ctx, s.w.log, name, func() (tool.Result, error) {
		selected, err := f.facade.Select(ctx, args)
		if err != nil {
			// Control-flow signals cannot cross the wire yet; the model hears about them.
			return tool.ErrorFrom(err), nil
		}
		sel = &toolpb.Selection{Tools: []string{}, State: st.Bytes()}
		rebuilt := s.w.rebuildAll(ctx, f, sel.GetState())
		for _, t := range selected {
			if t == nil {
				continue
			}
			msg := s.w.unservable(f.group, t)
			if msg == "" {
				continue
			}
			if len(rebuilt) == 0 {
				return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("facade '%s' selected %s", name, msg)), nil
			}
			c, msg := createdTool(t, rebuilt)
			if msg != "" {
				return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("facade '%s' created %s", name, msg)), nil
			}
			sel.Created = append(sel.Created, c)
		}
		names := selectedNames(selected)
		if len(sel.Created) > wire.MaxCreatedTools {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("facade '%s' created %d tools; a selection may create at most %d", name, len(sel.Created), wire.MaxCreatedTools)), nil
		}
		for _, n := range names {
			if !slices.ContainsFunc(sel.Created, func(c *toolpb.CreatedTool) bool { return c.GetDefinition().GetName() == n }) {
				sel.Tools = append(sel.Tools, n)
			}
		}
		if msg := createdClash(f, sel); msg != "" {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("facade '%s' created %s", name, msg)), nil
		}
		return tool.Text(toolinternal.UnfoldMessage(names, f.facade.Options().UsageNotes)), nil
	})
	if err != nil || res.IsError() {
		return res, nil // a failed selection binds nothing
	}
	return res, sel
}

// rebuilt is what one template among a facade's children makes of a selection's state.
type rebuilt struct {
	template string
	tools    []tool.Tool
	err      error
}

// rebuildAll asks every template among the facade's children for the tools it makes of
// the selection's state, as a replica will for every call of a created tool.
func (c *catalog) rebuildAll(ctx context.Context, f *servedFacade, state []byte) []rebuilt {
	var out []rebuilt
	for _, child := range f.facade.Children() {
		if child == nil {
			continue
		}
		name := child.Definition().Name
		tm, ok := c.templates[name]
		if !ok || c.group[name] != f.group {
			continue
		}
		made, err := tm.Create(ctx, state)
		out = append(out, rebuilt{template: name, tools: made, err: err})
	}
	return out
}

// createdTool describes a tool the selector created (a tool the group does not register),
// or says why no replica could serve it: a template among the facade's children must make
// the very same tool from the selection's state, and its definition must pass the
// orchestrator's checks.
func createdTool(t tool.Tool, templates []rebuilt) (*toolpb.CreatedTool, string) {
	def, meta := t.Definition(), t.Metadata()
	name := wire.Truncate(def.Name, 64)
	hash := wire.Hash(def, meta)
	var failed []string
	for _, r := range templates {
		if r.err != nil {
			failed = append(failed, r.err.Error())
			continue
		}
		if !slices.ContainsFunc(r.tools, func(x tool.Tool) bool {
			return x.Definition().Name == def.Name && wire.Hash(x.Definition(), x.Metadata()) == hash
		}) {
			continue
		}
		p := &toolpb.CreatedTool{Definition: wire.DefinitionToProto(def, meta), Template: r.template}
		if _, _, err := wire.ParseCreated(p); err != nil {
			return nil, fmt.Sprintf("a tool that cannot be offered: %v", err)
		}
		return p, ""
	}
	msg := fmt.Sprintf("'%s', which no template among its children makes from the selection's state: a selector must create its tools with a template's Create and the state it sets, so that every replica can rebuild them", name)
	if len(failed) > 0 {
		msg += " (" + strings.Join(failed, "; ") + ")"
	}
	return nil, msg
}

// createdClash says which created tool's name is taken by the facade, one of its
// children or another tool of the selection, or "".
func createdClash(f *servedFacade, sel *toolpb.Selection) string {
	taken := map[string]bool{f.tool.Definition().Name: true}
	for _, child := range f.facade.Children() {
		if child != nil {
			taken[child.Definition().Name] = true
		}
	}
	for _, n := range sel.GetTools() {
		taken[n] = true
	}
	for _, c := range sel.GetCreated() {
		n := c.GetDefinition().GetName()
		if taken[n] {
			return fmt.Sprintf("'%s', a name the facade, one of its children or another tool of the selection already has: a created tool needs a name of its own", n)
		}
		taken[n] = true
	}
	return ""
}

// unservable says why a selected tool cannot be served by the group's replicas, or "".
func (c *catalog) unservable(group string, t tool.Tool) string {
	def, meta := t.Definition(), t.Metadata()
	name := def.Name
	if c.group[name] != group {
		return fmt.Sprintf("'%s', which is not a tool of group '%s': a selector may only select the group's tools (list them among the facade's children), so that every replica can serve them", name, group)
	}
	if hash, ok := c.hashes[name]; ok && hash != wire.Hash(def, meta) {
		return fmt.Sprintf("a tool '%s' whose definition differs from the one group '%s' registers: a selector may only select the group's tools as registered, so that every replica can serve them", name, group)
	}
	return ""
}

// call runs the tool, turning a panic or a returned error into an error result. A
// control-flow signal (replan, terminate) travels as a signal.
func (s *invoker) call(ctx context.Context, t tool.Tool, args string) (tool.Result, *toolpb.ControlSignal) {
	res, err := toolcall.Invoke(ctx, s.w.log, t, args)
	if err != nil {
		if sig, ok := tool.AsSignal(err); ok {
			if msg := badReplan(sig); msg != "" {
				return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' asked to replan, but %s", t.Definition().Name, msg)), nil
			}
			if p, ok := wire.SignalToProto(sig); ok {
				return tool.Text(""), p
			}
		}
		return tool.ErrorFrom(err), nil
	}
	return res, nil
}

// badReplan says what is wrong with the blackboard objects of a replan request, or "":
// an object that is not one JSON value, or more objects or bytes than a call may add.
func badReplan(sig tool.Signal) string {
	var r tool.ReplanRequested
	if !errors.As(sig, &r) {
		return ""
	}
	if len(r.Add) > wire.MaxBlackboardUpdates {
		return fmt.Sprintf("its request adds %d objects to the blackboard, over the %d a call may add", len(r.Add), wire.MaxBlackboardUpdates)
	}
	size := 0
	for i, b := range r.Add {
		e, err := tool.CheckEntry(b.Entry)
		if err != nil {
			return fmt.Sprintf("blackboard object %d of its request was refused: %v", i+1, err)
		}
		size += e.Size()
	}
	if size > wire.MaxBlackboardUpdateBytes {
		return fmt.Sprintf("the objects of its request are %d bytes (JSON and blobs' data), over the %d a call may add", size, wire.MaxBlackboardUpdateBytes)
	}
	return ""
}

// drainingStatus answers a call a draining worker will not run (reason WORKER_DRAINING):
// the orchestrator sends it elsewhere.
func drainingStatus() error {
	return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING, Message: "worker is draining"}.Err()
}

type tenantKey struct{}

// Tenant is the tenant of the run a call belongs to, as the orchestrator vouched for it
// in the call's token: false without mutual TLS, or for a run without a verified tenant.
// Unlike the context's tenant_id, a client cannot set it. A tool reads the tenant as
// toolctx.FromContext(ctx).Get(toolctx.TenantKey), with or without mutual TLS; with it,
// that is this tenant (a call whose request names another is refused).
func Tenant(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok
}
