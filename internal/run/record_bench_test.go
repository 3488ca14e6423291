package run

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// BenchmarkRecordEncode encodes a step's records as the journal writes them: the model's
// answer, the call's dispatch and its outcome.
func BenchmarkRecordEncode(b *testing.B) {
	args := `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`
	model := modelRecord{Key: "loop_5989fcceef79cc4a/2", OwnIDs: true, Response: llm.Response{
		ToolCalls: []llm.ToolCall{{ID: "call_2_0", Name: "add", Arguments: args}},
		Usage:     llm.Usage{InputTokens: 103, OutputTokens: 26}, FinishReason: "tool_calls", Model: "scripted/bench-loop"}}
	key := "run_01a24ce349ad9cd092ac48fdc44f/loop_5989fcceef79cc4a/1/call_1_0"
	dispatch := dispatchRecord{Key: key, Worker: "bench-loop", Attempt: 1, IdempotencyKey: "run_01a24ce349ad9cd092ac48fdc44f/loop_5989fcceef79cc4a/call_1_0"}
	outcome := outcomeRecord{Key: key, Outcome: "succeeded", Data: json.RawMessage(`{"response_pb":"ChIxMTExMTEuMTExMDExMTExMTI="}`), Took: 429204, Worker: "bench-loop", Attempts: 1}
	for _, c := range []struct {
		name string
		v    any
	}{{"model", model}, {"dispatch", dispatch}, {"outcome", outcome}} {
		v := c.v
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := toolinternal.MarshalJSON(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJournalRun is a run of ten calls as the journal records it, on the memory
// store: at each step the model's answer, its events (the model call, the call's start
// and end), the call's dispatch (waited for: a commit) and its outcome; then the run's
// last answer and its end.
func BenchmarkJournalRun(b *testing.B) {
	store, err := runlog.OpenMemory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	args := `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`
	resp := llm.Response{ToolCalls: []llm.ToolCall{{ID: "call_2_0", Name: "add", Arguments: args}},
		Usage: llm.Usage{InputTokens: 103, OutputTokens: 26}, FinishReason: "tool_calls", Model: "scripted/bench-loop"}
	last := llm.Response{Text: "done", Usage: llm.Usage{InputTokens: 403, OutputTokens: 1}, FinishReason: "stop", Model: "scripted/bench-loop"}
	ctx := context.Background()
	outcome := []byte(`{"response_pb":"ChIxMTExMTEuMTExMDExMTExMTI="}`)
	const loopID = "loop_5989fcceef79cc4a"
	renewer := newRenewer(time.Minute) // the service's one, which every run shares
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		lease, err := store.Create(ctx, "run_"+strconv.Itoa(n), "me", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte(`{}`)})
		if err != nil {
			b.Fatal(err)
		}
		j := newJournal(store, renewer, lease, time.Minute, jsonCodec{}, 2)
		j.stop, j.deliver = func(error) {}, func(Sequenced) {}
		j.start()
		p := &journalProvider{j: j, loopID: loopID}
		j.event(Started{})
		for i := 1; i <= 10; i++ {
			if err := p.record(ctx, loopID+"/"+strconv.Itoa(i), llm.Chunk{Done: &resp}, nil); err != nil {
				b.Fatal(err)
			}
			id := "call_" + strconv.Itoa(i) + "_0"
			call := toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: lease.RunID, LoopID: loopID, CallID: id, Iteration: i})
			j.event(loop.ModelCalled{Iteration: i})
			j.event(loop.ToolCallStarted{LoopID: loopID, Iteration: i, Call: llm.ToolCall{ID: id}})
			if err := j.Dispatched(call, "bench-loop", 1); err != nil {
				b.Fatal(err)
			}
			if err := j.Finished(call, "succeeded", outcome, true); err != nil {
				b.Fatal(err)
			}
			j.event(loop.ToolCallFinished{LoopID: loopID, Iteration: i, Call: llm.ToolCall{ID: id}})
		}
		if err := p.record(ctx, loopID+"/11", llm.Chunk{Done: &last}, nil); err != nil {
			b.Fatal(err)
		}
		j.event(loop.ModelCalled{Iteration: 11})
		if err := j.finish(endRecord{State: endState{State: runlog.StateSucceeded}, FinalText: "done", Iterations: 11, ToolCalls: 10}); err != nil {
			b.Fatal(err) // finish closes the journal
		}
	}
}
