package run

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// countingModel answers every call with a text and counts the calls.
type countingModel struct{ calls int }

func (m *countingModel) Name() string { return "counting" }
func (m *countingModel) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	m.calls++
	return func(yield func(llm.Chunk, error) bool) {
		yield(llm.Chunk{Done: &llm.Response{Text: "live"}}, nil)
	}
}

type jsonCodec struct{}

func (jsonCodec) AppendEvent(dst []byte, ev Event) ([]byte, bool) {
	if _, ok := ev.(loop.TextDelta); ok {
		return append(dst, `{"delta":true}`...), true
	}
	return append(dst, `{}`...), true
}
func (jsonCodec) Request(json.RawMessage) (Request, error) { return Request{}, errors.New("unused") }

func memJournal(t testing.TB) (runlog.Store, runlog.Lease) {
	t.Helper()
	s, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.Create(context.Background(), "r1", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// A resumed journal answers the model calls it holds without calling the model, then
// calls it and records the answer; the events its replay regenerates are not recorded
// or delivered again; a call's outcome and dispatch are looked up by loop, iteration
// and call id.
func TestJournalReplay(t *testing.T) {
	store, lease := memJournal(t)
	ctx := context.Background()
	old := []runlog.Record{
		{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{}`)},
		{Seq: 2, Kind: runlog.KindModel, Data: json.RawMessage(`{"key":"loop_a/1","response":{"Text":"recorded"}}`)},
		{Seq: 3, Kind: runlog.KindEvent, Data: eventRec("started", json.RawMessage(`{}`))},
		{Seq: 4, Kind: runlog.KindDispatch, Data: json.RawMessage(`{"key":"r1/loop_a/1/c1","worker":"w","attempt":1}`)},
		{Seq: 5, Kind: runlog.KindEvent, Data: eventRec("model//0#1", json.RawMessage(`{}`))},
		{Seq: 6, Kind: runlog.KindDispatch, Data: json.RawMessage(`{"key":"r1/loop_a/1/c2","worker":"w","attempt":1}`)},
		{Seq: 7, Kind: runlog.KindOutcome, Data: json.RawMessage(`{"key":"r1/loop_a/1/c2","outcome":"succeeded","data":{"kind":0,"content":"done"}}`)},
	}
	if err := store.Append(ctx, lease, old); err != nil {
		t.Fatal(err)
	}
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 8)
	st, _, last, err := readReplay(ctx, store, lease.RunID)
	if err != nil || last != 7 {
		t.Fatalf("readReplay: last %d, %v", last, err)
	}
	if err := j.load(st); err != nil {
		t.Fatal(err)
	}
	var delivered []int64
	j.stop, j.deliver = func(error) {}, func(sq Sequenced) { delivered = append(delivered, sq.Seq) }
	j.start()

	model := &countingModel{}
	p := &journalProvider{Provider: model, j: j, loopID: "loop_a"}
	for i, want := range []string{"recorded", "live"} {
		resp, err := llm.Collect(p.Stream(ctx, &llm.Request{}))
		if err != nil || resp.Text != want {
			t.Fatalf("model call %d = %v, %v; want %q", i+1, resp, err, want)
		}
	}
	if model.calls != 1 {
		t.Errorf("the model was called %d times, want once (the first answer is recorded)", model.calls)
	}

	// Two events were recorded (the start, the first model call's usage): the replay
	// regenerates them, and two new ones (a text delta, a call's start), which alone are
	// journaled and delivered.
	for _, ev := range []Event{Started{}, loop.TextDelta{Text: "x"}, loop.ModelCalled{}, loop.ToolCallStarted{}} {
		j.event(ev)
	}

	call := func(id string) context.Context {
		return toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "r1", LoopID: "loop_a", CallID: id, Iteration: 1})
	}
	if _, done, dispatched := j.Recorded(call("c1")); done || !dispatched {
		t.Errorf("c1: done %v, dispatched %v; want dispatched without an outcome", done, dispatched)
	}
	if data, done, _ := j.Recorded(call("c2")); !done || string(data) != `{"kind":0,"content":"done"}` {
		t.Errorf("c2: %s, done %v; want its outcome", data, done)
	}
	if _, done, dispatched := j.Recorded(toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "r1", LoopID: "loop_a", CallID: "c2", Iteration: 2})); done || dispatched {
		t.Error("a call of another iteration with the same id has the first one's record")
	}
	if err := j.Finished(call("c1"), toolinternal.OutcomeUnknown, toolcall.EncodeResult(toolcall.UnknownOutcome("charge")), false); err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}

	recs, err := store.Read(ctx, "r1", 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []runlog.Kind
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	want := []runlog.Kind{runlog.KindModel, runlog.KindDelta, runlog.KindEvent, runlog.KindOutcome}
	if !slices.Equal(kinds, want) {
		t.Errorf("records after the replay: %v, want %v (the live model answer, the two new events, the outcome)", kinds, want)
	}
	if len(delivered) != 2 || delivered[0] != recs[1].Seq || delivered[1] != recs[2].Seq {
		t.Errorf("delivered %v, want only the new events (%d, %d)", delivered, recs[1].Seq, recs[2].Seq)
	}
}

// A stale lease fails the journal: the run is stopped with ErrJournal and nothing more
// is written.
func TestJournalFenced(t *testing.T) {
	store, lease := memJournal(t)
	ctx := context.Background()
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 1)
	causes := make(chan error, 1)
	j.stop, j.deliver = func(err error) { causes <- err }, nil
	j.start()
	if _, err := j.add(runlog.KindRequest, json.RawMessage(`{}`), nil, true); err != nil {
		t.Fatal(err)
	}
	// Another owner takes the run over (its lease expired, say).
	if _, err := store.Acquire(ctx, "r1", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := j.add(runlog.KindEvent, json.RawMessage(`{}`), nil, true); !errors.Is(err, runlog.ErrFenced) {
		t.Fatalf("append under a stale lease: %v, want ErrFenced", err)
	}
	if cause := <-causes; !errors.Is(cause, ErrJournal) {
		t.Errorf("the run was stopped with %v, want ErrJournal", cause)
	}
	if _, err := j.add(runlog.KindEvent, json.RawMessage(`{}`), nil, false); err == nil {
		t.Error("a failed journal took another record")
	}
	_ = j.close()
}

// renewingStore renews the journal's lease right after it finishes a run: a renewal
// that lands between the run's end being committed and the journal's close.
type renewingStore struct {
	runlog.Store
	j *journal
}

func (s *renewingStore) Finish(ctx context.Context, lease runlog.Lease, state runlog.State, last ...runlog.Record) error {
	if err := s.Store.Finish(ctx, lease, state, last...); err != nil {
		return err
	}
	s.j.renewOnce()
	return nil
}

// A run whose end is committed is over: a renewal of its lease that the store refuses
// then (the run is finished) does not fail the journal, and the run's end is not
// reported lost (its client was told the run stopped and continues elsewhere).
func TestRenewalAfterTheEndIsNoFailure(t *testing.T) {
	store, lease := memJournal(t)
	rs := &renewingStore{Store: store}
	j := newJournal(rs, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 1)
	rs.j = j
	j.start()
	if err := j.finish(endRecord{State: endState{runlog.StateSucceeded}, FinalText: "done", Ended: time.Now()}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if r, _ := store.Get(context.Background(), "r1"); r.State != runlog.StateSucceeded {
		t.Errorf("the run is %s", r.State)
	}
}

// eventRec is the record of an event with key and wire form.
func eventRec(key string, wire []byte) []byte {
	data, _ := eventData(key, wire)
	return data
}

// TestEndStateReadsEarlierJournals: an end record holds its state by name; one written
// by an earlier version holds a number, or "ended" for a replan or a termination, and
// both read as today's states.
func TestEndStateReadsEarlierJournals(t *testing.T) {
	for raw, want := range map[string]runlog.State{
		`{"state":2}`: runlog.StateSucceeded, `{"state":4}`: runlog.StateCancelled, `{"state":6}`: runlog.StateTerminated,
		`{"state":"failed"}`: runlog.StateFailed, `{"state":"ended"}`: runlog.StateTerminated, `{"state":"replan_requested"}`: runlog.StateReplanRequested,
	} {
		var e endRecord
		if err := json.Unmarshal([]byte(raw), &e); err != nil || e.State.State != want {
			t.Errorf("%s read as %q, %v; want %q", raw, e.State.State, err, want)
		}
	}
	for _, raw := range []string{`{"state":0}`, `{"state":9}`, `{"state":true}`} {
		var e endRecord
		if err := json.Unmarshal([]byte(raw), &e); err == nil {
			t.Errorf("%s read as %q, want an error", raw, e.State.State)
		}
	}
	b, _ := json.Marshal(endRecord{State: endState{runlog.StateTerminated}})
	if !strings.Contains(string(b), `"state":"terminated"`) {
		t.Errorf("an end record is written as %s", b)
	}
}

// TestLegacyEndedRuns: runs an earlier version ended "ended", their end records holding
// the state's number, list and read as what they were: a replan or a termination, the
// list filtered by either finding exactly its own.
func TestLegacyEndedRuns(t *testing.T) {
	store, err := runlog.OpenMemory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for id, data := range map[string]string{"replanned": `{"state":5,"reason":"again"}`, "terminated": `{"state":6}`} {
		l, err := store.Create(t.Context(), id, "old", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Finish(t.Context(), l, runlog.StateEnded, runlog.Record{Seq: 1, Kind: runlog.KindEnd, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := extendedService(t, Options{Journal: store, Codec: jsonCodec{}, Owner: "new"})
	if err != nil {
		t.Fatal(err)
	}
	for state, want := range map[runlog.State][]string{
		"": {"replanned:replan_requested", "terminated:terminated"}, runlog.StateReplanRequested: {"replanned:replan_requested"},
		runlog.StateTerminated: {"terminated:terminated"},
	} {
		sums, err := s.List(t.Context(), state, "", 10, false)
		var got []string
		for _, sum := range sums {
			got = append(got, sum.ID+":"+string(sum.State))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q) = %v, %v; want %v", state, got, err, want)
		}
	}
	if snap, err := s.Get("replanned"); err != nil || snap.State != runlog.StateReplanRequested || snap.Reason != "again" {
		t.Errorf("Get(replanned) = %+v, %v", snap, err)
	}
}

// eventData is the record of an event as the journal writes it: the key, then the wire
// form as it is, which it returns too (a slice of the record).
func eventData(key string, wire []byte) (data, wireOf []byte) {
	b := append(eventHead(key), wire...)
	at := len(b) - len(wire)
	return b, b[at:len(b):len(b)]
}

// TestEarlierEventKeysStillMatch: a decision and a progress report are keyed by their
// turn now; a run resumed from a journal written before, which keyed them without,
// still finds the ones its client saw and does not send them again.
func TestEarlierEventKeysStillMatch(t *testing.T) {
	store, lease := memJournal(t)
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 1)
	st := newReplayState()
	st.seen["decided/loop_a/c1"], st.seen["progress/loop_a/c1#1"] = true, true
	if err := j.load(st); err != nil {
		t.Fatal(err)
	}
	var delivered []int64
	j.stop, j.deliver = func(error) {}, func(sq Sequenced) { delivered = append(delivered, sq.Seq) }
	j.start()
	j.event(ApprovalDecided{LoopID: "loop_a", CallID: "c1", Iteration: 1, Approved: true})
	j.event(ProgressReported{LoopID: "loop_a", CallID: "c1", Iteration: 1, Status: "working"})
	j.event(ProgressReported{LoopID: "loop_a", CallID: "c1", Iteration: 1, Status: "still working"})
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	recs, err := store.Read(context.Background(), "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || len(delivered) != 1 {
		t.Errorf("%d records, %d delivered; want the second progress report alone", len(recs), len(delivered))
	}
}

// failingModel fails every call with err.
type failingModel struct{ err error }

func (m failingModel) Name() string { return "failing" }
func (m failingModel) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) { yield(llm.Chunk{}, m.err) }
}

// TestModelFailureReplays: a model call's failure is recorded like an answer, and a
// resumed run's replay gives it back, with its text and its kind, without calling the
// model.
func TestModelFailureReplays(t *testing.T) {
	ctx := context.Background()
	j := startedJournal(t)
	failure := &llm.ProviderError{Provider: "p", Kind: llm.KindRateLimited, StatusCode: 429, Message: "slow down"}
	_, first := llm.Collect((&journalProvider{Provider: failingModel{failure}, j: j, loopID: "loop_a"}).Stream(ctx, &llm.Request{}))
	j2 := reloaded(t, j)
	model := &countingModel{}
	_, replayed := llm.Collect((&journalProvider{Provider: model, j: j2, loopID: "loop_a"}).Stream(ctx, &llm.Request{}))
	if model.calls != 0 || replayed == nil || replayed.Error() != first.Error() || !errors.Is(replayed, llm.ErrRateLimited) {
		t.Errorf("replayed %v (%d model calls); want %v, a rate limit, without a call", replayed, model.calls, first)
	}
}

// TestAnswersRecordedBeforeOwnIDs: a model answer recorded before calls got ids of their
// own (its record without own_ids) replays with the model's ids (SharedCallIDs true for
// it), so that the calls it asked for are found under the keys its records name them by;
// an answer recorded since, and a live one, give calls ids of their own.
func TestAnswersRecordedBeforeOwnIDs(t *testing.T) {
	ctx := context.Background()
	j := startedJournal(t)
	if _, err := llm.Collect((&journalProvider{Provider: &countingModel{}, j: j, loopID: "loop_a"}).Stream(ctx, &llm.Request{})); err != nil {
		t.Fatal(err)
	}
	legacy := []byte(`{"key":"loop_a/2","response":{"Text":"","ToolCalls":[{"ID":"c","Name":"t","Arguments":"{}"},{"ID":"c","Name":"t","Arguments":"{}"}]}}`)
	if _, err := j.add(runlog.KindModel, legacy, nil, true); err != nil {
		t.Fatal(err)
	}
	j2 := reloaded(t, j)
	model := &countingModel{}
	p := &journalProvider{Provider: model, j: j2, loopID: "loop_a"}
	var shared []bool
	for range 3 {
		if _, err := llm.Collect(p.Stream(ctx, &llm.Request{})); err != nil {
			t.Fatal(err)
		}
		shared = append(shared, p.sharedCallIDs())
	}
	if model.calls != 1 || !slices.Equal(shared, []bool{false, true, false}) {
		t.Errorf("SharedCallIDs after a recorded answer, one recorded before own ids, a live one: %v (%d model calls); want [false true false] and 1", shared, model.calls)
	}
}

// startedJournal is a started journal of a new run in a memory store.
func startedJournal(t *testing.T) *journal {
	t.Helper()
	store, lease := memJournal(t)
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 1)
	j.stop, j.deliver = func(error) {}, func(Sequenced) {}
	j.start()
	return j
}

// reloaded closes j and returns the journal a resume of its run reads: what j recorded,
// loaded for the replay.
func reloaded(t *testing.T, j *journal) *journal {
	t.Helper()
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	st, _, last, err := readReplay(context.Background(), j.store, j.lease.RunID)
	if err != nil {
		t.Fatal(err)
	}
	j2 := newJournal(j.store, newRenewer(time.Minute), j.lease, time.Minute, jsonCodec{}, last+1)
	if err := j2.load(st); err != nil {
		t.Fatal(err)
	}
	return j2
}

// gatedStore holds every Append while its gate is shut, saying on entered that one came.
type gatedStore struct {
	runlog.Store
	mu      sync.Mutex
	shut    chan struct{}
	entered chan struct{}
}

func (s *gatedStore) Append(ctx context.Context, lease runlog.Lease, recs []runlog.Record) error {
	s.mu.Lock()
	shut := s.shut
	s.mu.Unlock()
	if shut != nil {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-shut
	}
	return s.Store.Append(ctx, lease, recs)
}

// TestDispatchIsCommittedBeforeTheCallLeaves: a dispatch returns only once it and the
// model's answer queued before it are committed: a run resumed after the call left
// replays the answer (and its call ids, which the call's idempotency key holds) rather
// than asking the model again, whose new ids would send the call again under a new key;
// and the commit fences the call: an orchestrator whose lease was taken over sends
// nothing. This holds for idempotent calls too.
func TestDispatchIsCommittedBeforeTheCallLeaves(t *testing.T) {
	mem, lease := memJournal(t)
	store := &gatedStore{Store: mem, entered: make(chan struct{}, 1)}
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 1)
	j.stop = func(error) {}
	j.start()
	if _, err := j.add(runlog.KindRequest, json.RawMessage(`{}`), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := j.add(runlog.KindModel, json.RawMessage(`{"key":"loop_a/1","response":{"Text":""}}`), nil, false); err != nil {
		t.Fatal(err)
	}
	shut := make(chan struct{})
	store.mu.Lock()
	store.shut = shut
	store.mu.Unlock()
	var open sync.Once
	release := func() {
		open.Do(func() {
			store.mu.Lock()
			store.shut = nil
			store.mu.Unlock()
			close(shut)
		})
	}
	t.Cleanup(func() { release(); _ = j.close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make(chan error, 1)
	go func() { out <- j.Dispatched(ctx, "w", 1) }()
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the dispatch was never committed")
	}
	select {
	case err := <-out:
		t.Fatalf("the dispatch returned (%v) while its commit was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-out; err != nil {
		t.Fatal(err)
	}
	recs, err := mem.Read(ctx, lease.RunID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []runlog.Kind
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	if want := []runlog.Kind{runlog.KindRequest, runlog.KindModel, runlog.KindDispatch}; !slices.Equal(kinds, want) {
		t.Errorf("committed %v when the call left, want %v", kinds, want)
	}

	// Another owner takes the run over: the next call does not leave.
	if _, err := mem.Acquire(ctx, lease.RunID, "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := j.Dispatched(ctx, "w", 1); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("a dispatch under a lease taken over: %v, want ErrFenced", err)
	}
}
