package run

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// TestAnswerChecked: an answer to a tool's question is checked against the question's
// schema, and refused naming content_json when it does not fit; an approval carries no
// answer; the store's decision carries the answer.
func TestAnswerChecked(t *testing.T) {
	question := approvalRecord{Key: "k", CallID: "c1", InputID: "1", Question: &toolinternal.Question{Message: "Whose account?",
		Schema: []byte(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)}}
	approval := approvalRecord{Key: "k", CallID: "c1"}
	for _, tc := range []struct {
		name   string
		rec    approvalRecord
		v      Approval
		reason string // the decision's reason; "" when refused
		refuse string // what the refusal says
	}{
		{"an answer that fits", question, Approval{CallID: "c1", Approve: true, Content: `{"name":"carol"}`}, `{"action":"accept","content":{"name":"carol"}}`, ""},
		{"a number for a string", question, Approval{CallID: "c1", Approve: true, Content: `{"name":5}`}, "", "content_json"},
		{"a required field missing", question, Approval{CallID: "c1", Approve: true}, "", "content_json"},
		{"not an object", question, Approval{CallID: "c1", Approve: true, Content: `["carol"]`}, "", "must be a JSON object"},
		{"too long", question, Approval{CallID: "c1", Approve: true, Content: `{"name":"` + strings.Repeat("x", MaxAnswerBytes) + `"}`}, "", "over 3072"},
		{"a decline", question, Approval{CallID: "c1", Reason: "not mine"}, `{"action":"decline","reason":"not mine"}`, ""},
		{"a decline with content", question, Approval{CallID: "c1", Content: `{"name":"x"}`}, "", "a denial carries no answer"},
		{"an approval", approval, Approval{CallID: "c1", Approve: true, Reason: "ok"}, "ok", ""},
		{"an approval with content", approval, Approval{CallID: "c1", Approve: true, Content: `{}`}, "", "waits for approval, not for an answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decisionFor(tc.rec, tc.v)
			if tc.refuse != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "content_json" || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("decisionFor(%+v) = %v, want a content_json error saying %q", tc.v, err, tc.refuse)
				}
				return
			}
			if err != nil || d.Reason != tc.reason {
				t.Fatalf("decisionFor(%+v) = %q, %v; want reason %q", tc.v, d.Reason, err, tc.reason)
			}
			if tc.rec.Question != nil {
				if ans := answerOf(d); (ans.Action == toolinternal.AnswerAccept) != tc.v.Approve {
					t.Errorf("answerOf(%q) = %+v", d.Reason, ans)
				}
			}
		})
	}
}

// A decision sent again is the same author's when both are the same verified caller, or
// both a client nobody verified, whichever replica each went through.
func TestSameAuthor(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"client via replica-a", "client via replica-b", true},
		{"client", "client via replica-a", true},
		{"spiffe://acme/ops", "spiffe://acme/ops", true},
		{"spiffe://acme/ops", "client via replica-a", false},
		{"spiffe://acme/ops", "spiffe://acme/dev", false},
		{"deadline", "client via replica-a", false},
	} {
		if got := sameAuthor(tc.a, tc.b); got != tc.same {
			t.Errorf("sameAuthor(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
