package run

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/toolmesh/toolmesh/internal/celexpr"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// notesPolicy denies notes that hold a secret, and every note of a caller without the
// writer scope.
func notesPolicy() config.Config {
	cfg := config.Default()
	cfg.Groups = map[string]config.Group{"notes": {Policy: []config.PolicyRule{
		{When: `args.text.contains("secret")`, Effect: "deny", Reason: "Notes may not hold secrets"},
		{When: `!("notes:write" in scopes) && claims.?role.orValue("") != "admin"`, Effect: "deny", Reason: "Only writers may take notes."},
	}}}
	return cfg
}

// TestCallPolicyInARun: a call the policy denies does not run and the model reads why; an
// allowed one runs; each decision is in the run's journal with the policy's version.
func TestCallPolicyInARun(t *testing.T) {
	var calls atomic.Int32
	store, err := runlog.OpenMemory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := notesPolicy()
	s := notesService(t, cfg, scripted.Script{Name: "notes", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "the secret is 42"}}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "milk"}}}}},
		{Reply: scripted.Reply{Text: "done"}},
	}}, &calls, func(o *Options) { o.Journal, o.Owner, o.Codec = store, "me", rvCodec{} })
	writer := Caller{ID: "https://idp.example#alice", Scopes: []string{"notes:write"}, Claims: json.RawMessage(`{"sub":"alice"}`)}
	_, evs, err := collect(t, s, Request{ID: "r-policy", Messages: user("note things"), Groups: []string{"notes"}, Caller: writer})
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, ev := range evs {
		if sq, ok := ev.(Sequenced); ok {
			ev = sq.Event
		}
		if f, ok := ev.(loop.ToolCallFinished); ok {
			results = append(results, f.Result.Content)
		}
	}
	want := []string{
		"The call of tool 'remember' was denied by policy, so it did not run. Reason: Notes may not hold secrets. Do not call it again with the same arguments.",
		`remembered {"text":"milk"}`,
	}
	if len(results) != 2 || results[0] != want[0] || results[1] != want[1] || calls.Load() != 1 {
		t.Fatalf("results %q after %d calls, want %q", results, calls.Load(), want)
	}
	recs, err := store.Read(t.Context(), "r-policy", 0, 1000, runlog.KindPolicy)
	if err != nil || len(recs) != 2 {
		t.Fatalf("policy records %v, %v", recs, err)
	}
	pol, _ := celexpr.NewPolicy(cfg.PolicyOf("notes", "remember"))
	var first, second policyRecord
	_ = json.Unmarshal(recs[0].Data, &first)
	_ = json.Unmarshal(recs[1].Data, &second)
	if first.Tool != "remember" || first.Effect != celexpr.Deny || first.Rule != 1 || first.Version != pol.Version() ||
		second.Effect != celexpr.Allow || second.Rule != 0 || second.Version != pol.Version() {
		t.Errorf("records %+v, %+v (version %s)", first, second, pol.Version())
	}
}

// TestCallPolicyForTheCaller: the same call is denied to a caller without the scope and
// allowed to one whose claims say admin; listings hide a tool denied whatever the
// arguments.
func TestCallPolicyForTheCaller(t *testing.T) {
	var calls atomic.Int32
	s := notesService(t, notesPolicy(), scripted.Script{Name: "notes", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "milk"}}}}},
		{Reply: scripted.Reply{Text: `{{ result "remember" }}`}},
	}}, &calls)
	reader := Caller{ID: "https://idp.example#bob", Claims: json.RawMessage(`{"role":"reader"}`)}
	admin := Caller{ID: "https://idp.example#carol", Claims: json.RawMessage(`{"role":"admin"}`)}
	res, _, err := collect(t, s, Request{ID: "r-reader", Messages: user("note milk"), Groups: []string{"notes"}, Caller: reader})
	if err != nil || res.Text != "Error: The call of tool 'remember' was denied by policy, so it did not run. Reason: Only writers may take notes. Do not call it again with the same arguments." {
		t.Errorf("reader: %q, %v", res.Text, err)
	}
	res, _, err = collect(t, s, Request{ID: "r-admin", Messages: user("note milk"), Groups: []string{"notes"}, Caller: admin})
	if err != nil || res.Text != `remembered {"text":"milk"}` || calls.Load() != 1 {
		t.Errorf("admin: %q, %v after %d calls", res.Text, err, calls.Load())
	}
	if s.MayCall("notes", "remember", "", reader) || !s.MayCall("notes", "remember", "", admin) || !s.MayCall("notes", "wait", "", Caller{Scopes: []string{"notes:write"}}) {
		t.Error("MayCall: the reader may never call remember; the admin and a writer may")
	}
	if s.MayCall("other", "anything", "", reader) != true {
		t.Error("a tool without a policy may be called by anyone")
	}
}

// TestCallPolicyApproves: approve makes the call wait for a person; outside a run,
// where nobody can approve, the call does not run.
func TestCallPolicyApproves(t *testing.T) {
	cfg := config.Default()
	cfg.Tools = map[string]config.Tool{"remember": {Policy: []config.PolicyRule{{When: `size(args.text) > 3`, Effect: "approve", Reason: "long notes"}}}}
	var calls atomic.Int32
	s := notesService(t, cfg, scripted.Script{Name: "notes", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}}, &calls)
	var remember tool.Tool
	for _, ts := range s.local {
		for _, t := range ts.tools {
			if t.Definition().Name == "remember" {
				remember = t
			}
		}
	}
	if remember == nil {
		t.Fatal("no remember tool")
	}
	view := s.PolicyView("", Caller{})(remember)
	if view == nil {
		t.Fatal("a tool whose policy may approve is listed")
	}
	res, err := view.Call(t.Context(), `{"text":"a long note"}`)
	if err != nil || res.Content != "tool 'remember' requires approval, and nobody can give it here; it did not run" || calls.Load() != 0 {
		t.Errorf("outside a run: %+v, %v after %d calls", res, err, calls.Load())
	}
	res, err = view.Call(ApproveAll(t.Context()), `{"text":"a long note"}`)
	if err != nil || res.IsError() || calls.Load() != 1 {
		t.Errorf("approved: %+v, %v after %d calls", res, err, calls.Load())
	}
	if res, _ := view.Call(t.Context(), `{"text":"ok"}`); res.IsError() || calls.Load() != 2 {
		t.Errorf("a short note needs no approval: %+v", res)
	}
}

// TestCallPolicyDecisionReplayed: a resumed run takes the decision its journal recorded
// (through a snapshot too), not the one the policy would make now.
func TestCallPolicyDecisionReplayed(t *testing.T) {
	info := tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c1", Iteration: 1}
	recorded := celexpr.Decision{Effect: celexpr.Deny, Reason: "as it was", Rule: 2, Version: "sha256:000000000000"}
	data, _ := json.Marshal(policyRecord{Key: callKey(info), Tool: "remember", Decision: recorded})
	st := newReplayState()
	if err := st.add(runlog.Record{Seq: 4, Kind: runlog.KindPolicy, Data: data}); err != nil {
		t.Fatal(err)
	}
	snapped := newReplayState()
	if err := snapped.add(runlog.Record{Seq: 5, Kind: runlog.KindSnapshot, Data: st.encode()}); err != nil {
		t.Fatal(err)
	}
	for name, state := range map[string]*replayState{"records": st, "snapshot": snapped} {
		j := newJournal(nil, nil, runlog.Lease{}, 0, nil, 6)
		if err := j.load(state); err != nil {
			t.Fatal(err)
		}
		ctx := context.WithValue(context.WithValue(t.Context(), toolinternal.CallInfoKey{}, info), approverKey{}, &approver{j: j})
		allowAll, _ := celexpr.NewPolicy([]celexpr.Rule{{When: "true", Effect: celexpr.Allow}})
		d, err := decided(ctx, allowAll, "remember", celexpr.Call{Tool: "remember"}, nil)
		if err != nil || d != recorded {
			t.Errorf("%s: decided %+v, %v; want the recorded %+v", name, d, err, recorded)
		}
	}
}
