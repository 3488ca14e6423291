package router

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"google.golang.org/protobuf/proto"
)

// A worker answer that fits the 4 MiB message limit fits in its outcome record, whatever
// its text costs to encode as JSON.
func TestOutcomeRecordSize(t *testing.T) {
	for _, c := range []struct{ name, unit string }{{"html", "<a>&"}, {"text", "abcd"}, {"json-in-json", `"\"\`}, {"newlines", "\n\t\n\t"}} {
		content := strings.Repeat(c.unit, (wire.MaxMessageBytes-(128<<10))/4)
		resp := &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: content}}
		data := encodeOutcome(wire.ResultFromProto(resp), resp)
		// As journal.Finished wraps it.
		rec, _ := json.Marshal(struct {
			Key     string          `json:"key"`
			Outcome string          `json:"outcome"`
			Data    json.RawMessage `json:"data"`
		}{"k", "succeeded", data})
		if len(rec) > runlog.MaxRecordBytes {
			t.Errorf("%s: a message of %d bytes makes an outcome record of %d bytes, over the journal's limit of %d: the run could not journal an answer the wire accepts",
				c.name, proto.Size(resp), len(rec), runlog.MaxRecordBytes)
		}
	}
}

// fakeJournal holds one call's journal: whether it was dispatched, and its outcome.
type fakeJournal struct {
	damaged    bool
	dispatched bool
	outcome    []byte
	kind       string
}

func (f *fakeJournal) Recorded(context.Context) ([]byte, bool, bool) {
	return f.outcome, f.outcome != nil, f.dispatched
}
func (f *fakeJournal) Dispatched(context.Context, string, int) error { f.dispatched = true; return nil }
func (f *fakeJournal) Damaged(context.Context, error)                { f.damaged = true }
func (f *fakeJournal) Finished(_ context.Context, kind string, data []byte, _ bool) error {
	f.kind, f.outcome = kind, data
	return nil
}

// A non-idempotent call that a resumed run finds dispatched without an outcome is not
// sent, and its outcome is recorded unknown; a run resumed again (a second crash, a
// take-over) replays that record and tells the model the same, never that the journal
// failed. The record was written in the form of a result, which replay, reading the
// form of a worker's response, could not decode.
func TestUnknownOutcomeReplays(t *testing.T) {
	f := startFake(t, answering("charged"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("w1", f.addr, "pay", echoTool("charge")))
	ctx := toolcall.WithCallInfo(testContext(t), tool.CallInfo{RunID: "run_1", LoopID: "loop_1", Iteration: 1, CallID: "call_1"})

	first := &fakeJournal{dispatched: true}
	res, _ := call(context.WithValue(ctx, toolinternal.JournalKey{}, first), t, r, "charge", `{}`)
	want := toolcall.UnknownOutcome("charge")
	if res.Content != want.Content || first.kind != toolinternal.OutcomeUnknown || f.calls.Load() != 0 {
		t.Fatalf("first resume: %q recorded %q after %d calls; want the unknown outcome, not sent", res.Content, first.kind, f.calls.Load())
	}
	second := &fakeJournal{dispatched: true, outcome: first.outcome}
	res, _ = call(context.WithValue(ctx, toolinternal.JournalKey{}, second), t, r, "charge", `{}`)
	if res.Content != want.Content || res.Code != want.Code || f.calls.Load() != 0 {
		t.Errorf("second resume: the model reads %q (code %s) after %d calls; want %q", res.Content, res.Code, f.calls.Load(), want.Content)
	}
}

// An outcome the journal holds that cannot be decoded is not the model's to read: the
// journal is told it is damaged (the run stops, held for an operator), and the call is
// not sent.
func TestUndecodableOutcomeIsDamage(t *testing.T) {
	f := startFake(t, answering("charged"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("w1", f.addr, "pay", echoTool("charge")))
	ctx := toolcall.WithCallInfo(testContext(t), tool.CallInfo{RunID: "run_1", LoopID: "loop_1", Iteration: 1, CallID: "call_1"})
	j := &fakeJournal{dispatched: true, outcome: []byte(`{"result":`)}
	call(context.WithValue(ctx, toolinternal.JournalKey{}, j), t, r, "charge", `{}`)
	if !j.damaged || f.calls.Load() != 0 {
		t.Errorf("damaged %v after %d calls; want the journal told, and no call", j.damaged, f.calls.Load())
	}
}
