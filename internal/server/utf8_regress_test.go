package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Regression tests of text that is not UTF-8 from a tool in the orchestrator's own
// process (or a layer): protocol buffers refuse to encode it, so it failed the client's
// Run stream (without a journal), GetRun, and the calls of a worker whose tool read a
// blackboard entry holding it (the worker then ejected, blamed for a request it never
// got); and a resumed run asked the model another question than the live run had, the
// live run cutting the raw text, the resumed one the text the journal had repaired. Text
// is now repaired where it comes in (toolcall.Terminal), as the journal encodes it, and
// a blackboard entry that is not UTF-8 is refused.

// runKinds runs req to its end: the kinds of its events, and the error that ended the
// stream.
func runKinds(ctx context.Context, e *env, req *toolpb.RunRequest) ([]string, error) {
	var kinds []string
	for ev, err := range e.cl.Run(ctx, req) {
		if err != nil {
			return kinds, err
		}
		kinds = append(kinds, eventKind(ev))
	}
	return kinds, nil
}

// badGroup is a group of one in-process tool, bad, that returns text.
func badGroup(text string, opts ...tool.Option) map[string]run.Group {
	bad := tool.New("bad", "Returns bad text.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text(text), nil
	}, opts...)
	return map[string]run.Group{"badg": {Description: "Bad.", Tools: []tool.Tool{bad}}}
}

// Without a journal: the event carrying the in-process tool's text is sent by stream.Send.
func TestUTF8ResultWithoutJournal(t *testing.T) {
	ctx := testContext(t)
	m := &recModel{turns: []llm.Response{call("c1", "bad", "{}"), {Text: "done", FinishReason: "stop"}}, block: -1}
	e := newEnv(t, envOptions{provider: m, groups: badGroup("caf\xe9")})
	kinds, runErr := runKinds(ctx, e, &toolpb.RunRequest{RunId: "nj-1", Prompt: "go", ToolGroups: []string{"badg"}})
	if runErr != nil || !strings.Contains(strings.Join(kinds, ","), "tool_call_finished") {
		t.Errorf("no-journal run: events %v, err %v", kinds, runErr)
	}
}

// GetRun of a run whose final text (a return-direct in-process tool's) is not UTF-8.
func TestUTF8GetRunFinalText(t *testing.T) {
	ctx := testContext(t)
	for _, withJournal := range []bool{false, true} {
		m := &recModel{turns: []llm.Response{call("c1", "bad", "{}"), {Text: "done", FinishReason: "stop"}}, block: -1}
		o := envOptions{provider: m, groups: badGroup("caf\xe9", tool.ReturnDirect())}
		if withJournal {
			j, _ := runlog.OpenMemory(context.Background())
			t.Cleanup(func() { _ = j.Close() })
			o.journal = j
		}
		e := newEnv(t, o)
		_, runErr := runKinds(ctx, e, &toolpb.RunRequest{RunId: "gr-1", Prompt: "go", ToolGroups: []string{"badg"}})
		_, gerr := e.orch.GetRun(ctx, &toolpb.GetRunRequest{RunId: "gr-1"})
		if gerr != nil || runErr != nil {
			t.Errorf("journal=%v: run err %v, GetRun err %v", withJournal, runErr, gerr)
		}
	}
}

// A resumed run must ask the model what the live run asked: a long in-process result
// with bytes that are not UTF-8, cut to MaxToolResultBytes.
func TestUTF8ReplayOfACutResult(t *testing.T) {
	ctx := testContext(t)
	text := strings.Repeat("ab\xff", 600) // 1800 bytes
	turns := []llm.Response{call("c1", "bad", "{}"), call("c2", "bad", "{}"), {Text: "done", FinishReason: "stop"}}
	r := crashThenResume(t, ctx, turns, 2, &toolpb.RunRequest{RunId: "tr-1", Prompt: "go", ToolGroups: []string{"badg"}, Detached: true},
		rigOptions{inProcess: badGroup(text), configure: func(c *config.Config) { c.Loop.MaxToolResultBytes = 1024 }})
	r1, r2 := r.m1.requests(), r.m2.requests()
	if len(r1) < 3 || len(r2) == 0 {
		t.Fatalf("requests %d %d", len(r1), len(r2))
	}
	if r1[2] != r2[0] {
		var a, b llm.Request
		_ = json.Unmarshal([]byte(r1[2]), &a)
		_ = json.Unmarshal([]byte(r2[0]), &b)
		la, lb := a.Messages[len(a.Messages)-1].Text, b.Messages[len(b.Messages)-1].Text
		t.Errorf("resumed request differs; live tail %q\nreplayed tail %q", la[len(la)-90:], lb[len(lb)-90:])
	}
}

// badNote is an in-process tool that puts a Note that is not UTF-8 on the blackboard
// (its Add's error, the refusal, is its result).
func badNote() tool.Tool {
	return tool.New("note", "Notes.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "Note", JSON: []byte("\"caf\xe9\"")}); err != nil {
			return tool.Result{}, err
		}
		return tool.Text("noted"), nil
	})
}

// GetRun of a run whose blackboard holds an in-process tool's entry that is not UTF-8.
func TestUTF8BlackboardEntryRefused(t *testing.T) {
	ctx := testContext(t)
	note := badNote()
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m := &recModel{turns: []llm.Response{call("c1", "note", "{}"), {Text: "done", FinishReason: "stop"}}, block: -1}
	e := newEnv(t, envOptions{provider: m, journal: j, groups: map[string]run.Group{"notes": {Description: "N.", Tools: []tool.Tool{note}}}})
	kinds, err := runKinds(ctx, e, &toolpb.RunRequest{RunId: "bb-1", Prompt: "go", ToolGroups: []string{"notes"}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(m.requests()[1], "the value is not UTF-8 text") {
		t.Errorf("the tool's Add was not refused: the model read %.400s (events %v)", m.requests()[1], kinds)
	}
	if _, err := e.orch.GetRun(ctx, &toolpb.GetRunRequest{RunId: "bb-1"}); err != nil {
		t.Errorf("GetRun: %v", err)
	}
}

// A worker's tool that reads the blackboard, after an in-process tool put an entry that is
// not UTF-8 on it.
func TestUTF8BlackboardEntryNeverReachesAWorker(t *testing.T) {
	ctx := testContext(t)
	note := badNote()
	reader := tool.New("read_note", "Reads.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		return tool.Text("read"), nil
	}, tool.NeedsBlackboard("Note"))
	m := &recModel{turns: []llm.Response{call("c1", "note", "{}"), call("c2", "read_note", "{}"), call("c3", "read_note", "{}"), call("c4", "read_note", "{}"), {Text: "done", FinishReason: "stop"}}, block: -1}
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	e := newEnv(t, envOptions{provider: m, journal: j, groups: map[string]run.Group{"notes": {Description: "N.", Tools: []tool.Tool{note}}}})
	e.startWorker("w1", worker.Group{Role: "rd", Tools: []tool.Tool{reader}})
	if _, err := runKinds(ctx, e, &toolpb.RunRequest{RunId: "wb-1", Prompt: "go", ToolGroups: []string{"notes", "rd"}}); err != nil {
		t.Fatalf("run: %v", err)
	}
	reqs := m.requests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(last, `"Text":"read"`) {
		t.Errorf("read_note did not answer 'read': %s", last[max(0, len(last)-700):])
	}
	for _, ws := range e.rt.ListWorkers() {
		if ws.GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("worker %s is %v", ws.GetWorkerId(), ws.GetState())
		}
	}
}
