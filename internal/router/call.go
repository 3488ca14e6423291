package router

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// ReasonDraining is the ErrorInfo reason a worker gives when it refuses a call because it
// is draining; such a call never ran, so the router sends it elsewhere.
const ReasonDraining = "WORKER_DRAINING"

// remoteTool is a tool served by workers, as the loop sees it.
type remoteTool struct {
	r *Router
	e *toolEntry
}

var _ tool.Tool = (*remoteTool)(nil)

func (t *remoteTool) Definition() tool.Definition { return t.e.def }
func (t *remoteTool) Metadata() tool.Metadata     { return t.e.meta }

// Group is the tool group the tool belongs to.
func (t *remoteTool) Group() string { return t.e.group }

// Call sends the call to a replica. Failures become error results the model can read;
// the returned error is always nil (remote tools send no control-flow signals yet).
func (t *remoteTool) Call(ctx context.Context, input string) (tool.Result, error) {
	return t.r.invoke(ctx, t.e, input), nil
}

// invoke sends one logical call, failing over per the rules of DESIGN "Calls that fail
// halfway": to another replica only when the call provably never reached a worker, or
// when the tool is idempotent.
func (r *Router) invoke(ctx context.Context, e *toolEntry, input string) tool.Result {
	timeout := e.meta.Timeout
	if timeout <= 0 {
		timeout = r.opts.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	info, _ := tool.CallInfoFrom(ctx)
	req := &toolpb.InvokeRequest{
		Tool:           e.def.Name,
		ArgumentsJson:  input,
		LoopId:         info.LoopID,
		RunId:          info.RunID,
		CallId:         info.CallID,
		IdempotencyKey: info.IdempotencyKey(),
	}
	dispatch := tool.DispatchFrom(ctx)
	tried := map[string]bool{}
	var last tool.Result
	for attempt := 1; attempt <= r.opts.MaxAttempts; attempt++ {
		w := r.pick(e, tried)
		if w == nil {
			if attempt == 1 {
				return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("no worker of group '%s' is available to run tool '%s'; try again later or use another tool", e.group, e.def.Name))
			}
			return last
		}
		tried[w.id] = true
		if dispatch != nil {
			dispatch.WorkerID = w.id
			dispatch.Attempts = attempt
		}
		res, retry := r.invokeOnce(ctx, e, w, req, timeout)
		if !retry {
			return res
		}
		last = res
		r.log.Warn("tool call failed over", "tool", e.def.Name, "worker_id", w.id, "attempt", attempt, "reason", res.Content)
	}
	return last
}

// invokeOnce sends the call to w. It reports whether the call may be sent to another
// replica.
func (r *Router) invokeOnce(ctx context.Context, e *toolEntry, w *worker, req *toolpb.InvokeRequest, timeout time.Duration) (tool.Result, bool) {
	w.inFlight.Add(1)
	w.calls.Add(1)
	callCtx, s := withSent(ctx)
	resp, err := w.client.Invoke(callCtx, req)
	w.inFlight.Add(-1)
	if err == nil {
		w.succeeded()
		return wire.ResultFromProto(resp), false
	}

	st := status.Convert(err)
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Our own deadline: the worker may still be working on it. Not retried.
		return tool.ErrorWithCode(tool.CodeTimeout, fmt.Sprintf("tool '%s' timed out after %s on worker %s; its outcome is unknown", e.def.Name, timeout, w.id)), false
	case ctx.Err() != nil:
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was cancelled: %v", e.def.Name, ctx.Err())), false
	case isDraining(st):
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s is draining", w.id)), true
	case !transportFailure(st.Code()):
		// The worker answered with an error status: it is up, the call is just bad.
		w.succeeded()
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("worker %s refused tool '%s': %s: %s", w.id, e.def.Name, st.Code(), st.Message())), false
	}

	if r.markFailed(w) {
		r.log.Warn("worker ejected after repeated failures", "worker_id", w.id, "for", r.opts.EjectFor)
	}
	if !s.headers {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s unreachable: %s", w.id, st.Message())), true
	}
	if e.meta.Idempotent {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("worker %s failed during idempotent tool '%s': %s", w.id, e.def.Name, st.Message())), true
	}
	return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("the outcome of tool '%s' is unknown: worker %s failed while running it (%s). It may or may not have taken effect; check before calling it again.", e.def.Name, w.id, st.Message())), false
}

func (r *Router) markFailed(w *worker) bool {
	return w.failed(time.Now(), r.opts.EjectAfter, r.opts.EjectFor)
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

func isDraining(st *status.Status) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonDraining {
			return true
		}
	}
	return false
}

// pick chooses a replica by power of two choices on in-flight calls; ties go to the
// replica that has served fewer calls, so idle replicas share the work evenly.
func (r *Router) pick(e *toolEntry, exclude map[string]bool) *worker {
	now := time.Now()
	r.mu.RLock()
	cands := make([]*worker, 0, len(e.replicas))
	for id, w := range e.replicas {
		if exclude[id] || !w.routable(now) {
			continue
		}
		cands = append(cands, w)
	}
	r.mu.RUnlock()
	switch len(cands) {
	case 0:
		return nil
	case 1:
		return cands[0]
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	return better(cands[i], cands[j])
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
