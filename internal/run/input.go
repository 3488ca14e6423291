package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A tool's question to a person (an MCP server's elicitation, or its input_required
// result) waits as an approval does: the run journals it as an approval record that
// carries the question, sends approval_requested with it, and waits for the decision the
// store takes once, from any replica (Service.Approve with the answer); the deadline
// (the tool's approval timeout) answers cancel. The store's decision carries the answer
// as JSON in its reason.

// MaxAnswerBytes bounds the content of an answer to a tool's question.
const MaxAnswerBytes = 3 << 10

// maxQuestionBytes bounds a question as the journal keeps it (its message and schema).
const maxQuestionBytes = 64 << 10

// inputKey is the key of question id of the call whose key is call.
func inputKey(call, id string) string { return call + "/input/" + id }

// Ask implements toolinternal.Asker.
func (a *approver) Ask(ctx context.Context, n int, q toolinternal.Question) (toolinternal.Answer, error) {
	if a.auto {
		return toolinternal.Answer{Action: toolinternal.AnswerCancel, Reason: "nobody can answer here"}, nil
	}
	if len(q.Message)+len(q.Schema) > maxQuestionBytes {
		return toolinternal.Answer{}, fmt.Errorf("the question is over %d bytes", maxQuestionBytes)
	}
	info, _ := tool.CallInfoFrom(ctx)
	id := strconv.Itoa(n)
	key := inputKey(callKey(info), id)
	if a.j != nil {
		if d, ok := a.j.decision(key); ok && d.Answer != nil {
			// Replayed: the events go out again for the journal to drop the ones the
			// client saw. Who answered is the decision's (the answer does not carry it
			// in the journal): the tool words its note to the model by it.
			ans := *d.Answer
			ans.By = d.By
			if rec, ok := a.j.approval(key); ok {
				a.observer.send(requestedEvent(rec))
				a.observer.send(decidedEvent(rec, d.By, ans))
			}
			return ans, nil
		}
	}
	rec, asked := approvalRecord{}, false
	if a.j != nil {
		a.j.goLive()
		rec, asked = a.j.approval(key)
	}
	if err := ctx.Err(); err != nil {
		return toolinternal.Answer{}, err // the run's deadline passed while it was held
	}
	if asked && (rec.Question == nil || !sameQuestion(*rec.Question, q)) {
		return toolinternal.Answer{}, fmt.Errorf("after the run resumed, the tool asked its question %s differently from the first time", id)
	}
	if !asked {
		timeout := config.DefaultApprovalTimeout
		if a.inputTimeout != nil {
			timeout = a.inputTimeout(q.Tool)
		}
		rec = approvalRecord{Key: key, LoopID: info.LoopID, CallID: info.CallID, Tool: q.Tool, Iteration: info.Iteration,
			Deadline: time.Now().Add(timeout), InputID: id, Question: &q}
		if c := toolcall.From(ctx); c != nil {
			rec.Arguments = c.Input // what the call is about, for the person who answers
		}
		if err := a.record(rec); err != nil {
			return toolinternal.Answer{}, err
		}
	}
	wake, release := a.pend(key, rec)
	defer release()
	a.observer.send(requestedEvent(rec))
	late, _ := json.Marshal(toolinternal.Answer{Action: toolinternal.AnswerCancel, Reason: "nobody answered in time"})
	d, err := a.wait(ctx, key, rec.Deadline, wake, runlog.Decision{Reason: string(late), By: byDeadline})
	if err != nil {
		return toolinternal.Answer{}, err
	}
	ans := answerOf(d)
	if a.j != nil {
		// Committed before the tool has the answer: the tool goes on from it, and may take
		// its effect. A run resumed from a journal with the question and without its answer
		// takes the call for one still waiting for a person, and sends it again; with the
		// answer, it treats the call as any other in flight (sent again only when
		// idempotent).
		data, _ := toolinternal.MarshalJSON(decisionRecord{Key: key, Approve: d.Approve, By: d.By, Answer: &ans})
		if _, err := a.j.add(runlog.KindDecision, data, nil, true); err != nil {
			return toolinternal.Answer{}, err
		}
	}
	a.observer.send(decidedEvent(rec, d.By, ans))
	return ans, nil
}

// Waiting implements toolinternal.Asker: the journal holds a question of the call in ctx
// without the answer the run saw.
func (a *approver) Waiting(ctx context.Context) bool {
	if a.j == nil {
		return false
	}
	info, _ := tool.CallInfoFrom(ctx)
	return a.j.waitingInput(callKey(info) + "/input/")
}

// waitingInput reports whether a question whose key starts with prefix has no decision
// in the journal.
func (j *journal) waitingInput(prefix string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for key, rec := range j.approvals {
		if rec.Question != nil && strings.HasPrefix(key, prefix) {
			if _, ok := j.decisions[key]; !ok {
				return true
			}
		}
	}
	return false
}

func sameQuestion(a, b toolinternal.Question) bool {
	return a.Message == b.Message && a.Tool == b.Tool && bytes.Equal(compactJSON(a.Schema), compactJSON(b.Schema))
}

func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// answerOf is the answer a decision on a question carries.
func answerOf(d runlog.Decision) toolinternal.Answer {
	var ans toolinternal.Answer
	if json.Unmarshal([]byte(d.Reason), &ans) != nil || ans.Action == "" {
		ans = toolinternal.Answer{Action: toolinternal.AnswerDecline, Reason: d.Reason}
	}
	ans.By = d.By
	return ans
}

func requestedEvent(rec approvalRecord) ApprovalRequested {
	return ApprovalRequested{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Arguments: rec.Arguments, Iteration: rec.Iteration,
		Deadline: rec.Deadline, InputID: rec.InputID, Question: rec.Question}
}

func decidedEvent(rec approvalRecord, by string, ans toolinternal.Answer) ApprovalDecided {
	return ApprovalDecided{LoopID: rec.LoopID, CallID: rec.CallID, Tool: rec.Tool, Iteration: rec.Iteration, Approved: ans.Action == toolinternal.AnswerAccept,
		Reason: ans.Reason, By: by, InputID: rec.InputID, Answer: &ans}
}

// decisionFor is the decision v takes on rec: an approval's as it is; a question's with
// the answer, its content checked against the question's schema.
func decisionFor(rec approvalRecord, v Approval) (runlog.Decision, error) {
	d := runlog.Decision{Approve: v.Approve, Reason: v.Reason, By: v.By}
	if rec.Question == nil {
		if v.Content != "" {
			return d, fieldErr("content_json", ErrInvalid, "call %q waits for approval, not for an answer to a question", v.CallID)
		}
		return d, nil
	}
	ans := toolinternal.Answer{Action: toolinternal.AnswerDecline, Reason: v.Reason}
	if v.Approve {
		ans = toolinternal.Answer{Action: toolinternal.AnswerAccept}
		content, err := checkAnswer(rec.Question.Schema, v.Content)
		if err != nil {
			return d, fieldErr("content_json", ErrInvalid, "%v", err)
		}
		ans.Content = content
	} else if v.Content != "" {
		return d, fieldErr("content_json", ErrInvalid, "a denial carries no answer")
	}
	data, _ := toolinternal.MarshalJSON(ans)
	d.Reason = string(data)
	return d, nil
}

// checkAnswer checks an answer's content against the question's schema: a JSON object
// of at most MaxAnswerBytes ("{}" when empty and the schema allows it).
func checkAnswer(schemaJSON json.RawMessage, content string) (json.RawMessage, error) {
	if len(content) > MaxAnswerBytes {
		return nil, fmt.Errorf("the answer is %d bytes, over %d", len(content), MaxAnswerBytes)
	}
	if strings.TrimSpace(content) == "" {
		content = "{}"
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(content), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the answer must be a JSON object")
	}
	if len(schemaJSON) == 0 {
		return json.RawMessage(content), nil
	}
	s, err := schema.FromJSON(schemaJSON)
	if err != nil {
		return nil, fmt.Errorf("the question's schema cannot be read: %v", err)
	}
	canonical, err := s.Validate(content)
	if err != nil {
		return nil, fmt.Errorf("the answer does not fit the requested schema: %v", err)
	}
	return json.RawMessage(canonical), nil
}
