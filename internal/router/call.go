package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// remoteTool is a tool served by workers, as the loop sees it. It names the tool and the
// definition it was handed out with rather than holding a routing-table entry: a worker
// that registers again (after its stream broke, say) replaces the entry, and stubs given
// out before must route to it.
type remoteTool struct {
	r     *Router
	group string
	def   tool.Definition
	meta  tool.Metadata
	hash  string
	// template and created are set for a tool a selector created (Selection.created):
	// calls go to the template, the registered tool of that name (and hash), with
	// InvokeRequest.created_tool set to created.
	template, created string
}

var _ tool.Tool = (*remoteTool)(nil)

// route is the name of the registered tool that calls of t go to.
func (t *remoteTool) route() string {
	if t.template != "" {
		return t.template
	}
	return t.def.Name
}

// newRemoteTool returns the stub of an entry. An entry never changes, so it has one stub,
// made with it: a lookup allocates nothing.
func newRemoteTool(r *Router, e *toolEntry) *remoteTool {
	if e.stub != nil {
		return e.stub
	}
	return &remoteTool{r: r, group: e.group, def: e.def, meta: e.meta, hash: e.hash}
}

func (t *remoteTool) Definition() tool.Definition { return t.def }
func (t *remoteTool) Metadata() tool.Metadata     { return t.meta }

// Group is the tool group the tool belongs to.
func (t *remoteTool) Group() string { return t.group }

// Call sends the call to a replica. Failures become error results the model can read;
// the returned error is a control-flow signal the tool raised (replan, terminate). What
// the tool added to the blackboard joins the run's blackboard (tool.BlackboardFrom).
//
// In a run with a journal (toolinternal.Journal), each attempt is recorded before it
// leaves and the outcome when the call ends; a call the journal holds an outcome of is
// answered from it without being sent, and one it holds only a dispatch of is sent again
// (with the same idempotency key) only when the tool is idempotent: otherwise its
// outcome is unknown, and the model is told so.
func (t *remoteTool) Call(ctx context.Context, input string) (tool.Result, error) {
	res, resp := t.journaled(ctx, input)
	if resp == nil {
		return res, nil
	}
	res = applyUpdates(ctx, t.def.Name, res, resp.GetBlackboardUpdates())
	if sig := wire.SignalFromProto(resp.GetSignal()); sig != nil {
		return tool.Result{}, sig
	}
	return res, nil
}

// journaled is invokeFull under the run's journal, when the context has one
// (toolcall.Journaled): invokeFull records each attempt before it leaves.
func (t *remoteTool) journaled(ctx context.Context, input string) (tool.Result, *toolpb.InvokeResponse) {
	var resp *toolpb.InvokeResponse
	replayed := false
	res, sent := toolcall.Journaled(ctx, t.def.Name, t.meta.Idempotent, toolcall.Dispatcher{
		Send: func(ctx context.Context) (tool.Result, []byte) {
			var res tool.Result
			res, resp = t.r.invokeFull(ctx, t, input)
			if toolinternal.JournalFrom(ctx) == nil {
				return res, nil
			}
			return res, encodeOutcome(res, resp)
		},
		Replay: func(data []byte) (tool.Result, error) {
			var res tool.Result
			var err error
			res, resp, err = decodeOutcome(data)
			replayed = err == nil
			return res, err
		},
		Encode: func(res tool.Result) []byte { return encodeOutcome(res, nil) },
	})
	if !sent {
		return res, nil // the journal's answer: nothing of a worker's to apply
	}
	if replayed {
		// The state the worker returned, which invokeFull sets on a call it sends.
		if st := tool.StateFrom(ctx); st != nil && resp.GetStateChanged() {
			st.Set(resp.GetState())
		}
	}
	return res, resp
}

// outcomeRecord is a call's outcome as the journal keeps it: the worker's response when
// one answered (a replay applies its blackboard updates, signal and state again), the
// result otherwise.
type outcomeRecord struct {
	// Response is the InvokeResponse in its binary form (base64 in the JSON): a 4 MiB
	// answer stays under 6 MiB, whatever its text holds.
	Response []byte          `json:"response_pb,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
}

func encodeOutcome(res tool.Result, resp *toolpb.InvokeResponse) []byte {
	var rec outcomeRecord
	if resp != nil {
		if b, err := proto.Marshal(resp); err == nil {
			rec.Response = b
		}
	}
	if rec.Response == nil {
		rec.Result = toolcall.EncodeResult(res)
	}
	b, _ := toolinternal.MarshalJSON(rec)
	return b
}

func decodeOutcome(b []byte) (tool.Result, *toolpb.InvokeResponse, error) {
	var rec outcomeRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return tool.Result{}, nil, fmt.Errorf("a journaled outcome: %w", err)
	}
	if rec.Response != nil {
		resp := &toolpb.InvokeResponse{}
		if err := proto.Unmarshal(rec.Response, resp); err != nil {
			return tool.Result{}, nil, fmt.Errorf("a journaled response: %w", err)
		}
		return wire.ResultFromProto(resp), resp, nil
	}
	res, err := toolcall.DecodeResult(rec.Result)
	return res, nil, err
}

// applyUpdates puts what a tool added on the run's blackboard, in order. An addition the
// blackboard refuses (a value that is not JSON, a full blackboard) turns the result into
// an error that says so: the tool ran, but what it meant to share is not there.
func applyUpdates(ctx context.Context, name string, res tool.Result, updates []*toolpb.BlackboardObject) tool.Result {
	if len(updates) == 0 {
		return res
	}
	board := tool.BlackboardFrom(ctx)
	if board == nil {
		return res // outside a run: nowhere to put them
	}
	if len(updates) > wire.MaxBlackboardUpdates {
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but it added %d objects to the blackboard, over the %d a call may add; none were added", name, len(updates), wire.MaxBlackboardUpdates))
	}
	size := 0
	for _, u := range updates {
		size += len(u.GetJson()) + len(u.GetData())
	}
	if size > wire.MaxBlackboardUpdateBytes {
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but the objects it added to the blackboard are %d bytes (JSON and blobs' data), over the %d a call may add; none were added", name, size, wire.MaxBlackboardUpdateBytes))
	}
	for i, b := range wire.BindingsFromProto(updates) {
		var err error
		if b.Name != "" {
			err = board.Bind(b.Name, b.Entry)
		} else {
			err = board.Add(b.Entry)
		}
		if err != nil {
			msg := fmt.Sprintf("tool '%s' ran, but blackboard object %d of %d was refused: %v", name, i+1, len(updates), err)
			if !res.IsError() && res.Content != "" {
				msg += ". Its result was: " + res.Content
			}
			return tool.ErrorWithCode(tool.CodeFailed, msg)
		}
	}
	return res
}

// invokeFull sends one logical call, failing over to another replica only when the call
// provably never reached a worker, or when the tool is idempotent: a worker that died
// after doing the work looks exactly like one that never started it. It also returns
// the worker's response when a worker answered. A call bound to state (tool.StateFrom)
// sends it and keeps the state the tool returns.
func (r *Router) invokeFull(ctx context.Context, t *remoteTool, input string) (tool.Result, *toolpb.InvokeResponse) {
	timeout := t.meta.Timeout
	if timeout <= 0 {
		timeout = r.opts.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The ToolCallContext leaves the orchestrator only through the group's converter, as
	// metadata; the loop id travels in its own field, whatever the converter keeps.
	kv, refused := r.carried(ctx, t)
	if refused != nil {
		return *refused, nil
	}
	// The worker's span joins the caller's (the execute_tool span) through these.
	kv = r.opts.Telemetry.AppendTraceContext(ctx, kv)
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}

	info, _ := tool.CallInfoFrom(ctx)
	req := &toolpb.InvokeRequest{
		Tool:           t.route(),
		CreatedTool:    t.created,
		ArgumentsJson:  input,
		LoopId:         info.LoopID,
		RunId:          info.RunID,
		CallId:         info.CallID,
		IdempotencyKey: info.IdempotencyKey(),
		State:          tool.StateFrom(ctx).Bytes(),
		Blackboard:     needed(ctx, t.meta.Needs),
		Tenant:         toolinternal.TenantFrom(ctx), // never from the context, which the client fills
	}
	if toolinternal.Validated(ctx, input) && t.created == "" {
		// The loop validated the arguments against this definition.
		req.ValidatedDefinitionHash = t.hash
	}
	var answered *toolpb.InvokeResponse
	defer func() {
		if st := tool.StateFrom(ctx); st != nil && answered.GetStateChanged() {
			st.Set(answered.GetState())
		}
	}()
	dispatch := toolinternal.DispatchFrom(ctx)
	if dispatch != nil {
		dispatch.Unknown = false // until an attempt leaves and nothing comes back
	}
	var triedBuf [4]string
	tried := triedBuf[:0] // the replicas tried, in a slice on the stack: a call tries a few
	var last *tool.Result
	saturated := 0
	for attempts := 0; attempts < r.opts.MaxAttempts; {
		w, changed := r.pick(t, tried)
		if changed {
			return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' changed: its workers registered a different definition since it was offered; it cannot be called as offered", t.def.Name)), answered
		}
		if w == nil {
			switch {
			case last != nil:
				return *last, answered
			case saturated > 0:
				r.opts.Telemetry.Overloaded(ctx, t.group)
				return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not run: every worker of group '%s' has as many calls in flight as the orchestrator sends one (router.max_in_flight_per_worker); try again in a few seconds", t.def.Name, t.group)), answered
			}
			return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("no worker of group '%s' is available to run tool '%s'; try again later or use another tool", t.group, t.def.Name)), answered
		}
		tried = append(tried, w.id)
		ok, full := w.acquireUnder(w.limit(r.opts.MaxInFlightPerWorker))
		if full {
			saturated++
			continue // nothing was sent: another replica may have room
		}
		if !ok {
			continue // closed since it was picked: nothing was sent
		}
		attempts++
		if j := toolinternal.JournalFrom(ctx); j != nil {
			if err := j.Dispatched(ctx, w.id, attempts); err != nil {
				w.release()
				return toolcall.JournalFailed(t.def.Name, err), answered
			}
		}
		if dispatch != nil {
			dispatch.WorkerID, dispatch.Attempts, dispatch.Unknown = w.id, attempts, false
		}
		r.opts.Telemetry.ReplicaChosen(ctx, w.id, attempts)
		res, retry := r.invokeOnce(ctx, t, w, req, timeout, &answered)
		if !retry {
			return res, answered
		}
		last = &res
		r.opts.Telemetry.FailedOver(ctx, w.id, attempts, string(res.Code))
		r.log.WarnContext(ctx, "tool call failed over", "tool", t.def.Name, "worker_id", w.id, "attempt", attempts, "reason", res.Content)
	}
	return *last, answered
}

// carried is the ToolCallContext the call in ctx carries to t's group, as metadata pairs:
// the run's, with the group's credentials (Options.Credentials), through the group's
// converter. A call whose context cannot be sent, whose credentials cannot be had, or
// whose converter drops them, is not sent: the result says why.
func (r *Router) carried(ctx context.Context, t *remoteTool) ([]string, *tool.Result) {
	fail := func(code tool.ErrorCode, format string, args ...any) ([]string, *tool.Result) {
		res := tool.ErrorWithCode(code, fmt.Sprintf(format, args...))
		return nil, &res
	}
	bag := toolcall.Carried(ctx)
	var creds map[string]string
	if r.opts.Credentials != nil {
		var err error
		if creds, err = r.opts.Credentials(ctx, t.group); err != nil {
			return fail(tool.CodeUnavailable, "tool '%s' was not called: %v", t.def.Name, err)
		}
		for k, v := range creds {
			bag = bag.With(k, v)
		}
	}
	out := r.opts.Converter(t.group).Convert(bag)
	for k, v := range creds {
		if got, ok := out.Get(k); !ok || got != v {
			return fail(tool.CodeUnavailable, "tool '%s' was not called: the converter of group '%s' does not forward its credential %q; an operator must list it in an allow-keys converter", t.def.Name, t.group, k)
		}
	}
	kv, err := r.opts.Codec.AppendPairs(nil, out)
	if err != nil {
		return fail(tool.CodeInvalidArguments, "the call's context cannot be sent to group '%s': %v", t.group, err)
	}
	return kv, nil
}

// invokeOnce sends the call to w, which the caller acquired. It reports whether the call
// may be sent to another replica.
func (r *Router) invokeOnce(ctx context.Context, t *remoteTool, w *worker, req *toolpb.InvokeRequest, timeout time.Duration, answered **toolpb.InvokeResponse) (tool.Result, bool) {
	if w.identity != "" && r.opts.CallToken != nil {
		deadline, _ := ctx.Deadline()
		tok, err := r.opts.CallToken(w.identity, trust.CallClaims{Tool: t.route(), RunID: req.GetRunId(),
			Tenant: toolinternal.TenantFrom(ctx)}, deadline)
		if err != nil {
			return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not called: its call token could not be made: %v", t.def.Name, err)), false
		}
		ctx = metadata.AppendToOutgoingContext(ctx, trust.CallTokenHeader, tok)
	}
	w.calls.Add(1)
	r.opts.Telemetry.AddDispatched(ctx, w.id, t.group, 1)
	var resp *toolpb.InvokeResponse
	var s sent
	var err error
	if t.meta.ReportsProgress {
		resp, s, err = invokeStream(ctx, w.conn, req)
	} else {
		resp, s, err = invoke(ctx, w.conn, req)
	}
	r.opts.Telemetry.AddDispatched(ctx, w.id, t.group, -1)
	w.release()
	if err == nil {
		w.succeeded()
		*answered = resp
		return wire.ResultFromProto(resp), false
	}

	name := t.def.Name
	if errors.Is(err, errNoResult) {
		w.succeeded()
		unknown(ctx)
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("worker %s ended tool '%s' without a result; its outcome is unknown", w.id, name)), false
	}
	st := status.Convert(err)
	switch {
	case deadlinePassed(ctx):
		// Our own deadline: the worker may still be working on it. Not retried.
		return tool.ErrorWithCode(tool.CodeTimeout, fmt.Sprintf("tool '%s' timed out after %s on worker %s; its outcome is unknown", name, timeout, w.id)), false
	case ctx.Err() != nil:
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was cancelled: %v", name, ctx.Err())), false
	case isDraining(st):
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s is draining", w.id)), true
	case st.Code() == codes.Unimplemented:
		// The address no longer serves ToolWorkerService (another process has the port,
		// say): the call did not run, and the replica is at fault.
		if r.markFailed(w) {
			r.log.WarnContext(ctx, "worker ejected: its address does not serve ToolWorkerService", "worker_id", w.id, "address", w.address, "for", r.opts.EjectFor.String())
		}
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s does not serve tool '%s' at %s: %s", w.id, name, w.address, st.Message())), true
	case notServed(st):
		// The worker does not serve a tool it registered (another worker process now has
		// its address, say): the call did not run, and the replica is at fault. A tool
		// result with code UNKNOWN_TOOL is not this: a tool that ran may answer so.
		if r.markFailed(w) {
			r.log.WarnContext(ctx, "worker ejected: it does not serve a tool it registered", "worker_id", w.id, "tool", name, "for", r.opts.EjectFor.String())
		}
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s does not serve tool '%s', which it registered: %s", w.id, name, st.Message())), true
	case st.Code() == codes.ResourceExhausted && s.workerAnswered():
		// The worker ran the call and answered with more than this side accepts. It is
		// healthy and the call is done: neither a failover nor a mark against it.
		w.succeeded()
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but its result is too large to receive (%s). Call it again in a way that returns less.", name, st.Message())), false
	case !transportFailure(st.Code()):
		// The worker answered with an error status: it is up, the call is just bad.
		w.succeeded()
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("worker %s refused tool '%s': %s: %s", w.id, name, st.Code(), st.Message())), false
	}

	if r.markFailed(w) {
		r.log.WarnContext(ctx, "worker ejected after repeated failures", "worker_id", w.id, "for", r.opts.EjectFor.String())
	}
	if s.neverSent() {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s unreachable: %s", w.id, st.Message())), true
	}
	if t.meta.Idempotent {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s failed during idempotent tool '%s': %s", w.id, name, st.Message())), true
	}
	unknown(ctx)
	return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("the outcome of tool '%s' is unknown: worker %s failed while running it (%s). It may or may not have taken effect; check before calling it again.", name, w.id, st.Message())), false
}

// deadlinePassed reports whether the call's deadline is over. It looks at the clock, not
// only at ctx.Err(): the worker resets the stream when the deadline we sent it passes,
// and that reset can arrive before our own context timer has fired.
func deadlinePassed(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func (r *Router) markFailed(w *worker) bool {
	return w.failed(r.now(), r.opts.EjectAfter, r.opts.EjectFor)
}

// transportFailure reports whether a status means the worker (or the path to it) failed,
// as opposed to the worker answering.
func transportFailure(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		return true
	}
	return false
}

// isDraining reports a worker's refusal of a call because it is draining: such a call
// never ran, so the router sends it elsewhere.
func isDraining(st *status.Status) bool {
	r, _, _, ok := wire.StatusReason(st)
	return ok && st.Code() == codes.Unavailable && r == toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING
}

// notServed reports a worker's refusal of a call of a tool it does not serve: NOT_FOUND
// with reason UNKNOWN_TOOL. Such a call never ran.
func notServed(st *status.Status) bool {
	r, _, _, ok := wire.StatusReason(st)
	return ok && st.Code() == codes.NotFound && r == toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL
}

// pick chooses a replica of t by power of two choices on in-flight calls; ties go to the
// replica that has served fewer calls, so idle replicas share the work evenly. changed
// reports that the tool is now registered with another definition than t's.
func (r *Router) pick(t *remoteTool, exclude []string) (w *worker, changed bool) {
	now := r.now()
	r.mu.RLock()
	e, ok := r.tools[t.route()]
	if ok && e.hash != t.hash {
		// A rollout registered another definition; replicas of the run's own may remain.
		if e, ok = r.older[t.route()][t.hash]; !ok {
			r.mu.RUnlock()
			return nil, true
		}
	}
	var cands []*worker
	if ok {
		cands = make([]*worker, 0, len(e.replicas))
		for id, w := range e.replicas {
			if slices.Contains(exclude, id) || !w.routable(now) {
				continue
			}
			cands = append(cands, w)
		}
	}
	r.mu.RUnlock()
	switch len(cands) {
	case 0:
		return nil, false
	case 1:
		return cands[0], false
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	return better(cands[i], cands[j]), false
}

func better(a, b *worker) *worker {
	la, lb := load(a), load(b)
	switch {
	case la < lb:
		return a
	case lb < la:
		return b
	case a.calls.Load() <= b.calls.Load():
		return a
	default:
		return b
	}
}

// load is the replica's in-flight count relative to its capacity, scaled to compare
// replicas of different sizes.
func load(w *worker) float64 {
	n := float64(w.inFlight.Load())
	if w.capacity > 0 {
		return n / float64(w.capacity)
	}
	return n
}

// errNoResult is a worker that ended a call's stream without its result: it broke the
// protocol after starting the call, so the call's outcome is unknown, but the worker and
// the path to it work.
var errNoResult = errors.New("the worker ended the call's stream without a result")

// needed is the newest blackboard entry of each type, in the order of types; none when
// the call belongs to no run.
func needed(ctx context.Context, types []string) []*toolpb.BlackboardObject {
	if len(types) == 0 {
		return nil
	}
	board := tool.BlackboardFrom(ctx)
	if board == nil {
		return nil
	}
	bound, _ := board.(lastBound)
	var out []*toolpb.BlackboardObject
	for _, typ := range types {
		if bound != nil {
			if b, ok := bound.LastBound(typ); ok {
				out = append(out, wire.BindingToProto(b))
			}
			continue
		}
		if e, ok := board.Last(typ); ok {
			out = append(out, wire.BindingToProto(tool.Binding{Entry: e}))
		}
	}
	return out
}

// lastBound is a blackboard that can tell the name bound to the newest entry of a type.
type lastBound interface {
	LastBound(typeName string) (tool.Binding, bool)
}

// invokeStream makes a call of a tool that reports progress: each report is handed to
// tool.Progress as it arrives, then the result is returned. A stream that ends without a
// result is the worker failing the call.
func invokeStream(ctx context.Context, cc grpc.ClientConnInterface, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, sent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(ctx, &invokeStreamDesc, toolpb.ToolWorkerService_InvokeStream_FullMethodName)
	if err != nil {
		return nil, sent{}, err
	}
	s := sent{left: true}
	// A failed send shows in RecvMsg, which returns the stream's status.
	if cs.SendMsg(&toolpb.InvokeStreamRequest{Request: req}) == nil {
		_ = cs.CloseSend()
	}
	reports := 0
	for {
		msg := new(toolpb.InvokeStreamResponse)
		if err := cs.RecvMsg(msg); err != nil {
			s.answered = headersArrived(cs)
			if errors.Is(err, io.EOF) {
				return nil, s, errNoResult
			}
			return nil, s, err
		}
		s.answered = true
		switch m := msg.GetMessage().(type) {
		case *toolpb.InvokeStreamResponse_Progress:
			// A call's reports beyond the bound are read and dropped: the client hears of
			// the first ones, and the call goes on.
			if reports++; reports <= wire.MaxProgressReports {
				tool.Progress(ctx, wire.Cut(m.Progress.GetStatus(), wire.MaxProgressBytes))
			}
		case *toolpb.InvokeStreamResponse_Result:
			return m.Result, s, nil
		}
	}
}

// unknown notes, for the journal, that the call in ctx left and no answer came back.
func unknown(ctx context.Context) {
	if d := toolinternal.DispatchFrom(ctx); d != nil {
		d.Unknown = true
	}
}
