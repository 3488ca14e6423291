package run

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// ErrUnavailable: the journal cannot take the run (its store is down, say).
var ErrUnavailable = errors.New("the run journal is unavailable")

// ErrResumable ends the stream of a run this orchestrator stopped driving (it shuts
// down, or its journal failed or another took the run over) while the run goes on: an
// orchestrator sharing the journal continues it, and WatchRun shows its events.
var ErrResumable = errors.New("this orchestrator stopped driving the run, which continues on another sharing its journal")

// durable reports whether the journal outlives this process (not OpenMemory's).
func durable(s runlog.Store) bool {
	v, ok := s.(interface{ Volatile() bool })
	return !ok || !v.Volatile()
}

// errInJournal refuses a run id the journal keeps a run of; it is an ErrExists.
var errInJournal = existsError("a run with that id is in the journal (run ids are unique among the runs it keeps)")

type existsError string

func (e existsError) Error() string        { return string(e) }
func (e existsError) Is(target error) bool { return target == ErrExists }

// derivedID is an id that follows from the call that needs it: the same call of a
// resumed run gets the same id.
func derivedID(prefix string, info tool.CallInfo) string {
	h := sha256.Sum256([]byte(callKey(info)))
	return prefix + hex.EncodeToString(h[:8])
}

// snapshotEvery is the records between two snapshots of a run's replay state; none in a
// journal that does not outlive the process, where no run is ever resumed.
func (s *Service) snapshotEvery() int64 {
	if !durable(s.journal) {
		return 0
	}
	return int64(cmpOr(s.cfg.Journal.SnapshotEvery, 256))
}

func (s *Service) leaseTTL() time.Duration {
	return cmpOr(time.Duration(s.cfg.Journal.LeaseTTL), 10*time.Second)
}

// offeredRoles are the groups a request is offered: its required ones, its own and the
// config's defaults.
func offeredRoles(req Request, defaults []string) []string {
	roles := make([]string, 0, len(req.Required)+len(req.Groups)+len(defaults))
	for _, rq := range req.Required {
		roles = append(roles, rq.Role)
	}
	return append(append(roles, req.Groups...), defaults...)
}

// leaseRenewer renews the leases of the service's journals.
func (s *Service) leaseRenewer() *renewer {
	s.renewOnce.Do(func() { s.renew = newRenewer(s.leaseTTL()) })
	return s.renew
}

// openJournal gives a run its journal: a new run's (created with its request record), or
// the one a taken-over run resumes.
func (s *Service) openJournal(ctx context.Context, j *journal, id, loopID string, started time.Time, p *prepared, cancel context.CancelCauseFunc, observe func(Event)) (*journal, error) {
	deliver := func(sq Sequenced) {
		if observe != nil {
			observe(sq)
		}
	}
	if j != nil {
		j.setStop(cancel)
		j.setDeliver(deliver)
		j.start()
		return j, nil
	}
	// The run and its request are created together: a run the journal holds can always
	// be resumed from its request.
	data, _ := toolinternal.MarshalJSON(requestRecord{RunID: id, LoopID: loopID, Started: started, Wire: p.req.Wire, Tenant: p.req.Tenant, Caller: p.req.Caller.orNil(),
		Versions: s.router.Versions(offeredRoles(*p.req, s.cfg.Loop.DefaultToolGroups), p.req.Tools),
		Without:  warnedRoles(p.warnings), Agent: p.req.Agent, Model: llm.Label(p.provider, p.model)})
	leaseEnd := time.Now().Add(s.leaseTTL()) // the creation's lease ends no later
	lease, err := s.journal.Create(ctx, id, s.owner, s.leaseTTL(), runlog.Record{Seq: 1, Kind: runlog.KindRequest, Time: time.Now(), Data: data})
	if err != nil && !errors.Is(err, runlog.ErrExists) && !errors.Is(err, runlog.ErrInvalid) {
		// The creation's outcome is unknown: a store may commit a write whose caller gave
		// up, or whose answer was lost (a connection broken after its commit). A run
		// created so, which its client is told was refused, went on later, taken over
		// once its lease ran out and driven for nobody. It is ended, should it be there.
		// When the client is still there, before the refusal and within the creation's
		// lease: the run's id stays taken here meanwhile, so a client that tries again
		// under it finds the id free or the run ended, never its new run ended by this.
		// When the client went away (or the orchestrator stops), in the background: the
		// end's sequence number (2) then fails on a run created again that went on.
		if ctx.Err() != nil {
			go s.endAbandoned(id, context.Cause(ctx), abandonedTimeout)
		} else if left := time.Until(leaseEnd); left > 0 {
			// Past the lease another orchestrator may have taken the run over: the
			// finish, under the creation's lease, would be refused then.
			s.endAbandoned(id, err, left)
		}
	}
	switch {
	case errors.Is(err, runlog.ErrExists):
		return nil, errInJournal
	case errors.Is(err, runlog.ErrInvalid):
		return nil, fieldErr("run_id", ErrInvalid, "%v", err)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	failpoint.Hit(failpoint.RunCreated)
	j = newJournal(s.journal, s.leaseRenewer(), lease, s.leaseTTL(), s.codec, 2)
	j.snapEvery = s.snapshotEvery()
	j.setStop(cancel)
	j.setDeliver(deliver)
	j.start()
	return j, nil
}

func endOf(snap Snapshot) endRecord {
	e := endRecord{State: endState{snap.State}, FinalText: snap.FinalText, Reason: snap.Reason, Iterations: snap.Iterations,
		ToolCalls: snap.ToolCalls, Usage: snap.Usage, CostUSD: snap.CostUSD, Ended: snap.Ended, TraceID: snap.TraceID}
	if snap.Err != nil {
		e.Error = snap.Err.Error()
	}
	return e
}

// Resume takes over the journal's runs this orchestrator may drive: its own unfinished
// runs (it restarted) and those whose owner stopped renewing their lease. Each continues
// in the background; Resume returns how many it took.
func (s *Service) Resume(ctx context.Context) (int, error) {
	return s.takeOver(ctx, true)
}

// takeOver takes over the runs whose lease expired and, with own (at start), this
// orchestrator's own unfinished runs. It never takes a run that runs here or is being
// resumed here, nor more than the free room for runs.
func (s *Service) takeOver(ctx context.Context, own bool) (int, error) {
	if s.journal == nil {
		return 0, nil
	}
	total := 0
	for {
		ids, full, err := s.takeable(ctx, own)
		if err != nil {
			return total, err
		}
		n := s.acquireAll(ctx, ids)
		total += n
		// A full page of expired runs may have more behind it: those taken no longer
		// expire, and the next page follows.
		if own || !full || n == 0 {
			return total, nil
		}
	}
}

// takeable lists the runs takeOver may take: at start (own), every unfinished run,
// this orchestrator's own, those whose lease expired and held ones; later, the runs
// whose lease expired only, at most a page of them (full: the page is full), so that a
// replica's periodic look costs what expired, not every run open anywhere.
func (s *Service) takeable(ctx context.Context, own bool) (ids []string, full bool, err error) {
	if !own {
		runs, err := s.journal.Expired(ctx, 0)
		if err != nil {
			return nil, false, err
		}
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids, len(runs) >= runlog.MaxList, nil
	}
	seen := map[string]bool{}
	// Held runs are tried again: an operator who restarts an orchestrator (after
	// repairing a record, or with a version that reads it) resumes them.
	for _, state := range []runlog.State{runlog.StateRunning, runlog.StateHeld} {
		for after := ""; ; {
			runs, err := s.journal.List(ctx, runlog.Filter{State: state, After: after})
			if err != nil {
				return nil, false, err
			}
			for _, r := range runs {
				if (state == runlog.StateHeld || r.Owner == s.owner || time.Now().After(r.Until)) && !seen[r.ID] {
					seen[r.ID] = true
					ids = append(ids, r.ID)
				}
			}
			if len(runs) < runlog.MaxList {
				break
			}
			after = runs[len(runs)-1].ID
		}
	}
	return ids, false, nil
}

// acquireAll takes the leases of ids and resumes each run as soon as its lease is
// taken, skipping those that run or are being resumed here and stopping once there is
// no room for runs; it returns how many it took.
func (s *Service) acquireAll(ctx context.Context, ids []string) int {
	// Leases are taken several at a time (each is a transaction of its own), and each
	// run resumes as soon as its lease is taken; takeOver returns once every lease is
	// taken or refused.
	var taken atomic.Int64
	var acquiring sync.WaitGroup
	slots := make(chan struct{}, acquireParallel)
	for _, id := range ids {
		if s.store.isLive(id) {
			continue // it runs here (or is finishing here)
		}
		if s.store.liveCount()+s.resumingCount() >= s.cfg.Loop.MaxConcurrentRuns {
			break // no room: another replica with room takes it
		}
		if _, busy := s.resuming.LoadOrStore(id, true); busy {
			continue // being resumed here
		}
		slots <- struct{}{}
		acquiring.Add(1)
		go func() {
			lease, err := s.journal.Acquire(ctx, id, s.owner, s.leaseTTL())
			<-slots
			if err != nil {
				acquiring.Done()
				s.resuming.Delete(id)
				return // another replica took it, or it finished
			}
			taken.Add(1)
			acquiring.Done()
			defer s.resuming.Delete(id)
			s.resume(lease)
		}()
	}
	acquiring.Wait()
	return int(taken.Load())
}

// acquireParallel is how many leases takeOver takes at once.
const acquireParallel = 16

func (s *Service) resumingCount() int {
	n := 0
	s.resuming.Range(func(any, any) bool { n++; return true })
	return n
}

// resume continues a run taken over from the journal: it replays what the journal holds
// and goes on live from there.
func (s *Service) resume(lease runlog.Lease) {
	failpoint.Hit(failpoint.ResumeAcquired)
	ctx := context.Background()
	id := lease.RunID
	log := s.log.With("run_id", id, "epoch", lease.Epoch)
	// What it replays: from its last snapshot on, and its request.
	st, first, last, err := readReplay(ctx, s.journal, id)
	switch {
	case errors.Is(err, runlog.ErrDamaged), errors.Is(err, ErrDamaged):
		s.hold(ctx, lease, err)
		return
	case err != nil:
		log.Error("a run taken over cannot be read from the journal; it stays for the next try", "error", err.Error())
		return
	}
	if first == nil || first.Kind != runlog.KindRequest {
		// A journal written before runs were created with their request: the run never
		// started. It ends, so that nothing waits for it.
		log.Error("a run taken over has no request record; it ends failed")
		_ = s.journal.Finish(ctx, lease, runlog.StateFailed)
		return
	}
	var rq requestRecord
	if err := json.Unmarshal(first.Data, &rq); err != nil {
		s.hold(ctx, lease, fmt.Errorf("%w: record 1, the request: %v", ErrDamaged, err))
		return
	}
	j := newJournal(s.journal, s.leaseRenewer(), lease, s.leaseTTL(), s.codec, last+1)
	j.snapEvery = s.snapshotEvery()
	if err := j.load(st); err != nil {
		s.hold(ctx, lease, fmt.Errorf("%w: %v", ErrDamaged, err))
		return
	}
	// A cancel asked while nobody drove the run (CancelRun on another replica): it ends
	// at its first live step, once the steps its client saw are replayed, rather than
	// at its first renewal, a live step or more later. Unread, the renewal finds it.
	switch asked, ok, err := s.journal.Decision(ctx, id, cancelKey); {
	case err != nil:
		log.Warn("a run taken over: whether it was asked to cancel could not be read; its lease's renewal reads it", "error", err.Error())
	case ok:
		j.cancelled(asked.Reason)
	}
	// The lease is renewed from now on: waiting for the run's tool groups may take longer
	// than it lasts.
	waitCtx, stopWaiting := context.WithCancelCause(ctx)
	defer stopWaiting(nil)
	j.setStop(stopWaiting)
	j.start()
	req, err := s.codec.Request(rq.Wire)
	var p *prepared
	if err == nil {
		req.ID, req.Wire, req.Tenant, req.Pinned, req.Without = id, rq.Wire, rq.Tenant, rq.Versions, rq.Without
		if rq.Caller != nil {
			req.Caller = *rq.Caller
		}
		p, err = s.prepareResumed(waitCtx, req)
	}
	if waitCtx.Err() != nil {
		_ = j.close() // the lease went to another orchestrator meanwhile
		return
	}
	if err != nil {
		// It cannot run here (a config that changed, say): it ends, failed, saying why.
		log.Error("a run taken over cannot continue", "error", err.Error())
		failed := errors.New("the run could not be resumed: " + err.Error())
		// Its last event says so, as any run's end does: a client watching it sees how
		// it ended, as GetRun says.
		j.event(Ended{RunID: id, Err: &Error{RunID: id, Err: failed}})
		_ = j.finish(endRecord{State: endState{runlog.StateFailed}, Error: failed.Error(), Ended: time.Now()})
		return
	}
	log.Info("resuming a run", "records", last)
	if _, err := s.launch(ctx, p, id, rq.LoopID, rq.Started, j, nil); err != nil {
		var re *Error
		if !errors.As(err, &re) {
			// Refused here (full, closing): the lease runs out and another takes it.
			log.Warn("a run taken over did not start", "error", err.Error())
			_ = j.close()
		}
	}
}

// endAbandoned ends, cancelled, run id should its creation, whose outcome its creator
// does not know (the store failed, or the client went away meanwhile), have committed,
// trying for up to within: a finish under the creation's lease commits after the
// creation, the stores keeping a run's writes in order, and finds no run where none
// was created.
func (s *Service) endAbandoned(id string, why error, within time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	reason := "the run's creation failed, or its client went away meanwhile"
	if why != nil {
		reason += ": " + why.Error()
	}
	reason = runlog.Note(reason)
	data, _ := toolinternal.MarshalJSON(endRecord{State: endState{runlog.StateCancelled}, Error: reason, Reason: reason, Ended: time.Now()})
	lease := runlog.Lease{RunID: id, Owner: s.owner, Epoch: 1}
	switch err := s.journal.Finish(ctx, lease, runlog.StateCancelled, runlog.Record{Seq: 2, Kind: runlog.KindEnd, Time: time.Now(), Data: data}); {
	case err == nil:
		s.log.Info("a run whose creation was refused to its client, but committed, is ended", "run_id", id)
	case errors.Is(err, runlog.ErrNotFound):
	default:
		s.log.Warn("a run whose creation was refused to its client could not be ended, should it have committed; its next owner would resume it", "run_id", id, "error", err.Error())
	}
}

// abandonedTimeout bounds endAbandoned's finish: longer than a store takes to fail a
// commit that hangs (PostgreSQL's commits give up after a minute).
const abandonedTimeout = 2 * time.Minute

// hold stops a run that cannot go on because its journal holds a record that cannot be
// read back (why): it is left for an operator, held, never driven on without it. The
// error goes to the log and becomes the run's note, which GetRun reports.
func (s *Service) hold(ctx context.Context, lease runlog.Lease, why error) {
	// The reason may quote what the record held: the note is made text any store keeps,
	// cut at a character.
	note := runlog.Note(why.Error())
	s.log.Error("a run is held for an operator: its journal holds a record that cannot be read", "run_id", lease.RunID, "error", note)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.journal.Hold(hctx, lease, note); err != nil {
		s.log.Warn("a damaged run could not be held; its next owner finds it so too", "run_id", lease.RunID, "error", err.Error())
	}
}

// warnedRoles are the tool groups warnings say a run starts without.
func warnedRoles(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		if w.Role != "" && !slices.Contains(out, w.Role) {
			out = append(out, w.Role)
		}
	}
	return out
}

// prepareResumed prepares a run taken over, waiting up to journal.resume_grace for the
// tool groups and tools it asks for to be served again: after an orchestrator restarts,
// its workers register anew. Whatever the request's preparation refuses is tried again
// until then (a tool an agentic tool names, which no worker serves yet, reads as an
// invalid request), and the run fails only once the grace has passed.
func (s *Service) prepareResumed(ctx context.Context, req Request) (*prepared, error) {
	deadline := time.Now().Add(cmpOr(time.Duration(s.cfg.Journal.ResumeGrace), 15*time.Second))
	for {
		p, err := s.prepare(ctx, req)
		if err == nil && len(p.warnings) == 0 {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Record is one event of a run as the journal keeps it: its wire form (Codec.Event), or
// in a journal written before events were kept in binary, its wire form in protobuf
// JSON (JSON set).
type Record struct {
	Seq  int64
	Time time.Time
	Data []byte
	JSON bool
}

// ErrWatchStopped ends a watch whose stop was closed while its run had not ended.
var ErrWatchStopped = errors.New("the watch was stopped")

// Watch hands send the events of run id after sequence number after, from the journal,
// then as they are committed, until the run ends (or ctx does, or send fails). Any
// replica sharing the journal watches any run. Once stop is closed the watch waits for
// nothing more: it hands send what the journal holds, and ends (ErrWatchStopped unless
// the run ended).
func (s *Service) Watch(ctx context.Context, id string, after int64, stop <-chan struct{}, send func(Record) error) error {
	if s.journal == nil {
		return fmt.Errorf("%w: this orchestrator keeps no journal (journal.driver)", ErrUnavailable)
	}
	if _, err := s.journal.Get(ctx, id); err != nil {
		if errors.Is(err, runlog.ErrNotFound) {
			return fmt.Errorf("%w %q", ErrNotFound, id)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	ended := false
	for {
		var wake <-chan struct{}
		if r := s.store.get(id); r != nil && !r.isStopped() {
			if j := r.journal(); j != nil {
				j.mu.Lock()
				wake = j.committedChan()
				j.mu.Unlock()
			}
		}
		// A page of events at a time: a run's other records can be large and stay in
		// the store.
		recs, err := s.journal.Read(ctx, id, after, watchPage, runlog.KindEvent, runlog.KindDelta)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		for _, rec := range recs {
			after = rec.Seq
			wire, isJSON, err := EventWire(rec.Data)
			if err != nil {
				return fmt.Errorf("%w: record %d of run %s: %v", ErrUnavailable, rec.Seq, id, err)
			}
			if err := send(Record{Seq: rec.Seq, Time: rec.Time, Data: wire, JSON: isJSON}); err != nil {
				return err
			}
		}
		if len(recs) == watchPage {
			continue
		}
		if ended {
			return nil // read after the run was seen ended: nothing more can come
		}
		run, err := s.journal.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if run.State.Terminal() {
			// Its events were all committed before it ended: the next reads find the rest.
			ended = true
			continue
		}
		if wake == nil {
			t := time.NewTimer(100 * time.Millisecond) // another replica's run
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-stop:
				t.Stop()
				return ErrWatchStopped
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrWatchStopped
		case <-wake:
		case <-time.After(time.Second): // the run went on elsewhere
		}
	}
}

// cancelElsewhere asks the orchestrator that drives a run to cancel it: the request is
// recorded in the journal, where the run's owner finds it when it next renews the lease
// (within a third of journal.lease_ttl), or the replica that takes the run over does.
// It waits, at most 10 seconds, for the run to end and returns the state it is in.
func (s *Service) cancelElsewhere(ctx context.Context, id, reason string) (runlog.State, error) {
	if reason == "" {
		reason = "cancelled by client"
	}
	switch err := s.journal.Decide(ctx, id, cancelKey, runlog.Decision{Reason: reason, By: s.owner}); {
	case err == nil, errors.Is(err, runlog.ErrExists): // asked before: the first reason stands
	case errors.Is(err, runlog.ErrFinished):
	case errors.Is(err, runlog.ErrNotFound):
		return "", fmt.Errorf("%w %q", ErrNotFound, id)
	default:
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	for {
		snap, err := s.fromJournal(wait, id)
		if err == nil && snap.State == runlog.StateHeld {
			// Its owner held it (a resume that met a damaged record) instead of ending
			// it: nobody drives it now, and the cancel is for the held run.
			return s.cancelHeldOnce(ctx, id, reason)
		}
		if err == nil && snap.State != runlog.StateRunning {
			return snap.State, nil
		}
		select {
		case <-wait.Done():
			return runlog.StateRunning, nil // asked; it ends when its owner sees the request
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cancelHeld ends a held run, cancelled: nobody drives it, so this replica takes its
// lease and finishes it with its end record.
func (s *Service) cancelHeld(ctx context.Context, id, reason string) (runlog.State, error) {
	st, leased, err := s.finishHeld(ctx, id, reason)
	if leased {
		return s.cancelElsewhere(ctx, id, reason) // an orchestrator took it meanwhile
	}
	return st, err
}

// cancelHeldOnce is cancelHeld for a run whose owner held it while a cancel waited: an
// orchestrator that takes it again meanwhile is left the cancel request.
func (s *Service) cancelHeldOnce(ctx context.Context, id, reason string) (runlog.State, error) {
	st, leased, err := s.finishHeld(ctx, id, reason)
	if leased {
		return runlog.StateRunning, nil // asked; it ends when its owner sees the request
	}
	return st, err
}

// finishHeld takes a held run's lease and finishes it, cancelled; leased says another
// orchestrator holds its lease.
func (s *Service) finishHeld(ctx context.Context, id, reason string) (_ runlog.State, leased bool, _ error) {
	if reason == "" {
		reason = "cancelled by client"
	}
	lease, err := s.journal.Acquire(ctx, id, s.owner, s.leaseTTL())
	switch {
	case errors.Is(err, runlog.ErrFinished):
		snap, err := s.fromJournal(ctx, id)
		return snap.State, false, err
	case errors.Is(err, runlog.ErrLeased):
		return "", true, nil
	case err != nil:
		return "", false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	run, err := s.journal.Get(ctx, id)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	end, _ := toolinternal.MarshalJSON(endRecord{State: endState{runlog.StateCancelled}, Error: fmt.Errorf("%w: %s", ErrCancelled, reason).Error(), Ended: time.Now()})
	if err := s.journal.Finish(ctx, lease, runlog.StateCancelled, runlog.Record{Seq: run.Records + 1, Kind: runlog.KindEnd, Time: time.Now(), Data: end}); err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return runlog.StateCancelled, false, nil
}

// watchPage is how many events Watch reads from the journal at a time.
const watchPage = 64

// Summary is a run as ListRuns lists it.
type Summary struct {
	ID      string
	State   runlog.State
	Owner   string
	Records int64
	Started time.Time
	Updated time.Time
	// Facts are read with facts only (the agent and model; no trace id).
	Facts
}

// List lists the journal's runs by id: those in state (0: all) after the id after, at
// most limit; with facts, each with what it was started with (a read of its request
// record each).
func (s *Service) List(ctx context.Context, state runlog.State, after string, limit int, facts bool) ([]Summary, error) {
	if s.journal == nil {
		return nil, fmt.Errorf("%w: this orchestrator keeps no journal (journal.driver)", ErrUnavailable)
	}
	f := runlog.Filter{After: after, Limit: limit}
	if state != "" {
		f.State = state
	}
	runs, err := s.journal.List(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	out := make([]Summary, 0, len(runs))
	for _, r := range runs {
		st := r.State.Current()
		if r.State == runlog.StateEnded {
			st = s.endedAs(ctx, r)
		}
		if state != "" && st != state {
			continue // a legacy "ended" run of the other kind
		}
		sum := Summary{ID: r.ID, State: st, Owner: r.Owner, Records: r.Records, Started: r.Created, Updated: r.Updated}
		if facts {
			sum.Facts, _ = s.factsOf(ctx, r.ID) // a run whose request cannot be read lists without
		}
		out = append(out, sum)
	}
	return out, nil
}

// endedAs is how a run a journal of an earlier version holds as "ended" (a replan or a
// termination) ended, as its end record says; terminated when the record cannot say.
func (s *Service) endedAs(ctx context.Context, r runlog.Run) runlog.State {
	recs, err := s.journal.Read(ctx, r.ID, r.Records-1, 1)
	var e endRecord
	if err == nil && len(recs) == 1 && recs[0].Kind == runlog.KindEnd && json.Unmarshal(recs[0].Data, &e) == nil && e.State.Terminal() {
		return e.State.State
	}
	return runlog.StateTerminated
}

// fromJournal reports a run this orchestrator does not hold in memory, from the journal.
func (s *Service) fromJournal(ctx context.Context, id string) (Snapshot, error) {
	run, err := s.journal.Get(ctx, id)
	if errors.Is(err, runlog.ErrNotFound) {
		return Snapshot{}, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	snap := Snapshot{runState: runState{ID: id, State: run.State.Current(), Started: run.Created}}
	snap.Facts, _ = s.factsOf(ctx, id)
	if run.State == runlog.StateHeld {
		snap.Err = fmt.Errorf("%w: %s", ErrDamaged, run.Note)
		return snap, nil
	}
	if !run.State.Terminal() {
		return snap, nil
	}
	snap.Ended = run.Updated
	recs, err := s.journal.Read(ctx, id, run.Records-1, 1)
	if err == nil && len(recs) == 1 && recs[0].Kind == runlog.KindEnd {
		var e endRecord
		if json.Unmarshal(recs[0].Data, &e) == nil {
			snap.State, snap.FinalText, snap.Reason = e.State.State, e.FinalText, e.Reason
			snap.Iterations, snap.ToolCalls, snap.Usage, snap.CostUSD, snap.Ended = e.Iterations, e.ToolCalls, e.Usage, e.CostUSD, e.Ended
			snap.TraceID = e.TraceID
			if e.Error != "" {
				snap.Err = errors.New(e.Error)
			}
		}
	}
	return snap, nil
}

// factsOf reads what run id was started with from its request record. A record of an
// earlier version names no model, and its agent only in the request.
func (s *Service) factsOf(ctx context.Context, id string) (Facts, error) {
	recs, err := s.journal.Read(ctx, id, 0, 1, runlog.KindRequest)
	if err != nil || len(recs) == 0 {
		return Facts{}, err
	}
	var rr requestRecord
	if err := json.Unmarshal(recs[0].Data, &rr); err != nil {
		return Facts{}, err
	}
	f := Facts{Agent: rr.Agent, Model: rr.Model}
	if f.Agent == "" {
		var w struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(rr.Wire, &w)
		f.Agent = w.Agent
	}
	return f, nil
}

// Maintain takes over runs whose owner went away and prunes finished runs past
// journal.retain, every half lease, until ctx ends.
func (s *Service) Maintain(ctx context.Context) {
	if s.journal == nil {
		return
	}
	t := time.NewTicker(s.leaseTTL() / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.store.isClosed() {
			return
		}
		if n, err := s.takeOver(ctx, false); err != nil {
			s.log.Warn("taking over runs", "error", err.Error())
		} else if n > 0 {
			s.log.Info("took over runs whose owner stopped", "runs", strconv.Itoa(n))
		}
		s.prune(ctx)
	}
}

// prune deletes the finished runs past journal.retain, a page of them after another
// (runs may end faster than one page a tick), for up to a quarter of a lease.
func (s *Service) prune(ctx context.Context) {
	retain := cmpOr(time.Duration(s.cfg.Journal.Retain), 7*24*time.Hour)
	until := time.Now().Add(s.leaseTTL() / 4)
	for {
		n, err := s.journal.Prune(ctx, time.Now().Add(-retain), runlog.MaxList)
		if err != nil {
			s.log.Warn("pruning the journal", "error", err.Error())
			return
		}
		if n < runlog.MaxList || time.Now().After(until) || ctx.Err() != nil {
			return
		}
	}
}

// TenantUsage is a tenant's use of its quotas on this orchestrator.
type TenantUsage struct {
	Tenant string
	// Running are its runs in progress here; MaxRunning its bound (0: none of its own).
	Running, MaxRunning int
	// ToolCallsPerMinute and ModelCallsPerMinute are its buckets' sizes (0: unbounded);
	// ToolCallsAvailable and ModelCallsAvailable what they hold now.
	ToolCallsPerMinute, ModelCallsPerMinute int
	ToolCallsAvailable, ModelCallsAvailable float64
}

// Tenants reports the use of the quotas of each configured tenant, sorted by name.
func (s *Service) Tenants() []TenantUsage {
	names := slices.Sorted(maps.Keys(s.cfg.Tenants))
	out := make([]TenantUsage, 0, len(names))
	now := time.Now()
	for _, name := range names {
		t := s.cfg.Tenants[name]
		u := TenantUsage{Tenant: name, Running: s.store.tenantLive(name), MaxRunning: t.MaxConcurrentRuns,
			ToolCallsPerMinute: t.ToolCallsPerMinute, ModelCallsPerMinute: t.ModelCallsPerMinute}
		if n := t.ToolCallsPerMinute; n > 0 {
			u.ToolCallsAvailable = max(0, s.perMinute(&s.rates, name, n).TokensAt(now))
		}
		if n := t.ModelCallsPerMinute; n > 0 {
			u.ModelCallsAvailable = max(0, s.perMinute(&s.modelRates, name, n).TokensAt(now))
		}
		out = append(out, u)
	}
	return out
}
