package run

import (
	"context"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestReplayedAnswerSaysWhoAnswered: a tool's question that nobody answered in time is
// answered "by" the deadline, which an MCP tool words as the model's note ("Nobody
// answered ... in time"). Replayed from the journal after a resume, the answer says so
// too, so that the model reads the same note (the answer's By is not in its JSON: it is
// the decision's).
func TestReplayedAnswerSaysWhoAnswered(t *testing.T) {
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r1", LoopID: "loop_a", CallID: "c1", Iteration: 1})
	q := toolinternal.Question{Message: "Which?", Tool: "pick"}
	live := newApprover("r1", "me", nil, nil, &serialObserver{})
	live.inputTimeout = func(string) time.Duration { return time.Millisecond }
	ans, err := live.Ask(ctx, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	// What the live run journals for the decision (approver.Ask).
	key := inputKey(callKey(tool.CallInfo{RunID: "r1", LoopID: "loop_a", CallID: "c1", Iteration: 1}), "1")
	data, _ := toolinternal.MarshalJSON(decisionRecord{Key: key, Approve: false, By: ans.By, Answer: &ans})
	store, lease := memJournal(t)
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 2)
	st := newReplayState()
	st.decisions[key] = data
	if err := j.load(st); err != nil {
		t.Fatal(err)
	}
	replayed, err := newApprover("r1", "me", j, nil, &serialObserver{}).Ask(ctx, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	if replayed.By != ans.By || replayed.Action != ans.Action || replayed.Reason != ans.Reason {
		t.Errorf("live answer %+v, replayed %+v", ans, replayed)
	}
}
