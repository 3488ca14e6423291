package run

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/runlog"
)

// Snapshot is a run as GetRun reports it: its state, as its record keeps it, and its
// process state.
type Snapshot struct {
	runState
	// Process is the run's process state: blackboard, budget, history, assets. Its
	// Limits are the run's budget.
	Process process.State
}

// runState is a run's Snapshot but its process state, which a record does not keep (it
// takes it from the run's process when asked).
type runState struct {
	ID         string
	State      runlog.State
	Iterations int
	ToolCalls  int
	Usage      llm.Usage
	CostUSD    float64
	// FinalText is the answer of a run that succeeded.
	FinalText string
	// Err is the error of a run that failed or was cancelled.
	Err     error
	Started time.Time
	// Ended is zero while the run goes on.
	Ended time.Time
	// Reason says why a run ended runlog.StateReplanRequested or runlog.StateTerminated.
	Reason string
	// Loops are the run's loops in the order they started: its own (depth 0), then the
	// nested loops of agentic tools, each naming its parent. At most MaxLoopsKept.
	Loops []LoopInfo
	// Facts are what the run was started with: its agent, model and trace.
	Facts
}

// Facts are what a run was started with.
type Facts struct {
	// Agent is the agent the request named; Model the run's "provider/model".
	Agent, Model string
	// TraceID is the hex W3C trace id of the run's spans; empty when it is not known
	// (the run was not traced, or it runs on another replica).
	TraceID string
}

// MaxLoopsKept bounds the loops a run's record keeps; later ones are counted, not kept.
const MaxLoopsKept = 256

// record is the service's record of one run, running or finished. The service alone
// changes it, from the loop's events and the loop's end.
type record struct {
	id string
	// tenant is the run's tenant ("" without tenancy), set before the run is visible;
	// counted when the run counts against its tenant's bound of live runs.
	tenant  string
	counted bool
	cancel  context.CancelCauseFunc
	// over is closed once the run's final state is recorded.
	over chan struct{}

	mu   sync.Mutex
	snap runState
	proc *process.Process
	// j is the run's journal (nil without one); obs its observer, for the last event.
	j   *journal
	obs *serialObserver
	ap  *approver
	// stopped: see markStopped.
	stopped bool
	// size is the record's footprint once it finished, which the store's bound counts.
	size int
}

// footprint is about what a finished run's record holds, in bytes: its answer, its
// error, its process state, its loops.
func (r *record) footprint() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 1024 + len(r.snap.FinalText) + len(r.snap.Reason) + 128*len(r.snap.Loops)
	if r.snap.Err != nil {
		n += len(r.snap.Err.Error())
	}
	if r.proc != nil {
		n += r.proc.Size()
	}
	return n
}

// markStopped records that this orchestrator stopped driving the run, which goes on
// elsewhere: its record here is not the run's.
func (r *record) markStopped() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

func (r *record) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *record) setApprover(a *approver) {
	r.mu.Lock()
	r.ap = a
	r.mu.Unlock()
}

func (r *record) approver() *approver {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ap
}

func (r *record) setJournal(j *journal) {
	r.mu.Lock()
	r.j = j
	r.mu.Unlock()
}

func (r *record) journal() *journal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.j
}

func (r *record) setObserver(o *serialObserver) {
	r.mu.Lock()
	r.obs = o
	r.mu.Unlock()
}

func (r *record) observer() *serialObserver {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.obs == nil {
		return &serialObserver{}
	}
	return r.obs
}

func (r *record) snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{runState: r.snap}
	s.Loops = slices.Clone(s.Loops)
	if r.proc != nil {
		s.Process = r.proc.Snapshot()
	}
	return s
}

// setFacts records what the run was started with.
func (r *record) setFacts(f Facts) {
	r.mu.Lock()
	r.snap.Facts = f
	r.mu.Unlock()
}

// setStarted records when the run started (a resumed run: when it first did).
func (r *record) setStarted(t time.Time) {
	r.mu.Lock()
	r.snap.Started = t
	r.mu.Unlock()
}

func (r *record) setProcess(p *process.Process) {
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
}

// observe records what a loop event changes.
func (r *record) observe(ev loop.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch x := ev.(type) {
	case loop.ModelCalled:
		r.snap.Iterations = x.Iteration
		r.snap.Usage = r.snap.Usage.Add(x.Usage)
		r.snap.CostUSD += x.CostUSD
		r.loopLocked(0).Iterations = x.Iteration
	case loop.ToolCallFinished:
		r.snap.ToolCalls++
		r.loopLocked(0).ToolCalls++
	}
}

// observeNested records an event of a nested loop: its usage and tool calls count for
// the run; its iterations are its own loop's.
func (r *record) observeNested(loopID string, ev loop.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch x := ev.(type) {
	case loop.ModelCalled:
		r.snap.Usage = r.snap.Usage.Add(x.Usage)
		r.snap.CostUSD += x.CostUSD
		if l := r.loopByID(loopID); l != nil {
			l.Iterations = x.Iteration
		}
	case loop.ToolCallFinished:
		r.snap.ToolCalls++
		if l := r.loopByID(loopID); l != nil {
			l.ToolCalls++
		}
	}
}

// loopLocked is the i-th loop; a placeholder when there is none (so callers need not
// check).
func (r *record) loopLocked(i int) *LoopInfo {
	if i < len(r.snap.Loops) {
		return &r.snap.Loops[i]
	}
	return &LoopInfo{}
}

func (r *record) loopByID(id string) *LoopInfo {
	for i := range r.snap.Loops {
		if r.snap.Loops[i].LoopID == id {
			return &r.snap.Loops[i]
		}
	}
	return nil
}

func (r *record) startLoop(s Scope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snap.Loops) < MaxLoopsKept {
		r.snap.Loops = append(r.snap.Loops, LoopInfo{Scope: s, Running: true})
	}
}

func (r *record) endLoop(f NestedFinished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.loopByID(f.Scope.LoopID); l != nil {
		l.Running, l.Err, l.Iterations, l.ToolCalls = false, f.Err, f.Iterations, f.ToolCalls
	}
}

// end records how the run ended.
func (r *record) end(res *loop.Result, outcome *Outcome, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snap.Ended = time.Now()
	if len(r.snap.Loops) > 0 {
		r.snap.Loops[0].Running = false
		if err != nil {
			r.snap.Loops[0].Err = err.Error()
		}
	}
	switch {
	case err == nil && outcome != nil && outcome.Replan != nil:
		r.snap.State, r.snap.Reason = runlog.StateReplanRequested, outcome.Replan.Reason
	case err == nil && outcome != nil && outcome.Terminated != nil:
		r.snap.State, r.snap.Reason = runlog.StateTerminated, outcome.Terminated.Reason
	case err == nil:
		r.snap.State = runlog.StateSucceeded
		r.snap.FinalText = res.Text
		r.snap.Iterations = res.Iterations
	case cancelled(err):
		r.snap.State, r.snap.Err = runlog.StateCancelled, err
	default:
		r.snap.State, r.snap.Err = runlog.StateFailed, err
	}
}

// store holds the live runs and a bounded history of finished ones.
type store struct {
	maxLive int
	retain  int
	// retainBytes bounds what the finished runs kept hold (record.footprint), and
	// finishedBytes is what they hold; 0: no bound.
	retainBytes, finishedBytes int

	mu       sync.Mutex
	closed   bool
	runs     map[string]*record // live runs and retained finished runs, by id
	live     map[*record]bool   // runs that have started and not finished
	finished []*record          // retained finished runs, oldest first
	idle     *sync.Cond
	// perTenant counts each tenant's live runs (child runs aside).
	perTenant map[string]int
	// pressure is, per tenant ("" for the orchestrator's own bound), how often runs
	// were refused and ended lately: what a refusal's retry delay is made of.
	pressure map[string]*pressure
}

// maxPressureKept bounds the tenants whose pressure is kept; past it, the ones whose
// rates have died down are forgotten.
const maxPressureKept = 4096

func newStore(maxLive, retain int, retainBytes ...int) *store {
	s := &store{maxLive: maxLive, retain: retain, runs: map[string]*record{}, live: map[*record]bool{}, perTenant: map[string]int{}, pressure: map[string]*pressure{}}
	s.idle = sync.NewCond(&s.mu)
	if len(retainBytes) > 0 {
		s.retainBytes = retainBytes[0]
	}
	return s
}

// start records a new run. Run ids are unique among live runs only: a new run may take
// the id of a finished one, which Get then forgets.
func (s *store) start(id, tenant string, cancel context.CancelCauseFunc) (*record, error) {
	return s.startLimited(id, tenant, 0, cancel)
}

// startLimited is start for a tenant that may have at most tenantMax runs live (0: no
// bound of its own).
func (s *store) startLimited(id, tenant string, tenantMax int, cancel context.CancelCauseFunc) (*record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.runs[id]
	switch {
	case s.closed:
		return nil, ErrClosed
	case old != nil && s.live[old]:
		return nil, ErrExists
	}
	if err := s.full(tenant, tenantMax); err != nil {
		return nil, err
	}
	if old != nil {
		s.finished = slices.DeleteFunc(s.finished, func(f *record) bool { return f == old })
	}
	r := &record{id: id, tenant: tenant, counted: tenant != "", cancel: cancel, over: make(chan struct{}), snap: runState{ID: id, State: runlog.StateRunning, Started: time.Now()}}
	s.runs[id] = r
	s.live[r] = true
	if r.counted {
		s.perTenant[tenant]++
	}
	return r, nil
}

// admit refuses, as startLimited would, a run of tenant while the orchestrator or the
// tenant runs its maximum of runs: a refusal before the request is resolved, which
// costs what a refusal should. startLimited checks again.
// tenantLive is how many live runs tenant has.
func (s *store) tenantLive(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perTenant[tenant]
}

func (s *store) admit(tenant string, tenantMax int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.full(tenant, tenantMax)
}

// full is the *FullError of a run of tenant refused at a bound, or nil. s.mu must be
// held.
func (s *store) full(tenant string, tenantMax int) error {
	now := time.Now()
	switch {
	case len(s.live) >= s.maxLive:
		return &FullError{Max: s.maxLive, RetryAfter: s.pressureOf("").refuse(now, s.maxLive)}
	case tenant != "" && tenantMax > 0 && s.perTenant[tenant] >= tenantMax:
		return &FullError{Tenant: tenant, Max: tenantMax, RetryAfter: s.pressureOf(tenant).refuse(now, tenantMax)}
	}
	return nil
}

// pressureOf is the pressure on tenant's bound. s.mu must be held.
func (s *store) pressureOf(tenant string) *pressure {
	p := s.pressure[tenant]
	if p == nil {
		if len(s.pressure) >= maxPressureKept {
			now := time.Now()
			for t, q := range s.pressure {
				if q.refused.rate(now) < 0.01 && q.ended.rate(now) < 0.01 {
					delete(s.pressure, t)
				}
			}
		}
		p = &pressure{}
		s.pressure[tenant] = p
	}
	return p
}

// uncount takes a live run off its tenant's count, and counts its end against the
// bounds it held. s.mu must be held.
func (s *store) uncount(r *record) {
	if !s.live[r] {
		return
	}
	now := time.Now()
	s.pressureOf("").ended.add(now)
	if r.counted {
		s.pressureOf(r.tenant).ended.add(now)
		if s.perTenant[r.tenant]--; s.perTenant[r.tenant] <= 0 {
			delete(s.perTenant, r.tenant)
		}
	}
}

// startChild records the start of a subagent's child run. It does not count against
// the live runs' limit: a run starts at most loop.max_nested_loops of them, and they end
// before it does.
func (s *store) startChild(id, tenant string, cancel context.CancelCauseFunc) (*record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if old := s.runs[id]; old != nil && s.live[old] {
		return nil, ErrExists
	}
	r := &record{id: id, tenant: tenant, cancel: cancel, over: make(chan struct{}), snap: runState{ID: id, State: runlog.StateRunning, Started: time.Now()}}
	s.runs[id] = r
	s.live[r] = true
	return r, nil
}

// finish records the end of a run and forgets the oldest finished runs beyond retention.
func (s *store) finish(r *record) {
	close(r.over)
	size := r.footprint()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncount(r)
	delete(s.live, r)
	r.size = size
	s.finished = append(s.finished, r)
	s.finishedBytes += r.size
	for len(s.finished) > 0 && (len(s.finished) > s.retain || (s.retainBytes > 0 && s.finishedBytes > s.retainBytes)) {
		old := s.finished[0]
		if s.runs[old.id] == old {
			delete(s.runs, old.id)
		}
		s.finishedBytes -= old.size
		s.finished[0] = nil
		s.finished = s.finished[1:]
	}
	if len(s.live) == 0 {
		s.idle.Broadcast()
	}
}

// discard forgets a run that never started.
func (s *store) discard(r *record) {
	close(r.over)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncount(r)
	delete(s.live, r)
	if s.runs[r.id] == r {
		delete(s.runs, r.id)
	}
	if len(s.live) == 0 {
		s.idle.Broadcast()
	}
}

func (s *store) get(id string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// isLive reports whether a run of that id runs here (finishing included).
func (s *store) isLive(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	return r != nil && s.live[r]
}

func (s *store) liveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

func (s *store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *store) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// wait blocks until no run is live or ctx ends.
func (s *store) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.mu.Lock()
		for len(s.live) > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *store) cancelAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.live {
		// The journal first: what the cancelled run does next is not recorded.
		if j := r.journal(); j != nil {
			j.freeze()
		}
		r.cancel(cause)
	}
}
