package run

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// ErrJournal is the cause of a run stopped because its journal failed (the store went
// away for longer than the lease, or another orchestrator took the run over). The run is
// not finished in the store: its next owner resumes it.
var ErrJournal = errors.New("the run's journal failed")

// ErrDamaged is the cause of a run stopped because its journal holds a record that
// cannot be read back as it was written: the run is held (runlog.StateHeld) for an operator,
// never driven on without what the record said.
var ErrDamaged = errors.New("the run's journal holds a record that cannot be read")

// Codec turns what the journal keeps into and out of its wire form, which the server
// owns: events as the client sees them, and requests as the client sent them.
type Codec interface {
	// AppendEvent appends ev's wire form (protobuf) to dst; false for an event the wire
	// does not carry.
	AppendEvent(dst []byte, ev Event) ([]byte, bool)
	// Request is the request a journaled wire request (Request.Wire) stands for,
	// checked as a new request would be.
	Request(wire json.RawMessage) (Request, error)
}

// Sequenced is an event as a run with a journal delivers it: with the sequence number
// and the time of its record. WatchRun resumes after a sequence number. Wire is the
// event's wire form as the codec made it for the journal (Codec.Event), for the stream
// to send as it is rather than encode the event again.
type Sequenced struct {
	Seq   int64
	Time  time.Time
	Event Event
	Wire  []byte
}

// requestRecord is the first record of a run.
type requestRecord struct {
	RunID   string          `json:"run_id"`
	LoopID  string          `json:"loop_id"`
	Started time.Time       `json:"started"`
	Wire    json.RawMessage `json:"request"`
	Tenant  string          `json:"tenant,omitempty"`
	// Caller is who started the run (Request.Caller).
	Caller *Caller `json:"caller,omitempty"`
	// Versions are the versions of the workers' tool groups the run was offered when it
	// started, by role: a run taken over keeps their definitions (Request.Pinned).
	Versions map[string]string `json:"versions,omitempty"`
	// Without are the tool groups the run started without (Request.Without).
	Without []string `json:"without,omitempty"`
	// Agent and Model are what the run was started with (Facts), for listings.
	Agent string `json:"agent,omitempty"`
	Model string `json:"model,omitempty"`
}

// dispatchRecord is one attempt of a call, recorded before it leaves.
type dispatchRecord struct {
	Key            string `json:"key"`
	Tool           string `json:"tool,omitempty"`
	Worker         string `json:"worker"`
	Attempt        int    `json:"attempt"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// outcomeRecord is a call's terminal outcome.
type outcomeRecord struct {
	Key     string          `json:"key"`
	Outcome string          `json:"outcome"`
	Data    json.RawMessage `json:"data"`
	// How long the call took, where it ran and after how many attempts: a replay reports
	// them (the run's history, its events) as they were.
	Took     time.Duration `json:"took_ns,omitempty"`
	Worker   string        `json:"worker,omitempty"`
	Attempts int           `json:"attempts,omitempty"`
}

// callMeta is what a replay reports of a recorded call besides its outcome.
type callMeta struct {
	took     time.Duration
	worker   string
	attempts int
}

// modelRecord is one model response, recorded before any call it asks for leaves.
type modelRecord struct {
	Key      string       `json:"key"`
	Response llm.Response `json:"response"`
	// Error, when set, is how the call failed (a provider's error, with its kind): a
	// failure is a step of the run too, which a nested loop's agentic tool answers its
	// caller with, and a replay gives back as it was instead of asking again.
	Error     string        `json:"error,omitempty"`
	ErrorKind llm.ErrorKind `json:"error_kind,omitempty"`
	// OwnIDs says that the loop gave the answer's calls ids of their own where the model
	// gave an id an earlier call of the loop has (loop.Options.SharedCallIDs): an answer
	// recorded before, without it, is replayed with the model's ids, which its records
	// name its calls by.
	OwnIDs bool `json:"own_ids,omitempty"`
}

// replayedModelError is a recorded model call's failure, as a replay gives it back: its
// text, and its kind's sentinel error (llm.ErrRateLimited, ...) in its chain.
type replayedModelError struct {
	text string
	kind llm.ErrorKind
}

func (e replayedModelError) Error() string { return e.text }
func (e replayedModelError) Unwrap() error { return e.kind.Sentinel() }

// modelErrorRecord is the record of a model call that failed with err.
func modelErrorRecord(key string, err error) modelRecord {
	rec := modelRecord{Key: key, Error: err.Error()}
	var pe *llm.ProviderError
	if errors.As(err, &pe) {
		rec.ErrorKind = pe.Kind
	}
	return rec
}

// endRecord is how a run ended.
type endRecord struct {
	State      endState  `json:"state"`
	FinalText  string    `json:"final_text,omitempty"`
	Error      string    `json:"error,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Iterations int       `json:"iterations"`
	ToolCalls  int       `json:"tool_calls"`
	Usage      llm.Usage `json:"usage"`
	CostUSD    float64   `json:"cost_usd"`
	Ended      time.Time `json:"ended"`
	// TraceID is the trace of the run's spans on the replica that ended it.
	TraceID string `json:"trace_id,omitempty"`
}

// pending is a record waiting for its commit, and the event it carries with its wire
// form.
type pending struct {
	rec  runlog.Record
	ev   Event
	wire []byte
}

// journal is one run's journal writer. Records are numbered as they are added and
// committed in order, in batches, by one flusher at a time (and the store commits the
// batches of many runs together). Only what must be on disk before the run goes on is
// waited for: the request, each dispatch before its call leaves, and the end. The rest
// (model responses, outcomes, events, approvals) commits in the background, and since a
// run's records commit in order, what survives a crash is always a prefix of them:
// a model response is durable before any call it asks for leaves (the dispatch waits for
// everything before it), and an outcome lost with the records after it is a dispatch
// without an outcome, which a resumed run handles as such. Events go to deliver, in
// order, once committed. The first failure stops the run (stop) and every later write
// fails.
//
// A resumed run's journal also holds what the run recorded before: recorded model
// responses and call outcomes are replayed instead of asked for again, and the events the
// replay regenerates are not sent again (skip counts them).
type journal struct {
	store   runlog.Store
	ttl     time.Duration
	codec   Codec
	deliver func(Sequenced)
	stop    context.CancelCauseFunc
	// onLive is called at each live step of a resumed run (setOnLive).
	onLive func()
	// cancelAsked is the reason of a request to cancel the run that its journal held
	// when this orchestrator took it over (cancelled, askedToCancel).
	cancelAsked *string

	mu        sync.Mutex
	cond      sync.Cond
	lease     runlog.Lease
	next      int64
	committed int64
	queue     []pending
	// queued is the size of the queue's data; wanted the last record someone waits
	// for; lastFact the last record that is not an event (see settle); linger says that
	// a flusher is due, flushing (below, with the other flags, which share a word) that
	// one runs.
	queued   int
	wanted   int64
	lastFact int64
	linger   *time.Timer
	// ending is the state the run ends in once its end record, the last of the queue,
	// is committed (with runlog.Store.Finish, in one step).
	ending runlog.State
	failed error
	// ended: the run's end is committed and its lease given up; the journal takes no
	// more, and a renewal the store refuses now is no failure.
	ended    bool
	closed   bool
	flushing bool // see queued
	// frozen: the run stops here (a shutdown) and goes on elsewhere; what it does from
	// now on (a cancelled call's end, say) is not the run's and is not recorded.
	frozen bool

	approvals map[string]approvalRecord
	decisions map[string]decisionRecord
	// policies are the call policies' decisions the run recorded (nil until one is).
	policies map[string]policyRecord
	models   map[string]llm.Response
	// sharedIDs are the keys of the answers in models recorded without OwnIDs.
	sharedIDs map[string]bool
	// modelErrs are the recorded failures of model calls, by the same keys.
	modelErrs map[string]error
	// loops are the recorded starts and ends of nested loops (replayState.loops).
	loops    map[string]loopMark
	outcomes map[string]json.RawMessage
	// outcomeSeqs are the recorded outcomes' places in the journal (recordedAt);
	// callMetas what else a replay reports of their calls (Recorded).
	outcomeSeqs map[string]int64
	callMetas   map[string]callMeta
	dispatched  map[string]bool
	// seen are the keys of the events the journal holds (eventKey), which a replay
	// does not send again; ordinals number events about the same thing.
	seen     map[string]bool
	ordinals map[string]int
	// replayedCalls counts, by loop, the model calls answered from the journal whose
	// end the run has not yet seen (takeReplayed).
	replayedCalls map[string]int
	// renewer renews the lease with the other journals of the service; renewMu is held
	// while it does, and renewStopped ends the renewals (close, a lost lease).
	renewer      *renewer
	renewing     atomic.Bool // a renewal is started or under way
	renewMu      sync.Mutex
	renewStopped bool
	started      sync.Once
	running      atomic.Bool
	onCancel     func(reason string)
	// commits, made when a watcher asks for it (committed), is closed at the next
	// commit.
	commits chan struct{}
	// snapEvery is the records between snapshots (0: none); snapUpto the last record
	// the last snapshot covers, snapBytes its size, sinceSnap the size of the records
	// committed since; snapping says that a snapshot is being made.
	snapEvery int64
	snapUpto  int64
	snapBytes int
	sinceSnap int
	snapping  bool
}

func newJournal(store runlog.Store, r *renewer, lease runlog.Lease, ttl time.Duration, codec Codec, next int64) *journal {
	// The maps of what a resumed run replays are made when it loads them (load), the
	// others when first written: a run that is not resumed holds few of them.
	j := &journal{store: store, renewer: r, lease: lease, ttl: ttl, codec: codec, next: next, committed: next - 1}
	j.cond.L = &j.mu
	return j
}

func (j *journal) setStop(stop context.CancelCauseFunc) {
	j.mu.Lock()
	j.stop = stop
	j.mu.Unlock()
}

// cancelKey is the decision under which any replica records a request to cancel a run
// (call keys have slashes; this has none).
const cancelKey = "cancel"

// setOnCancel sets what a request to cancel the run, recorded by another replica, does.
func (j *journal) setOnCancel(f func(reason string)) {
	j.mu.Lock()
	j.onCancel = f
	j.mu.Unlock()
}

// cancelled notes a request to cancel the run, with its reason, that the journal held
// when the run was taken over: the run ends at its first live step (askedToCancel).
func (j *journal) cancelled(reason string) {
	j.mu.Lock()
	j.cancelAsked = &reason
	j.mu.Unlock()
}

// askedToCancel is the reason of the request to cancel the run found at its take-over.
func (j *journal) askedToCancel() (string, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cancelAsked == nil {
		return "", false
	}
	return *j.cancelAsked, true
}

// setOnLive sets what the run does at its first live step (runContext.live): the model
// asked, a call sent, a person waited for, rather than an answer read from the journal.
func (j *journal) setOnLive(f func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.onLive = f
}

// goLive tells the run it takes a live step (setOnLive).
func (j *journal) goLive() {
	j.mu.Lock()
	f := j.onLive
	j.mu.Unlock()
	if f != nil {
		f()
	}
}

func (j *journal) setDeliver(deliver func(Sequenced)) {
	j.mu.Lock()
	j.deliver = deliver
	j.mu.Unlock()
}

// start renews the lease until close; once.
func (j *journal) start() {
	j.started.Do(j.renew)
}

func (j *journal) renew() {
	j.running.Store(true)
	j.renewer.add(j)
}

// renewOnce renews the lease alone, and reports whether the journal wants renewing
// again: not once it is closed or its lease is lost (the journal then fails). Another
// replica may have been asked to cancel the run (CancelRun): the renewal finds out.
// The renewer renews most leases together (renewer.renewAll); this, those a store
// could not renew with the others.
func (j *journal) renewOnce() bool {
	j.renewMu.Lock()
	defer j.renewMu.Unlock()
	if j.renewStopped {
		return false
	}
	j.mu.Lock()
	lease := j.lease
	j.mu.Unlock()
	// A sixth of the time to live: a store call that hangs gives its slot back well
	// before the leases behind it run out (see renewer).
	ctx, cancel := context.WithTimeout(context.Background(), j.ttl/6)
	l, err := j.store.Renew(ctx, lease, j.ttl)
	var asked runlog.Decision
	cancelAsked := false
	if err == nil {
		asked, cancelAsked, _ = j.store.Decision(ctx, lease.RunID, cancelKey)
	}
	cancel()
	return j.renewed(lease, runlog.Renewal{Lease: l, Err: err, Decision: asked, Decided: cancelAsked})
}

// renewed takes the outcome of a renewal of lease, and reports whether the journal wants
// renewing again. j.renewMu is held.
func (j *journal) renewed(lease runlog.Lease, r runlog.Renewal) bool {
	switch err := r.Err; {
	case err == nil:
		j.mu.Lock()
		j.lease = r.Lease
		onCancel := j.onCancel
		j.mu.Unlock()
		if r.Decided && onCancel != nil {
			onCancel(r.Decision.Reason)
		}
	case errors.Is(err, runlog.ErrFenced) || time.Now().After(lease.Until):
		j.renewStopped = true
		j.mu.Lock()
		ending := j.ending != ""
		j.mu.Unlock()
		if ending && errors.Is(err, runlog.ErrFenced) {
			// The run's end is on its way: the store refuses the renewal because it took
			// the end already, or the end's own commit fails the same way and says so.
			return false
		}
		j.fail(fmt.Errorf("renewing the lease: %w", err))
		return false
	}
	return true
}

func (j *journal) fail(err error) {
	// The run stops before anyone waiting sees the failure.
	j.mu.Lock()
	stop, ended := j.stop, j.ended
	j.mu.Unlock()
	if ended {
		return // over: nothing of it is left to fail
	}
	if stop != nil {
		stop(fmt.Errorf("%w: %w", ErrJournal, err))
	}
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.cond.Broadcast()
	j.mu.Unlock()
}

// lingerFor is how long a record nobody waits for may wait for others to share its
// commit (a step's events, its calls' outcomes): what must be durable before the run goes
// on (a dispatch, the last step's records before the model is asked the next, the end)
// is committed at once, with everything queued before it. flushBytes commits the queue
// at once when its records grow past it.
const (
	lingerFor  = 5 * time.Millisecond
	flushBytes = 1 << 20
)

// add queues a record and returns its sequence number; with wait, once it is committed.
// A record the model's next request depends on (see settle) is a fact: any but an event
// or an idempotent call's outcome (see Finished).
func (j *journal) add(kind runlog.Kind, data []byte, ev Event, wait bool) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.addLocked(kind, data, ev, wait, kind != runlog.KindEvent && kind != runlog.KindDelta)
}

// addLocked is add with j.mu held, fact said.
func (j *journal) addLocked(kind runlog.Kind, data []byte, ev Event, wait, fact bool) (int64, error) {
	if j.failed != nil {
		return 0, j.failed
	}
	if j.closed {
		return 0, errors.New("the run's journal is closed")
	}
	if j.frozen {
		return 0, ErrShutdown
	}
	seq := j.next
	j.next++
	if fact {
		j.lastFact = seq
	}
	if j.queue == nil {
		if q, ok := pendingArrays.Get().(*[]pending); ok {
			j.queue = *q
		}
	}
	j.queue = append(j.queue, pending{rec: runlog.Record{Seq: seq, Kind: kind, Time: time.Now(), Data: data}, ev: ev})
	j.queued += len(data)
	if !wait {
		if j.queued >= flushBytes {
			j.kick()
		} else if !j.flushing && j.linger == nil {
			j.linger = time.AfterFunc(lingerFor, j.lingered)
		}
		return seq, nil
	}
	return seq, j.waitFor(seq)
}

// settle waits until every record the model's next request depends on is committed:
// the model's answers, the outcomes of calls that are not idempotent, the approvals'
// decisions. A resumed run then asks the model exactly what it asked before the crash,
// having replayed the same records. An idempotent call's outcome need not wait: a run
// resumed without it sends the call again with its key, and the worker's ledger answers
// as it did (and the next dispatch commits it before any call leaves). The events need
// not wait either.
func (j *journal) settle() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed != nil {
		return j.failed
	}
	return j.waitFor(j.lastFact)
}

// waitFor commits the queue up to seq and waits for it. j.mu is held.
func (j *journal) waitFor(seq int64) error {
	if seq <= j.committed {
		return j.failed
	}
	j.wanted = max(j.wanted, seq)
	if !j.flushing {
		// The waiter commits the queue itself rather than start a flusher and sleep
		// until it is done.
		j.stopLinger()
		j.flushing = true
		j.flushLocked()
	}
	for j.committed < seq && j.failed == nil {
		j.cond.Wait()
	}
	return j.failed
}

// kick starts a flusher unless one runs. j.mu is held.
func (j *journal) kick() {
	j.stopLinger()
	if !j.flushing {
		j.flushing = true
		go j.flush()
	}
}

// stopLinger cancels a linger due. j.mu is held.
func (j *journal) stopLinger() {
	if j.linger != nil {
		j.linger.Stop()
		j.linger = nil
	}
}

// lingered commits what waited for a linger, on the linger's own goroutine.
func (j *journal) lingered() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.linger = nil
	if len(j.queue) > 0 && j.failed == nil && !j.flushing {
		j.flushing = true
		j.flushLocked()
	}
}

// flush commits the queue, a batch at a time, while someone waits for a record in it
// (or it is large); what remains after waits for a linger.
func (j *journal) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushLocked()
}

// flushLocked is flush with j.mu held (and released while the store commits) by the
// flusher: j.flushing is set, and cleared once it is done.
func (j *journal) flushLocked() {
	for len(j.queue) > 0 && j.failed == nil {
		batch, final := j.take()
		lease, ending := j.lease, j.ending
		j.mu.Unlock()
		recs := make([]runlog.Record, len(batch))
		for i := range batch {
			recs[i] = batch[i].rec
		}
		var err error
		if final && ending != "" {
			err = j.finishWith(lease, ending, recs)
		} else {
			err = j.append(lease, recs)
		}
		if err != nil {
			j.fail(err)
			j.mu.Lock()
			break
		}
		failpoint.Hit(failpoint.AfterCommit)
		j.mu.Lock()
		j.committed = recs[len(recs)-1].Seq
		if final && ending != "" {
			j.ended = true
		}
		for _, r := range recs {
			if r.Kind != runlog.KindSnapshot { // the last snapshot is what the rule weighs them against
				j.sinceSnap += len(r.Data)
			}
		}
		j.maybeSnapshot()
		if j.commits != nil {
			close(j.commits)
			j.commits = nil
		}
		j.cond.Broadcast()
		if deliver := j.deliver; deliver != nil {
			j.mu.Unlock()
			for _, p := range batch {
				if p.ev != nil {
					deliver(Sequenced{Seq: p.rec.Seq, Time: p.rec.Time, Event: p.ev, Wire: p.wire})
				}
			}
			j.mu.Lock()
		}
		// Nothing refers to the batch's array now: a next queue starts in it, rather
		// than growing a new one from nothing at every step.
		if c := cap(batch); c >= 4 && c <= maxPooled {
			clear(batch)
			q := batch[:0]
			pendingArrays.Put(&q)
		}
		if len(j.queue) > 0 && j.wanted <= j.committed && j.queued < flushBytes && j.ending == "" && !j.closed {
			// Nobody waits for what came meanwhile: it may wait for more.
			if j.linger == nil {
				j.linger = time.AfterFunc(lingerFor, j.lingered)
			}
			break
		}
	}
	j.flushing = false
	j.cond.Broadcast()
}

// pendingArrays are the arrays of committed batches, in which queues start; maxPooled
// bounds the size of one.
var pendingArrays sync.Pool

const maxPooled = 64

// take takes the next batch off the queue: one append, within the store's bounds.
// final reports that it empties the queue. j.mu is held.
func (j *journal) take() (batch []pending, final bool) {
	n, size := 0, 0
	for n < len(j.queue) && n < runlog.MaxBatch {
		d := len(j.queue[n].rec.Data)
		if n > 0 && size+d > runlog.MaxAppendBytes {
			break
		}
		size += d
		n++
	}
	batch = j.queue[:n:n]
	j.queue = j.queue[n:]
	j.queued -= size
	if len(j.queue) == 0 {
		j.queue = nil
	}
	return batch, len(j.queue) == 0
}

// append commits records, retrying a store that fails for as long as the lease lasts;
// a stale lease or a conflict is final.
func (j *journal) append(lease runlog.Lease, recs []runlog.Record) error {
	failpoint.Hit(failpoint.BeforeCommit)
	return j.retry(lease, recs, "", func(ctx context.Context) error { return j.store.Append(ctx, lease, recs) })
}

// callContext bounds a store call of the journal to at least its lease's time to live
// (the service's shared bound, where there is one).
func (j *journal) callContext() (context.Context, context.CancelFunc) {
	if j.renewer != nil && j.renewer.ttl == j.ttl {
		return j.renewer.calls.get(), func() {}
	}
	return context.WithTimeout(context.Background(), j.ttl)
}

// retry runs write, which commits recs (and, for a finish, ends the run in the state
// ended), until it succeeds, fails for good, or the lease runs out.
func (j *journal) retry(lease runlog.Lease, recs []runlog.Record, ended runlog.State, write func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	unknown := false // an attempt failed in a way that may have committed it
	// giveUp is the end of the lease as it was when the first attempt failed: the
	// renewals that go on meanwhile (they may pass where the write does not) do not
	// extend the retries, and the run stops within a lease's time of the first failure.
	var giveUp time.Time
	for {
		ctx, cancel := j.callContext()
		err := write(ctx)
		switch {
		case !unknown:
		case errors.Is(err, runlog.ErrConflict) && j.committedAlready(ctx, lease.RunID, recs):
			err = nil // the earlier attempt did commit
		case ended != "" && errors.Is(err, runlog.ErrFenced) && j.endedAlready(ctx, lease, ended, recs):
			// The earlier attempt ended the run: the store refuses the lease of a run
			// that ended before it looks at the records.
			err = nil
		}
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, runlog.ErrFenced), errors.Is(err, runlog.ErrConflict), errors.Is(err, runlog.ErrInvalid):
			return err
		}
		unknown = true
		if giveUp.IsZero() {
			j.mu.Lock()
			giveUp = j.lease.Until
			j.mu.Unlock()
		}
		if time.Now().Add(backoff).After(giveUp) {
			return fmt.Errorf("the store failed for as long as the run's lease lasts: %w", err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// finishWith commits the last records and ends the run in one step, retrying as append
// does.
func (j *journal) finishWith(lease runlog.Lease, state runlog.State, recs []runlog.Record) error {
	failpoint.Hit(failpoint.BeforeCommit)
	return j.retry(lease, recs, state, func(ctx context.Context) error { return j.store.Finish(ctx, lease, state, recs...) })
}

// endedAlready reports whether the store holds the run ended in state under lease, with
// recs as its last records: a finish whose answer was lost may have committed.
func (j *journal) endedAlready(ctx context.Context, lease runlog.Lease, state runlog.State, recs []runlog.Record) bool {
	r, err := j.store.Get(ctx, lease.RunID)
	if err != nil || r.State != state || r.Owner != lease.Owner || r.Epoch != lease.Epoch {
		return false
	}
	return len(recs) == 0 || j.committedAlready(ctx, lease.RunID, recs)
}

// committedAlready reports whether the store holds exactly recs: an append whose
// answer was lost (its context ended) may have committed.
func (j *journal) committedAlready(ctx context.Context, runID string, recs []runlog.Record) bool {
	got, err := j.store.Read(ctx, runID, recs[0].Seq-1, len(recs))
	if err != nil || len(got) != len(recs) {
		return false
	}
	for i := range recs {
		if got[i].Seq != recs[i].Seq || got[i].Kind != recs[i].Kind || string(got[i].Data) != string(recs[i].Data) {
			return false
		}
	}
	return true
}

// currentLease is the lease the journal writes under.
func (j *journal) currentLease() runlog.Lease {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease
}

// freeze stops the journal taking records: the run stops on this orchestrator and goes
// on elsewhere. What is queued still commits.
func (j *journal) freeze() {
	j.mu.Lock()
	j.frozen = true
	j.mu.Unlock()
}

// event journals an event and delivers it once committed; an event a resumed run's
// replay regenerates is dropped (its record is in the journal already).
func (j *journal) event(ev Event) {
	j.mu.Lock()
	key, earlier := j.eventKey(ev)
	// A replay regenerates no text deltas (a recorded answer comes whole): the deltas of
	// a model call it asks again are new, whatever the ones of the first try were.
	if !isDelta(ev) {
		for _, k := range []string{key, earlier} {
			if k != "" && j.seen[k] {
				delete(j.seen, k) // the client saw it before the crash
				j.mu.Unlock()
				return
			}
		}
	}
	j.mu.Unlock()
	kind := runlog.KindEvent
	if isDelta(ev) {
		kind = runlog.KindDelta
	}
	var data, wire []byte
	if j.codec != nil {
		head := eventHead(key)
		b, ok := j.codec.AppendEvent(head, ev)
		if !ok {
			return // not for the client
		}
		data, wire = b, b[len(head):len(b):len(b)]
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.addLocked(kind, data, ev, false, false); err == nil && wire != nil {
		j.queue[len(j.queue)-1].wire = wire
	}
}

func isDelta(ev Event) bool {
	if n, ok := ev.(Nested); ok {
		ev = n.Event
	}
	_, ok := ev.(loop.TextDelta)
	return ok
}

// approval is the journal's request for approval of call key.
func (j *journal) approval(key string) (approvalRecord, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	a, ok := j.approvals[key]
	return a, ok
}

// committedChan is a channel closed at the journal's next commit. j.mu is held.
func (j *journal) committedChan() <-chan struct{} {
	if j.commits == nil {
		j.commits = make(chan struct{})
	}
	return j.commits
}

func (j *journal) noteApproval(a approvalRecord) {
	j.mu.Lock()
	if j.approvals == nil {
		j.approvals = map[string]approvalRecord{}
	}
	j.approvals[a.Key] = a
	j.mu.Unlock()
}

// decision is the decision on call key the run saw before it was resumed.
func (j *journal) decision(key string) (decisionRecord, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	d, ok := j.decisions[key]
	return d, ok
}

// policy is the call policy's decision on call key the run recorded before it was
// resumed.
func (j *journal) policy(key string) (policyRecord, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p, ok := j.policies[key]
	return p, ok
}

// takeReplayed reports whether loop loopID's model call that just ended (its
// ModelCalled event) was answered from the journal: it cost nothing now. Each answer
// from the journal is taken once.
func (j *journal) takeReplayed(loopID string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.replayedCalls[loopID] == 0 {
		return false
	}
	if j.replayedCalls[loopID]--; j.replayedCalls[loopID] == 0 {
		delete(j.replayedCalls, loopID)
	}
	return true
}

// close commits the records added so far (or waits for the journal to fail) and stops
// renewing the lease.
func (j *journal) close() error {
	j.mu.Lock()
	if len(j.queue) > 0 && j.failed == nil {
		j.wanted = max(j.wanted, j.next-1)
		j.kick()
	}
	for j.flushing || (len(j.queue) > 0 && j.failed == nil) {
		j.cond.Wait()
	}
	if j.linger != nil {
		j.linger.Stop()
		j.linger = nil
	}
	j.closed = true
	err := j.failed
	j.mu.Unlock()
	if j.running.Load() {
		j.renewer.remove(j)
	}
	// A renewal under way ends before close returns; none starts after.
	j.renewMu.Lock()
	j.renewStopped = true
	j.renewMu.Unlock()
	return err
}

// finish records how the run ended and gives up the lease: the end record goes with
// what is queued, and the store ends the run with the last of them (runlog.Store.Finish).
func (j *journal) finish(end endRecord) error {
	data, _ := toolinternal.MarshalJSON(end)
	j.mu.Lock()
	if j.failed == nil && !j.closed && !j.frozen {
		// Set with the end record's place in the queue: no batch before it ends the run.
		j.ending = end.State.State
	}
	_, err := j.addLocked(runlog.KindEnd, data, nil, true, true)
	j.mu.Unlock()
	if err != nil {
		return err
	}
	return j.close()
}

// callKey names a call in the journal: its loop, its iteration and its id (a loop's
// model may give two calls of different turns the same id).
func callKey(info tool.CallInfo) string {
	return info.RunID + "/" + info.LoopID + "/" + strconv.Itoa(info.Iteration) + "/" + info.CallID
}

// Recorded implements toolinternal.Journal.
func (j *journal) Recorded(ctx context.Context) ([]byte, bool, bool) {
	info, _ := tool.CallInfoFrom(ctx)
	key := callKey(info)
	j.mu.Lock()
	defer j.mu.Unlock()
	if data, ok := j.outcomes[key]; ok {
		delete(j.outcomes, key) // a call asks once
		if d := toolinternal.DispatchFrom(ctx); d != nil {
			m := j.callMetas[key]
			d.Replayed, d.Took, d.WorkerID, d.Attempts = true, m.took, m.worker, m.attempts
		}
		delete(j.callMetas, key)
		return data, true, true
	}
	return nil, false, j.dispatched[key]
}

// recordedAt says where the outcome of the call info names is in the journal, while
// the replay has not answered it yet (loop.Options.Recorded): a turn's calls replay in
// the order they ended the first time.
func (j *journal) recordedAt(info tool.CallInfo) (int64, bool) {
	key := callKey(info)
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.outcomes[key]; !ok {
		// An agentic tool's call is not journaled, its nested loop is: the loop's end.
		m, ok := j.loops["nested-finished/"+derivedID("loop_", info)]
		return m.Seq, ok
	}
	seq, ok := j.outcomeSeqs[key]
	return seq, ok
}

// known reports whether the journal holds anything of the call info names: its
// dispatch, an approval it waited for or a question its tool asked, its nested loop
// (loop.Options.Known).
func (j *journal) known(info tool.CallInfo) bool {
	key := callKey(info)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.dispatched[key] {
		return true
	}
	if _, ok := j.loops["nested-started/"+derivedID("loop_", info)]; ok {
		return true
	}
	for k := range j.approvals {
		if k == key || strings.HasPrefix(k, key+"/input/") {
			return true
		}
	}
	return false
}

// loopRecorded is when nested loop id started and ended the first time, if the journal
// has both: a replay of it.
func (j *journal) loopRecorded(id string) (started, ended time.Time, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok1 := j.loops["nested-started/"+id]
	e, ok2 := j.loops["nested-finished/"+id]
	return s.Time, e.Time, ok1 && ok2
}

// loopStarted is when nested loop id started the first time, if the journal has it.
func (j *journal) loopStarted(id string) (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.loops["nested-started/"+id]
	return s.Time, ok
}

// Dispatched implements toolinternal.Journal.
func (j *journal) Dispatched(ctx context.Context, worker string, attempt int) error {
	if err := stopping(ctx); err != nil {
		return err
	}
	j.goLive()
	if ctx.Err() != nil {
		// The run's deadline, held while it replayed, passed: the call is not sent.
		return fmt.Errorf("%w: %w", toolinternal.ErrNotSent, context.Cause(ctx))
	}
	info, _ := tool.CallInfoFrom(ctx)
	data, _ := toolinternal.MarshalJSON(dispatchRecord{Key: callKey(info), Worker: worker, Attempt: attempt, IdempotencyKey: info.IdempotencyKey()})
	if _, err := j.add(runlog.KindDispatch, data, nil, true); err != nil {
		return err
	}
	failpoint.Hit(failpoint.BeforeSend)
	return nil
}

// Finished implements toolinternal.Journal.
func (j *journal) Finished(ctx context.Context, outcome string, data []byte, idempotent bool) error {
	if err := stopping(ctx); err != nil {
		// The orchestrator stops: the call's end is not its outcome, which stays unknown
		// for the run's next owner.
		return err
	}
	info, _ := tool.CallInfoFrom(ctx)
	key := callKey(info)
	o := outcomeRecord{Key: key, Outcome: outcome, Data: data}
	if d := toolinternal.DispatchFrom(ctx); d != nil {
		o.Took, o.Worker, o.Attempts = d.Took, d.WorkerID, d.Attempts
	}
	rec, _ := toolinternal.MarshalJSON(o)
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.addLocked(runlog.KindOutcome, rec, nil, false, !idempotent)
	return err
}

// Damaged implements toolinternal.Journal: the run stops, to be held.
func (j *journal) Damaged(_ context.Context, err error) {
	j.fail(fmt.Errorf("%w: %w", ErrDamaged, err))
}

// stopping reports a run stopped by a shutdown or a failed journal: what it does then
// is not recorded.
func stopping(ctx context.Context) error {
	if c := context.Cause(ctx); errors.Is(c, ErrShutdown) || errors.Is(c, ErrJournal) {
		return c
	}
	return nil
}

var _ toolinternal.Journal = (*journal)(nil)

// journalProvider answers a loop's model calls from the journal while it holds them and
// records the others before the loop sees them (so before any call they ask for leaves).
type journalProvider struct {
	llm.Provider
	j      *journal
	loopID string
	mu     sync.Mutex
	n      int
	// shared says that the last answer was replayed from a record without OwnIDs
	// (sharedCallIDs).
	shared atomic.Bool
}

// sharedCallIDs is the loop's loop.Options.SharedCallIDs: whether the answer it just got
// was replayed from a record written before calls got ids of their own.
func (p *journalProvider) sharedCallIDs() bool { return p.shared.Load() }

func (p *journalProvider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	p.mu.Lock()
	p.n++
	key := p.loopID + "/" + strconv.Itoa(p.n)
	p.mu.Unlock()
	p.j.mu.Lock()
	resp, ok := p.j.models[key]
	delete(p.j.models, key) // replayed once
	p.shared.Store(ok && p.j.sharedIDs[key])
	if ok {
		if p.j.replayedCalls == nil {
			p.j.replayedCalls = map[string]int{}
		}
		p.j.replayedCalls[p.loopID]++ // for takeReplayed
	}
	failed, hasFailed := p.j.modelErrs[key]
	delete(p.j.modelErrs, key)
	p.j.mu.Unlock()
	switch {
	case ok:
		return func(yield func(llm.Chunk, error) bool) {
			failpoint.Hit(failpoint.ReplayModel)
			r := resp
			yield(llm.Chunk{Done: &r}, nil)
		}
	case hasFailed:
		return func(yield func(llm.Chunk, error) bool) {
			failpoint.Hit(failpoint.ReplayModel)
			yield(llm.Chunk{}, failed)
		}
	}
	// The run's goroutine waits for the model under this function's frame: the work
	// before the call and on its answer is in functions of their own, so that the frame
	// stays small.
	return func(yield func(llm.Chunk, error) bool) {
		if err := p.ready(ctx); err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		for c, err := range p.Provider.Stream(ctx, req) {
			if jerr := p.record(ctx, key, c, err); jerr != nil {
				yield(llm.Chunk{}, jerr)
				return
			}
			if !yield(c, err) || err != nil {
				return
			}
		}
	}
}

// ready readies a model call the journal does not hold: the run goes live, and what the
// call's request depends on is committed (settle).
//
//go:noinline
func (p *journalProvider) ready(ctx context.Context) error {
	p.j.goLive()
	if err := ctx.Err(); err != nil {
		return err // the run's deadline passed while it was held
	}
	if err := p.j.settle(); err != nil {
		return fmt.Errorf("%w: %w", ErrJournal, err)
	}
	failpoint.Hit(failpoint.BeforeModel)
	return nil
}

// record records the model's answer (c.Done) or failure (err) as step key's, and returns
// the journal's error if it cannot. A failure that is the run's stop is not recorded.
//
//go:noinline
func (p *journalProvider) record(ctx context.Context, key string, c llm.Chunk, err error) error {
	var data []byte
	switch {
	case err != nil:
		if ctx.Err() != nil || stopping(ctx) != nil {
			return nil
		}
		// The model's failure, not the run's stop: recorded, as an answer is.
		data, _ = toolinternal.MarshalJSON(modelErrorRecord(key, err))
	case c.Done != nil:
		failpoint.Hit(failpoint.ModelAnswered)
		data, _ = toolinternal.MarshalJSON(modelRecord{Key: key, Response: *c.Done, OwnIDs: true})
	default:
		return nil
	}
	if _, jerr := p.j.add(runlog.KindModel, data, nil, false); jerr != nil {
		return fmt.Errorf("%w: %w", ErrJournal, jerr)
	}
	return nil
}

// DefaultModel passes through the wrapped provider's default model.
func (p *journalProvider) DefaultModel() string {
	return tracedProvider{Provider: p.Provider}.DefaultModel()
}

// eventKey names an event so that a resumed run's replay can tell which of the events
// it regenerates the journal holds already: by what it is about (its loop, iteration and
// call), and its place among the events of the same kind about the same thing. A replay
// regenerates events about the same things in the same order; it may regenerate fewer
// (a replayed call streams no progress), which a count could not tell. earlier, when not
// empty, is the key journals written before gave the event.
func (j *journal) eventKey(ev Event) (key, earlier string) {
	loopID := ""
	if n, ok := ev.(Nested); ok {
		loopID, ev = n.Scope.LoopID, n.Event
	}
	var about, earlierAbout string
	switch x := ev.(type) {
	case Started:
		return "started", ""
	case Warning:
		about = "warning/" + x.Field
	case loop.ModelCalled:
		about = "model/" + loopID + "/" + strconv.Itoa(x.Iteration)
	case loop.ToolCallStarted:
		about = "call-started/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.Call.ID
	case loop.ToolCallFinished:
		about = "call-finished/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.Call.ID
	case loop.ToolsChanged:
		about = "tools/" + x.LoopID + "/" + strconv.Itoa(x.Iteration)
	case loop.AssistantText:
		about = "text/" + x.LoopID + "/" + strconv.Itoa(x.Iteration)
	case loop.TextDelta:
		about = "delta/" + x.LoopID + "/" + strconv.Itoa(x.Iteration)
	case NestedStarted:
		return "nested-started/" + x.Scope.LoopID, ""
	case NestedFinished:
		return "nested-finished/" + x.Scope.LoopID, ""
	case ApprovalRequested:
		if x.InputID != "" { // a tool's question
			return "approval/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.CallID + "/input/" + x.InputID, ""
		}
		return "approval/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.CallID, ""
	case ApprovalDecided:
		// Keyed by its turn too (a model may give calls of two turns one id); journals
		// written before keyed it without.
		input := ""
		if x.InputID != "" {
			input = "/input/" + x.InputID
		}
		return "decided/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.CallID + input, "decided/" + x.LoopID + "/" + x.CallID + input
	case EntryAdded:
		about = "entry/" + x.LoopID + "/" + x.CallID
	case ProgressReported:
		about = "progress/" + x.LoopID + "/" + strconv.Itoa(x.Iteration) + "/" + x.CallID
		earlierAbout = "progress/" + x.LoopID + "/" + x.CallID // as journals written before keyed it
	case MessageSent:
		about = "message/" + x.LoopID + "/" + x.CallID
	case AssetAdded:
		about = "asset/" + x.LoopID
	case ArtifactCaptured:
		about = "artifact/" + x.LoopID + "/" + x.CallID + "/" + x.Sink
	case Replanned, Terminated, Ended:
		return "end", ""
	default:
		about = fmt.Sprintf("%T/%s", ev, loopID)
	}
	if j.ordinals == nil {
		j.ordinals = make(map[string]int, ordinalsRoom) // a run's first steps fill it without growing it
	}
	j.ordinals[about]++
	if earlierAbout != "" {
		j.ordinals[earlierAbout]++
		earlier = earlierAbout + "#" + strconv.Itoa(j.ordinals[earlierAbout])
	}
	return about + "#" + strconv.Itoa(j.ordinals[about]), earlier
}

// ordinalsRoom is the room a journal's ordinals start with.
const ordinalsRoom = 64

// An event record is eventForm, the event's key (length and bytes) and the event's
// wire form as the codec gave it (protobuf). Journals written before kept events as JSON
// (eventRecord, its wire form protobuf JSON), which a replay and WatchRun still read.
const eventForm = 1

// eventRecord is an event as journals kept it before: its key and its wire form in
// protobuf JSON.
type eventRecord struct {
	Key   string          `json:"k"`
	Event json.RawMessage `json:"e"`
}

// eventHead is the start of an event's record: its form and its key, with room for the
// wire form that follows (Codec.AppendEvent).
func eventHead(key string) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(key)+eventRoom)
	b = append(b, eventForm)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// eventRoom is the room eventHead leaves for an event's wire form: most events fit.
const eventRoom = 160

// decodeEvent splits an event record into its key and wire form; isJSON reports the
// JSON form of earlier journals.
func decodeEvent(data []byte) (key string, wire []byte, isJSON bool, err error) {
	if len(data) > 0 && data[0] == '{' {
		var r eventRecord
		if err := json.Unmarshal(data, &r); err != nil {
			return "", nil, false, fmt.Errorf("an event record: %w", err)
		}
		return r.Key, r.Event, true, nil
	}
	if len(data) == 0 || data[0] != eventForm {
		return "", nil, false, errors.New("an event record of an unknown form")
	}
	n, k := binary.Uvarint(data[1:])
	if k <= 0 || uint64(len(data)-1-k) < n {
		return "", nil, false, errors.New("an event record cut short")
	}
	return string(data[1+k : 1+k+int(n)]), data[1+k+int(n):], false, nil
}

// EventWire is the wire form of a journaled event record, and whether it is protobuf
// JSON (journals written before events were kept in binary) rather than protobuf.
func EventWire(data []byte) (wire []byte, isJSON bool, err error) {
	_, wire, isJSON, err = decodeEvent(data)
	return wire, isJSON, err
}

// endState is an end record's state: written as the state's name; read from a name, or
// from the number journals of earlier versions wrote (1 running … 7 held).
type endState struct{ runlog.State }

func (e endState) MarshalJSON() ([]byte, error) { return json.Marshal(string(e.State)) }

func (e *endState) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		legacy := []runlog.State{1: runlog.StateRunning, 2: runlog.StateSucceeded, 3: runlog.StateFailed, 4: runlog.StateCancelled,
			5: runlog.StateReplanRequested, 6: runlog.StateTerminated, 7: runlog.StateHeld}
		if n < 1 || n >= len(legacy) {
			return fmt.Errorf("an end record's state %d is no state", n)
		}
		e.State = legacy[n]
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	e.State = runlog.State(s).Current()
	return nil
}
