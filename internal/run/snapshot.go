package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// replayState is what a resumed run needs of its journal: the records its replay reads
// (the last of each key, as they were written) and the keys of the events the client
// saw. A run's records fold into it in order; a snapshot record holds it whole, so that
// a resume reads the last snapshot and the records after it rather than the journal.
type replayState struct {
	upto       int64 // the last record folded in
	models     map[string]json.RawMessage
	dispatched map[string]bool
	outcomes   map[string]json.RawMessage
	// outcomeSeqs are the outcomes' places in the journal: the order the calls of one
	// turn ended in, which their replay keeps (journal.recordedAt).
	outcomeSeqs map[string]int64
	approvals   map[string]json.RawMessage
	decisions   map[string]json.RawMessage
	policies    map[string]json.RawMessage
	seen        map[string]bool
	// loops are when the nested loops the run started started and finished, by their
	// events' keys (nested-started/ID, nested-finished/ID): a replay starts a subagent's
	// run at its first start, and orders and times an agentic tool's call by its loop.
	loops map[string]loopMark
}

// loopMark is where and when a nested loop's start or end is in the journal.
type loopMark struct {
	Key  string    `json:"key"`
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
}

func newReplayState() *replayState {
	return &replayState{models: map[string]json.RawMessage{}, dispatched: map[string]bool{}, outcomes: map[string]json.RawMessage{}, outcomeSeqs: map[string]int64{},
		approvals: map[string]json.RawMessage{}, decisions: map[string]json.RawMessage{}, policies: map[string]json.RawMessage{},
		seen: map[string]bool{}, loops: map[string]loopMark{}}
}

// snapshotRecord is a snapshot's data: the state up to record Upto.
type snapshotRecord struct {
	Upto       int64             `json:"upto"`
	Models     []json.RawMessage `json:"models,omitempty"`
	Dispatched []string          `json:"dispatched,omitempty"`
	Outcomes   []json.RawMessage `json:"outcomes,omitempty"`
	// OutcomeSeqs are the Outcomes' sequence numbers, in their order (snapshots written
	// before have none: their outcomes replay in no order of their own).
	OutcomeSeqs []int64           `json:"outcome_seqs,omitempty"`
	Approvals   []json.RawMessage `json:"approvals,omitempty"`
	Decisions   []json.RawMessage `json:"decisions,omitempty"`
	Policies    []json.RawMessage `json:"policies,omitempty"`
	Seen        []string          `json:"seen,omitempty"`
	Loops       []loopMark        `json:"loops,omitempty"`
}

// keyOf reads the key every record of the replay carries.
func keyOf(data []byte) (string, error) {
	var k struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(data, &k); err != nil {
		return "", err
	}
	return k.Key, nil
}

// add folds record r in; records come in order. A snapshot replaces the state with its
// own when it covers more.
func (st *replayState) add(r runlog.Record) error {
	var err error
	keep := func(m map[string]json.RawMessage) {
		var key string
		if key, err = keyOf(r.Data); err == nil {
			m[key] = r.Data
		}
	}
	switch r.Kind {
	case runlog.KindModel:
		keep(st.models)
	case runlog.KindOutcome:
		var key string
		if key, err = keyOf(r.Data); err == nil {
			st.outcomes[key], st.outcomeSeqs[key] = r.Data, r.Seq
		}
	case runlog.KindApproval:
		keep(st.approvals)
	case runlog.KindDecision:
		keep(st.decisions)
	case runlog.KindPolicy:
		keep(st.policies)
	case runlog.KindDispatch:
		var d dispatchRecord
		if err = json.Unmarshal(r.Data, &d); err == nil {
			st.dispatched[d.Key] = true
		}
	case runlog.KindEvent, runlog.KindDelta:
		if len(r.Data) > 0 {
			var key string
			if key, _, _, err = decodeEvent(r.Data); err == nil {
				st.seen[key] = true
				if strings.HasPrefix(key, "nested-") {
					st.loops[key] = loopMark{Key: key, Seq: r.Seq, Time: r.Time}
				}
			}
		}
	case runlog.KindSnapshot:
		// The snapshot covers the records up to its Upto, not those between them and
		// itself.
		if err = st.addSnapshot(r.Data); err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("record %d: %w", r.Seq, err)
	}
	st.upto = max(st.upto, r.Seq)
	return nil
}

// addSnapshot takes a snapshot's state in place of what was folded in before it (which it
// covers). A snapshot that covers no more than what was folded in already is ignored:
// a resume reads its last snapshot, then the records after what it covers, the
// snapshot among them.
func (st *replayState) addSnapshot(data []byte) error {
	var s snapshotRecord
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("a snapshot: %w", err)
	}
	if s.Upto <= st.upto {
		return nil
	}
	fresh := newReplayState()
	fresh.upto = s.Upto
	for _, raws := range []struct {
		from []json.RawMessage
		to   map[string]json.RawMessage
	}{{s.Models, fresh.models}, {s.Outcomes, fresh.outcomes}, {s.Approvals, fresh.approvals}, {s.Decisions, fresh.decisions}, {s.Policies, fresh.policies}} {
		for _, raw := range raws.from {
			key, err := keyOf(raw)
			if err != nil {
				return fmt.Errorf("a snapshot: %w", err)
			}
			raws.to[key] = raw
		}
	}
	if len(s.OutcomeSeqs) == len(s.Outcomes) {
		for i, raw := range s.Outcomes {
			key, _ := keyOf(raw) // read above
			fresh.outcomeSeqs[key] = s.OutcomeSeqs[i]
		}
	}
	for _, k := range s.Dispatched {
		fresh.dispatched[k] = true
	}
	for _, k := range s.Seen {
		fresh.seen[k] = true
	}
	for _, m := range s.Loops {
		fresh.loops[m.Key] = m
	}
	*st = *fresh
	return nil
}

// encode is the snapshot record of the state, its lists in key order.
func (st *replayState) encode() []byte {
	values := func(m map[string]json.RawMessage) []json.RawMessage {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make([]json.RawMessage, len(keys))
		for i, k := range keys {
			out[i] = m[k]
		}
		return out
	}
	set := func(m map[string]bool) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	var seqs []int64
	if len(st.outcomeSeqs) == len(st.outcomes) {
		seqs = make([]int64, 0, len(st.outcomes))
		for _, k := range slices.Sorted(maps.Keys(st.outcomes)) { // values' order
			seqs = append(seqs, st.outcomeSeqs[k])
		}
	}
	data, _ := toolinternal.MarshalJSON(snapshotRecord{Upto: st.upto, Models: values(st.models), Dispatched: set(st.dispatched),
		Outcomes: values(st.outcomes), OutcomeSeqs: seqs, Approvals: values(st.approvals), Decisions: values(st.decisions),
		Policies: values(st.policies), Seen: set(st.seen),
		Loops: slices.SortedFunc(maps.Values(st.loops), func(a, b loopMark) int { return cmp.Compare(a.Key, b.Key) })})
	return data
}

// load takes what a run recorded before, for its replay: its records folded into st.
func (j *journal) load(st *replayState) error {
	j.models, j.outcomes = orMake(j.models, len(st.models)), orMake(j.outcomes, len(st.outcomes))
	j.loops = st.loops
	j.approvals, j.decisions = orMake(j.approvals, len(st.approvals)), orMake(j.decisions, len(st.decisions))
	j.dispatched, j.seen = orMake(j.dispatched, len(st.dispatched)), orMake(j.seen, len(st.seen))
	for key, raw := range st.models {
		var m modelRecord
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("the model's answer %s: %w", key, err)
		}
		if m.Error != "" {
			if j.modelErrs == nil {
				j.modelErrs = map[string]error{}
			}
			j.modelErrs[key] = replayedModelError{text: m.Error, kind: m.ErrorKind}
			continue
		}
		j.models[key] = m.Response
		if !m.OwnIDs {
			if j.sharedIDs == nil {
				j.sharedIDs = map[string]bool{}
			}
			j.sharedIDs[key] = true
		}
	}
	for key, raw := range st.outcomes {
		var o outcomeRecord
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("the outcome of call %s: %w", key, err)
		}
		j.outcomes[key] = o.Data
		if o.Took != 0 || o.Worker != "" || o.Attempts != 0 {
			if j.callMetas == nil {
				j.callMetas = map[string]callMeta{}
			}
			j.callMetas[key] = callMeta{took: o.Took, worker: o.Worker, attempts: o.Attempts}
		}
		if seq, ok := st.outcomeSeqs[key]; ok {
			if j.outcomeSeqs == nil {
				j.outcomeSeqs = make(map[string]int64, len(st.outcomeSeqs))
			}
			j.outcomeSeqs[key] = seq
		}
	}
	for key, raw := range st.approvals {
		var a approvalRecord
		if err := json.Unmarshal(raw, &a); err != nil {
			return fmt.Errorf("the approval of call %s: %w", key, err)
		}
		j.approvals[key] = a
	}
	for key, raw := range st.decisions {
		var d decisionRecord
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("the decision on call %s: %w", key, err)
		}
		j.decisions[key] = d
	}
	for key, raw := range st.policies {
		var p policyRecord
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("the policy's decision on call %s: %w", key, err)
		}
		if j.policies == nil {
			j.policies = map[string]policyRecord{}
		}
		j.policies[key] = p
	}
	for key := range st.dispatched {
		j.dispatched[key] = true
	}
	for key := range st.seen {
		j.seen[key] = true
	}
	j.snapUpto = st.upto
	return nil
}

// readReplay reads what a resumed run replays: from its last snapshot on, or, without
// one, its whole journal. It returns the state, the run's first record (its request, nil
// when the journal holds none) and the last record's sequence number.
func readReplay(ctx context.Context, store runlog.Store, id string) (*replayState, *runlog.Record, int64, error) {
	st := newReplayState()
	after := int64(0)
	var first *runlog.Record
	snap, found, err := store.Last(ctx, id, runlog.KindSnapshot)
	if err != nil {
		return nil, nil, 0, err
	}
	if found {
		recs, err := store.Read(ctx, id, 0, 1)
		if err != nil {
			return nil, nil, 0, err
		}
		if len(recs) == 1 {
			first = &recs[0]
		}
		if err := st.add(snap); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		after = st.upto
	}
	last := after
	for {
		recs, err := store.Read(ctx, id, after, replayPage)
		if err != nil {
			return nil, nil, 0, err
		}
		for i, r := range recs {
			if first == nil && r.Seq == 1 {
				first = &recs[i]
			}
			if err := st.add(r); err != nil {
				return nil, nil, 0, fmt.Errorf("%w: %v", ErrDamaged, err)
			}
			after, last = r.Seq, r.Seq
		}
		if len(recs) < replayPage {
			return st, first, last, nil
		}
	}
}

// replayPage is how many records a resume reads at a time.
const replayPage = 1024

// maybeSnapshot starts a snapshot once the run has committed snapEvery records since
// the last one, and records at least half the last one's size. j.mu is held.
func (j *journal) maybeSnapshot() {
	if j.snapEvery <= 0 || j.snapping || j.ending != "" || j.closed || j.frozen || j.failed != nil ||
		j.committed-j.snapUpto < j.snapEvery || j.sinceSnap < j.snapBytes/2 {
		return
	}
	j.snapping = true
	go j.snapshot(j.committed)
}

// snapshot folds the records up to upto, from the last snapshot on, into a new snapshot
// record, which commits as the run's next record. A snapshot that cannot be made is no
// failure of the run: its resume reads more.
func (j *journal) snapshot(upto int64) {
	done := func(st *replayState, err error) {
		var data []byte
		if err == nil {
			data = st.encode()
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		j.snapping = false
		if err != nil || len(data) > runlog.MaxRecordBytes/2 {
			// Unreadable, or too large to repeat: no more snapshots for this run.
			j.snapEvery = 0
			return
		}
		if j.ending != "" || j.closed {
			return // the end is the run's last record
		}
		if _, err := j.addLocked(runlog.KindSnapshot, data, nil, false, false); err == nil {
			j.snapBytes, j.sinceSnap = len(data), 0
			j.snapUpto = st.upto
		}
	}
	ctx, cancel := j.callContext()
	defer cancel()
	lease := j.currentLease()
	st, _, _, err := readReplay(ctx, j.store, lease.RunID)
	if err != nil {
		done(nil, err)
		return
	}
	if st.upto < upto {
		done(nil, errors.New("the journal holds fewer records than were committed"))
		return
	}
	// Records committed after upto are in st too: the snapshot covers them.
	done(st, nil)
}

// orMake is m, or a new map of room for n when m is nil.
func orMake[K comparable, V any](m map[K]V, n int) map[K]V {
	if m == nil {
		m = make(map[K]V, n)
	}
	return m
}
