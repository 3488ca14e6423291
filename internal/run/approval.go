package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Errors of approvals.
var (
	// ErrNoApproval: the run waits for no approval of that call (it never asked, or the
	// call is decided already, or the run ended).
	ErrNoApproval = errors.New("no approval of that call is pending")
)

// ApprovalRequested is the event of a call that waits for a person's approval before it
// is sent: answer it with Service.Approve.
type ApprovalRequested struct {
	LoopID, CallID, Tool, Arguments string
	Iteration                       int
	Deadline                        time.Time
	// InputID and Question are set when the call waits for a person's answer to a
	// question its tool asked (input.go).
	InputID  string
	Question *toolinternal.Question
}

// ApprovalDecided is the event of a decision on an approval: by a person, or by the
// deadline (By is "deadline").
type ApprovalDecided struct {
	LoopID, CallID, Tool string
	Iteration            int
	Approved             bool
	Reason, By           string
	// InputID and Answer are set for the answer to a tool's question.
	InputID string
	Answer  *toolinternal.Answer
}

// approvalRecord is a pending approval as the journal keeps it.
type approvalRecord struct {
	Key       string    `json:"key"`
	LoopID    string    `json:"loop_id"`
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	Arguments string    `json:"arguments"`
	Iteration int       `json:"iteration"`
	Deadline  time.Time `json:"deadline"`
	// InputID and Question are set when the wait is a question the call's tool asked
	// (input.go) rather than an approval.
	InputID  string                 `json:"input_id,omitempty"`
	Question *toolinternal.Question `json:"question,omitempty"`
}

// decisionRecord is a decision as the run's journal keeps it, once its owner saw it.
type decisionRecord struct {
	Key     string `json:"key"`
	Approve bool   `json:"approve"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	// Answer is the answer to a question (input.go).
	Answer *toolinternal.Answer `json:"answer,omitempty"`
}

// byDeadline is who decides an approval nobody answered in time.
const byDeadline = "deadline"

// approvalTool waits for approval before each call of the tool it wraps.
// approvalLayer makes each call of a tool whose calls need approval wait for it
// (approvalOf says which, and for how long): from the run's approver (Service.Approve),
// or from ApproveAll's.
func approvalLayer(approvalOf func(t tool.Tool) (bool, time.Duration)) toolcall.Layer {
	return toolcall.Layer{Name: LayerApproval, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		need, timeout := approvalOf(t)
		if !need {
			return nil
		}
		name := t.Definition().Name
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				if res, refused := approve(ctx, name, c.Input, timeout); refused {
					return res, nil
				}
				return next(ctx, c)
			}
		}
	}}
}

// approve waits for the approval of a call of tool name with input: refused, with the
// result the model reads, when it is not given.
func approve(ctx context.Context, name, input string, timeout time.Duration) (tool.Result, bool) {
	ap, _ := ctx.Value(approverKey{}).(*approver)
	if ap == nil {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' requires approval, and nobody can give it here; it did not run", name)), true
	}
	d, err := ap.await(ctx, name, input, timeout)
	switch {
	case err != nil:
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' did not run: waiting for its approval failed: %v", name, err)), true
	case d.By == byDeadline:
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("The call of tool '%s' was not approved within %s, so it did not run. Do not call it again unless the user asks.", name, timeout)), true
	case !d.Approve:
		msg := fmt.Sprintf("The user denied the call of tool '%s', so it did not run.", name)
		if r := strings.TrimSpace(d.Reason); r != "" {
			msg += " Their reason: " + r
		}
		return tool.ErrorWithCode(tool.CodeFailed, msg+" Do not call it again with the same arguments unless the user asks."), true
	}
	return tool.Result{}, false
}

type approverKey struct{}

// RequireApproval wraps t so that each call waits for approval (the approval layer
// alone): from the run's approver (Service.Approve), or from ApproveAll's.
func RequireApproval(t tool.Tool, timeout time.Duration) tool.Tool {
	return toolcall.Pipeline{approvalLayer(func(tool.Tool) (bool, time.Duration) { return true, timeout })}.Wrap(t)
}

// ApproveAll returns a context in which every call that waits for approval is approved
// at once: for using a run's tools outside a run (and testing them).
func ApproveAll(ctx context.Context) context.Context {
	return context.WithValue(ctx, approverKey{}, &approver{auto: true})
}

// approver answers a run's approvals: it records each request and each decision in the
// run's journal, and waits for the decision, which any replica records in the store
// (Service.Approve). Without a journal, decisions come from this process only.
type approver struct {
	runID    string
	owner    string
	j        *journal
	store    runlog.Store
	observer *serialObserver

	// auto approves every call at once (ApproveAll).
	auto bool
	// inputTimeout is how long a question of the named tool waits for its answer.
	inputTimeout func(toolName string) time.Duration

	// mu guards pending, local and wake, each made on its first entry: most runs wait
	// for no approval.
	mu      sync.Mutex
	pending map[string]approvalRecord // by key, while waiting
	local   map[string]runlog.Decision
	wake    map[string]chan struct{}
}

func newApprover(runID, owner string, j *journal, store runlog.Store, obs *serialObserver) *approver {
	return &approver{runID: runID, owner: owner, j: j, store: store, observer: obs}
}

func (a *approver) await(ctx context.Context, name, input string, timeout time.Duration) (runlog.Decision, error) {
	if a.auto {
		return runlog.Decision{Approve: true, By: "ApproveAll"}, nil
	}
	info, _ := tool.CallInfoFrom(ctx)
	key := callKey(info)
	if a.j != nil {
		if d, ok := a.j.decision(key); ok {
			// Replayed: the events go out again for the journal to drop the ones the
			// client saw.
			if rec, ok := a.j.approval(key); ok {
				a.observer.send(ApprovalRequested{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Arguments: rec.Arguments, Iteration: rec.Iteration, Deadline: rec.Deadline})
				a.observer.send(ApprovalDecided{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Iteration: rec.Iteration, Approved: d.Approve, Reason: d.Reason, By: d.By})
			}
			return runlog.Decision{Approve: d.Approve, Reason: d.Reason, By: d.By}, nil
		}
	}
	rec, asked := approvalRecord{}, false
	if a.j != nil {
		a.j.goLive()
		rec, asked = a.j.approval(key)
	}
	if err := ctx.Err(); err != nil {
		return runlog.Decision{}, err // the run's deadline passed while it was held
	}
	if !asked {
		rec = approvalRecord{Key: key, LoopID: info.LoopID, CallID: info.CallID, Tool: name, Arguments: input,
			Iteration: info.Iteration, Deadline: time.Now().Add(timeout)}
		if err := a.record(rec); err != nil {
			return runlog.Decision{}, err
		}
	}
	wake, release := a.pend(key, rec)
	defer release()
	// In a replay, the journal drops the event when the client saw it before the crash.
	a.observer.send(ApprovalRequested{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Arguments: rec.Arguments, Iteration: rec.Iteration, Deadline: rec.Deadline})

	d, err := a.wait(ctx, key, rec.Deadline, wake, runlog.Decision{Approve: false, Reason: "nobody answered in time", By: byDeadline})
	if err != nil {
		return runlog.Decision{}, err
	}
	if a.j != nil {
		data, _ := toolinternal.MarshalJSON(decisionRecord{Key: key, Approve: d.Approve, Reason: d.Reason, By: d.By})
		if _, err := a.j.add(runlog.KindDecision, data, nil, false); err != nil {
			return runlog.Decision{}, err
		}
	}
	a.observer.send(ApprovalDecided{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Iteration: rec.Iteration, Approved: d.Approve, Reason: d.Reason, By: d.By})
	return d, nil
}

// record journals rec, a call's new request for a person's decision.
func (a *approver) record(rec approvalRecord) error {
	if a.j == nil {
		return nil
	}
	data, _ := toolinternal.MarshalJSON(rec)
	if _, err := a.j.add(runlog.KindApproval, data, nil, false); err != nil {
		return err
	}
	a.j.noteApproval(rec)
	return nil
}

// pend lists rec as waiting under key until release; wake is closed when a decision
// for it is taken in this process.
func (a *approver) pend(key string, rec approvalRecord) (wake chan struct{}, release func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending, a.wake = map[string]approvalRecord{}, map[string]chan struct{}{}
	}
	a.pending[key] = rec
	wake = make(chan struct{})
	a.wake[key] = wake
	return wake, func() {
		a.mu.Lock()
		delete(a.pending, key)
		delete(a.wake, key)
		a.mu.Unlock()
	}
}

// wait polls for the decision until the deadline, when it decides itself: the store
// takes one decision per call, so a person's answer and the deadline cannot both win.
//
// The store failing meanwhile is waited out: a poll that fails is tried again at the next
// one, and the deadline's decision until the store takes it (or ctx ends).
func (a *approver) wait(ctx context.Context, key string, deadline time.Time, wake <-chan struct{}, timeout runlog.Decision) (runlog.Decision, error) {
	for {
		d, ok, err := a.decided(ctx, key)
		if ok && err == nil {
			return d, nil
		}
		if err != nil && ctx.Err() != nil {
			return runlog.Decision{}, ctx.Err()
		}
		left := time.Until(deadline)
		if left <= 0 && err == nil {
			if err := a.decide(ctx, key, timeout); err == nil || errors.Is(err, runlog.ErrExists) {
				continue // ours, or the one that came first
			}
		}
		left = max(left, 250*time.Millisecond) // past the deadline: try again shortly
		poll := 250 * time.Millisecond
		if a.store == nil {
			poll = left
		}
		t := time.NewTimer(min(left, poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return runlog.Decision{}, ctx.Err()
		case <-wake:
			wake = nil
		case <-t.C:
		}
		t.Stop()
	}
}

func (a *approver) decided(ctx context.Context, key string) (runlog.Decision, bool, error) {
	a.mu.Lock()
	d, ok := a.local[key]
	a.mu.Unlock()
	if ok || a.store == nil {
		return d, ok, nil
	}
	return a.store.Decision(ctx, a.runID, key)
}

func (a *approver) decide(ctx context.Context, key string, d runlog.Decision) error {
	if a.store != nil {
		return a.store.Decide(ctx, a.runID, key, d)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.local[key]; ok {
		return runlog.ErrExists
	}
	if a.local == nil {
		a.local = map[string]runlog.Decision{}
	}
	a.local[key] = d
	return nil
}

// find is this run's pending approval of callID (in loopID, and of question inputID,
// when given).
func (a *approver) find(loopID, callID, inputID string) (approvalRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rec := range a.pending {
		if rec.CallID == callID && (loopID == "" || rec.LoopID == loopID) && (inputID == "" || rec.InputID == inputID) {
			return rec, true
		}
	}
	return approvalRecord{}, false
}

func (a *approver) poke(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.wake[key]; w != nil {
		close(w)
		delete(a.wake, key)
	}
}

// Approval is a person's decision on a call that waits: approve or deny it, or, for a
// question its tool asked (InputID; needed only when the call waits on several), answer
// it (approve, with Content) or decline to.
type Approval struct {
	LoopID, CallID, InputID string
	Approve                 bool
	// Reason is why; By who decided (the verified caller); empty: "client via <this
	// orchestrator>".
	Reason, By string
	// Content is the answer to a question: a JSON object valid against its schema.
	Content string
}

// Approve decides on a call of a run that waits for approval: approve lets it run, a
// denial reaches the model as an error result; or it answers a question the call's tool
// asked. Any replica sharing the journal decides for any run. ErrNotFound for an unknown
// run, ErrNoApproval when the run waits for no approval of that call; loopID picks among
// calls of the same id in nested loops.
func (s *Service) Approve(ctx context.Context, runID string, v Approval) error {
	loopID, callID := v.LoopID, v.CallID
	if v.By == "" {
		v.By = "client"
		if s.owner != "" {
			v.By = "client via " + s.owner
		}
	}
	r := s.store.get(runID)
	var ap *approver
	if r != nil {
		ap = r.approver()
	}
	if s.journal == nil {
		if ap == nil {
			return fmt.Errorf("%w %q", ErrNotFound, runID)
		}
		rec, ok := ap.find(loopID, callID, v.InputID)
		if !ok {
			return fmt.Errorf("%w: run %s waits for no approval of call %q", ErrNoApproval, runID, callID)
		}
		key := rec.Key
		d, err := decisionFor(rec, v)
		if err != nil {
			return err
		}
		if err := ap.decide(ctx, key, d); err != nil {
			return fmt.Errorf("%w: call %q is decided already", ErrNoApproval, callID)
		}
		ap.poke(key)
		return nil
	}
	rec, err := s.pendingApproval(ctx, runID, loopID, callID, v.InputID)
	if errors.Is(err, ErrNoApproval) && s.decidedAlike(ctx, runID, v) {
		return nil
	}
	if err != nil {
		return err
	}
	if !rec.Deadline.IsZero() && time.Now().After(rec.Deadline) {
		// The deadline decided it (its run, resumed, records so): a decision after it
		// would make the call run where the run would have refused it.
		return fmt.Errorf("%w: the wait of call %q of run %s ended at its deadline, %s", ErrNoApproval, callID, runID, rec.Deadline.UTC().Format(time.RFC3339))
	}
	key := rec.Key
	d, err := decisionFor(rec, v)
	if err != nil {
		return err
	}
	switch err := s.journal.Decide(ctx, runID, key, d); {
	case errors.Is(err, runlog.ErrExists) && s.decidedAlike(ctx, runID, v):
		return nil
	case errors.Is(err, runlog.ErrExists):
		return fmt.Errorf("%w: call %q of run %s is decided already", ErrNoApproval, callID, runID)
	case errors.Is(err, runlog.ErrFinished):
		return fmt.Errorf("%w: run %s has ended", ErrNoApproval, runID)
	case errors.Is(err, runlog.ErrNotFound):
		return fmt.Errorf("%w %q", ErrNotFound, runID)
	case err != nil:
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if ap != nil {
		ap.poke(key)
	}
	return nil
}

// decidedAlike reports whether the call v decides on was decided as v decides, by the
// same author: the decision of a client that tries again after it lost the answer (the
// connection broke, the orchestrator died after the decision committed) took effect,
// and the retry is told so rather than that the call is decided already. A decision
// that differs, or the deadline's, is not the same.
func (s *Service) decidedAlike(ctx context.Context, runID string, v Approval) bool {
	seen := map[string]bool{}
	for after := int64(0); ; {
		recs, err := s.journal.Read(ctx, runID, after, 1024, runlog.KindApproval)
		if err != nil {
			return false
		}
		for _, rec := range recs {
			after = rec.Seq
			var a approvalRecord
			if json.Unmarshal(rec.Data, &a) != nil || seen[a.Key] || a.CallID != v.CallID ||
				(v.LoopID != "" && a.LoopID != v.LoopID) || (v.InputID != "" && a.InputID != v.InputID) {
				continue
			}
			seen[a.Key] = true
			d, err := decisionFor(a, v)
			if err != nil {
				continue
			}
			if got, ok, err := s.journal.Decision(ctx, runID, a.Key); err == nil && ok &&
				got.Approve == d.Approve && got.Reason == d.Reason && sameAuthor(got.By, d.By) {
				return true
			}
		}
		if len(recs) < 1024 {
			return false
		}
	}
}

// sameAuthor reports whether two decisions' authors are one: the same verified caller,
// or both a client nobody verified, whichever replica it went through ("client via
// <orchestrator>": a retry goes to the replica that is up).
func sameAuthor(a, b string) bool {
	anonymous := func(by string) bool { return by == "client" || strings.HasPrefix(by, "client via ") }
	return a == b || anonymous(a) && anonymous(b)
}

// pendingApproval finds, in the journal, the approval of callID (or its question
// inputID) a run asked for and has no decision on.
func (s *Service) pendingApproval(ctx context.Context, runID, loopID, callID, inputID string) (approvalRecord, error) {
	waiting, err := s.waitingRecords(ctx, runID)
	if err != nil {
		return approvalRecord{}, err
	}
	var found []approvalRecord
	loops := map[string]bool{}
	for _, a := range waiting {
		if a.CallID == callID && (loopID == "" || a.LoopID == loopID) && (inputID == "" || a.InputID == inputID) {
			found = append(found, a)
			loops[a.LoopID] = true
		}
	}
	switch {
	case len(found) == 0:
		return approvalRecord{}, fmt.Errorf("%w: run %s waits for no approval of call %q", ErrNoApproval, runID, callID)
	case len(found) == 1:
		return found[0], nil
	case len(loops) == 1:
		return approvalRecord{}, fieldErr("input_id", ErrInvalid, "call %q of run %s waits for answers to %d questions: name the question", callID, runID, len(found))
	}
	return approvalRecord{}, fieldErr("loop_id", ErrInvalid, "run %s waits for approvals of call %q in %d loops: name the loop", runID, callID, len(loops))
}

// waitingRecords are the approvals and questions a run's journal holds without a
// decision, in the order they were asked: none once the run has ended. It reads the
// journal's approvals and decisions only, however many other records the run wrote.
func (s *Service) waitingRecords(ctx context.Context, runID string) ([]approvalRecord, error) {
	run, err := s.journal.Get(ctx, runID)
	switch {
	case errors.Is(err, runlog.ErrNotFound):
		return nil, fmt.Errorf("%w %q", ErrNotFound, runID)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	case run.State.Terminal():
		return nil, fmt.Errorf("%w: run %s has ended", ErrNoApproval, runID)
	}
	var asked []approvalRecord
	decided := map[string]bool{}
	for after := int64(0); ; {
		recs, err := s.journal.Read(ctx, runID, after, 1024, runlog.KindApproval, runlog.KindDecision)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		for _, rec := range recs {
			after = rec.Seq
			switch rec.Kind {
			case runlog.KindApproval:
				var a approvalRecord
				if json.Unmarshal(rec.Data, &a) == nil {
					asked = append(asked, a)
				}
			case runlog.KindDecision:
				var d decisionRecord
				if json.Unmarshal(rec.Data, &d) == nil {
					decided[d.Key] = true
				}
			}
		}
		if len(recs) < 1024 {
			break
		}
	}
	out := asked[:0]
	seen := map[string]bool{}
	for _, a := range asked {
		if !decided[a.Key] && !seen[a.Key] { // a resumed run may record the same request again
			seen[a.Key] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// Waiting is what run runID waits for from a person: its approvals and its tools'
// questions without a decision, as their events showed them (at most MaxWaiting).
func (s *Service) Waiting(ctx context.Context, runID string) ([]ApprovalRequested, error) {
	var recs []approvalRecord
	if s.journal != nil {
		var err error
		if recs, err = s.waitingRecords(ctx, runID); errors.Is(err, ErrNoApproval) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
	} else if r := s.store.get(runID); r != nil {
		if ap := r.approver(); ap != nil {
			ap.mu.Lock()
			for _, rec := range ap.pending {
				recs = append(recs, rec)
			}
			ap.mu.Unlock()
			slices.SortFunc(recs, func(a, b approvalRecord) int { return strings.Compare(a.Key, b.Key) })
		}
	}
	var out []ApprovalRequested
	for _, rec := range recs {
		if len(out) == MaxWaiting {
			break
		}
		out = append(out, requestedEvent(rec))
	}
	return out, nil
}

// MaxWaiting bounds what GetRun lists of a run's waits.
const MaxWaiting = 64

// approvalOf says whether the calls of t wait for approval (their definition asks for
// it, or the config does), and for how long.
func (s *Service) approvalOf(t tool.Tool) (bool, time.Duration) {
	return s.cfg.ApprovalOf(t.Definition().Name, t.Metadata().RequiresApproval)
}
