package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// A request rule with transform_type_name but no transform must be refused naming the
// request's field, artifact_sinks[0].transform_type_name.
func TestRequestSinkFieldNames(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go",
		ArtifactSinks: []*toolpb.ArtifactSinkSpec{{TransformTypeName: "X", Sinks: []string{"blackboard"}}}}, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "artifact_sinks[0].transform_type_name") {
		t.Fatalf("err = %v, want INVALID_ARGUMENT naming artifact_sinks[0].transform_type_name", err)
	}
}

// GetRun of a run whose blackboard is within its bounds must be readable by a client: the
// contract bounds every message at 4 MiB. At the default bounds everything fits; with a
// raised loop.max_blackboard_bytes the oldest entries are left out and counted.
func TestGetRunOfAFullBlackboard(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxBytes  int
		wantAdded int
	}{
		{"default bounds", 0, 3},     // 3 MiB: the fourth 900 KiB object is refused
		{"raised bound", 8 << 20, 6}, // all six join; GetRun leaves the oldest out
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []scripted.ToolCall
			for range 6 {
				calls = append(calls, scripted.ToolCall{Name: "fill", ArgumentsRaw: `{}`})
			}
			script := scripted.Script{Name: "fill", Rules: []scripted.Rule{
				{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: calls}},
				{Reply: scripted.Reply{Text: "done"}},
			}}
			e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
				if tc.maxBytes > 0 {
					c.Loop.MaxBlackboardBytes = tc.maxBytes
				}
				c.Loop.MaxParallelToolCalls = 1
			}})
			big := `"` + strings.Repeat("x", 900<<10) + `"`
			fill := tool.New("fill", "fills the blackboard", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
				return tool.Text("filled"), tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "Blob", JSON: []byte(big)})
			})
			e.startWorker("w1", worker.Group{Role: "fill", Description: "fill", Tools: []tool.Tool{fill}})
			ctx := testContext(t)
			if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "full", Prompt: "go", ToolGroups: []string{"fill"}}, nil); err != nil {
				t.Fatal(err)
			}
			r, err := e.cl.GetRun(ctx, "full")
			if err != nil {
				t.Fatalf("GetRun: %v", err)
			}
			got := len(r.GetBlackboard()) + int(r.GetBlackboardOmitted())
			if got != tc.wantAdded || len(r.GetBlackboard()) == 0 || proto.Size(r) > 4<<20 {
				t.Errorf("GetRun lists %d objects and omits %d (%d bytes), want %d in all", len(r.GetBlackboard()), r.GetBlackboardOmitted(), proto.Size(r), tc.wantAdded)
			}
			if tc.maxBytes == 0 && r.GetBlackboardOmitted() != 0 {
				t.Errorf("at the default bounds GetRun omits %d objects", r.GetBlackboardOmitted())
			}
		})
	}
}

// A worker tool whose replan carries an object that is not JSON: nothing of it joins the
// blackboard, and the run does not end as INTERNAL (pkg/worker answers the call with an
// error the model reads).
func TestReplanWithInvalidObject(t *testing.T) {
	script := scripted.Script{Name: "replan", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "planner", ArgumentsRaw: `{}`}}}},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	planner := tool.New("planner", "replans", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		return tool.Result{}, tool.ReplanRequested{Reason: "r", Add: []tool.Binding{
			{Entry: tool.Entry{TypeName: "Good", JSON: []byte(`{"ok":true}`)}},
			{Entry: tool.Entry{TypeName: "Bad", JSON: []byte(`{not json`)}},
		}}
	})
	e.startWorker("w1", worker.Group{Role: "plan", Description: "plan", Tools: []tool.Tool{planner}})
	ctx := testContext(t)
	var changed int
	var lastErr *toolpb.RunError
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "rp", Prompt: "go", ToolGroups: []string{"plan"}}, func(ev *toolpb.RunResponse) {
		if ev.GetBlackboardChanged() != nil {
			changed++
		}
		if ev.GetError() != nil {
			lastErr = ev.GetError()
		}
	})
	t.Logf("err %v; blackboard_changed events %d; error event %v", err, changed, lastErr)
	if lastErr.GetReason() == toolpb.ErrorReason_ERROR_REASON_INTERNAL {
		t.Errorf("a worker's bad replan object ends the run as INTERNAL (a bug)")
	}
	if changed != 0 {
		t.Errorf("%d objects of a refused replan joined the blackboard", changed)
	}
}

// With stream_text, the text alongside tool calls arrives as text_delta events that add
// up to the message event of the same iteration, which follows them.
func TestStreamedTextAlongsideToolCalls(t *testing.T) {
	e := newEnv(t, envOptions{script: adderScript()})
	e.startWorker("w1", flatMath())
	var evs []string
	_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "What is 2 + 3?", ToolGroups: []string{"math"}, StreamText: true}, func(ev *toolpb.RunResponse) {
		if d := ev.GetTextDelta(); d != nil {
			evs = append(evs, "delta:"+d.GetText())
		}
		if m := ev.GetMessage(); m != nil {
			evs = append(evs, "message:"+m.GetText())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var streamed string
	for i, ev := range evs {
		if d, ok := strings.CutPrefix(ev, "delta:"); ok {
			streamed += d
			continue
		}
		if m, _ := strings.CutPrefix(ev, "message:"); m != streamed || i == 0 {
			t.Errorf("message %q after deltas %q", m, streamed)
		}
		break
	}
}

// Cancelled while a tool is replanning: the run ends CANCELLED, with no replan event.
func TestCancelWhileReplanning(t *testing.T) {
	script := scripted.Script{Name: "replan", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "planner", ArgumentsRaw: `{}`}}}},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	entered := make(chan struct{})
	cancelled := make(chan struct{}) // closed once CancelRun returned
	planner := tool.New("planner", "replans", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		close(entered)
		// The replan comes after the run was cancelled (or the call ended with it).
		select {
		case <-cancelled:
		case <-ctx.Done():
		}
		return tool.Result{}, tool.ReplanRequested{Reason: "late", Add: []tool.Binding{{Entry: tool.Entry{TypeName: "A", JSON: []byte(`1`)}}}}
	})
	e.startWorker("w1", worker.Group{Role: "plan", Description: "plan", Tools: []tool.Tool{planner}})
	ctx := testContext(t)
	go func() {
		defer close(cancelled)
		<-entered
		_, _ = e.cl.CancelRun(ctx, "rc", "stop")
	}()
	var replans int
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "rc", Prompt: "go", ToolGroups: []string{"plan"}}, func(ev *toolpb.RunResponse) {
		if ev.GetReplanRequested() != nil {
			replans++
		}
	})
	r, gerr := e.cl.GetRun(ctx, "rc")
	t.Logf("err %v; state %v %v; replans %d; blackboard %v", err, r.GetState(), gerr, replans, r.GetBlackboard())
	if status.Code(err) != codes.Canceled || r.GetState() != toolpb.RunState_RUN_STATE_CANCELLED || replans != 0 {
		t.Errorf("want CANCELLED and no replan event")
	}
}
