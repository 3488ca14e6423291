package toolctx_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

const advice = "Use the skill body you already have."

// wantLoaded is the exact model-visible one-shot text for the tool "skill".
const wantLoaded = "ALREADY LOADED. The body of 'skill' was returned earlier in this turn — read it from your conversation history above. Do not call this tool again. Use the skill body you already have."

type counting struct {
	calls atomic.Int32
	last  atomic.Pointer[context.Context]
	res   tool.Result
	err   error
}

func (c *counting) tool() tool.Tool {
	return tool.New("skill", "Loads the skill body.", schema.Empty(),
		func(ctx context.Context, input string) (tool.Result, error) {
			c.calls.Add(1)
			c.last.Store(&ctx)
			if c.err != nil || c.res.Content != "" {
				return c.res, c.err
			}
			return tool.Text("body:" + input), nil
		},
		tool.ReturnDirect(), tool.Idempotent(), tool.Timeout(3*time.Second),
		tool.DefinitionMetadata(map[string]string{"group": "skills"}))
}

func inLoop(id string) context.Context {
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r", LoopID: id, CallID: "c"})
	return toolctx.NewContext(ctx, toolctx.MustOf("tenantId", "acme"))
}

func call(t *testing.T, tl tool.Tool, ctx context.Context) tool.Result {
	t.Helper()
	res, err := tl.Call(ctx, "{}")
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	return res
}

func TestAlreadyLoadedText(t *testing.T) {
	if got := toolctx.AlreadyLoaded("skill", advice); got != wantLoaded {
		t.Errorf("AlreadyLoaded =\n%q\nwant\n%q", got, wantLoaded)
	}
	const noAdvice = "ALREADY LOADED. The body of 'skill' was returned earlier in this turn \u2014 read it from your conversation history above. Do not call this tool again."
	if got := toolctx.AlreadyLoaded("skill", ""); got != noAdvice {
		t.Errorf("AlreadyLoaded without advice = %q, want %q", got, noAdvice)
	}
}

func TestOneShotPerLoop(t *testing.T) {
	t.Run("first call delegates, second returns the exact text", func(t *testing.T) {
		d := &counting{}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		if diff := cmp.Diff(tool.Text("body:{}"), call(t, tl, inLoop("l1"))); diff != "" {
			t.Errorf("first call (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(tool.Text(wantLoaded), call(t, tl, inLoop("l1"))); diff != "" {
			t.Errorf("second call (-want +got):\n%s", diff)
		}
		if n := d.calls.Load(); n != 1 {
			t.Errorf("delegate called %d times, want 1", n)
		}
	})
	t.Run("three loop ids, three delegate calls", func(t *testing.T) {
		d := &counting{}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		for _, id := range []string{"l1", "l2", "l3", "l1", "l2", "l3"} {
			call(t, tl, inLoop(id))
		}
		if n := d.calls.Load(); n != 3 {
			t.Errorf("delegate called %d times, want 3", n)
		}
	})
	t.Run("ten calls in one loop, one delegate call", func(t *testing.T) {
		d := &counting{}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		for i := range 10 {
			res := call(t, tl, inLoop("l1"))
			if i > 0 && res.Content != wantLoaded {
				t.Errorf("call %d = %q", i, res.Content)
			}
		}
		if n := d.calls.Load(); n != 1 {
			t.Errorf("delegate called %d times, want 1", n)
		}
	})
	t.Run("no loop id, every call delegates", func(t *testing.T) {
		d := &counting{}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		for _, ctx := range []context.Context{
			context.Background(),
			toolctx.NewContext(context.Background(), toolctx.Empty),
			toolctx.NewContext(context.Background(), toolctx.MustOf("tenantId", "acme")),
			toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r", CallID: "c"}),
		} {
			for range 2 {
				if res := call(t, tl, ctx); res.Content != "body:{}" {
					t.Errorf("call without loop id = %q", res.Content)
				}
			}
		}
		if n := d.calls.Load(); n != 8 {
			t.Errorf("delegate called %d times, want 8", n)
		}
	})
	t.Run("loop id from the call info when the bag has none", func(t *testing.T) {
		d := &counting{}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r", LoopID: "l1", CallID: "c"})
		call(t, tl, ctx)
		if res := call(t, tl, ctx); res.Content != wantLoaded {
			t.Errorf("second call in the call info's loop = %q", res.Content)
		}
		// A loop id forged into the bag does not count: the call info's does.
		bagged := toolctx.NewContext(ctx, toolctx.MustOf(toolctx.LoopIDKey, "l2"))
		if res := call(t, tl, bagged); res.Content != wantLoaded {
			t.Errorf("call with a forged loop id in the bag = %q", res.Content)
		}
		if res := call(t, tl, inLoop("l2")); res.Content != "body:{}" {
			t.Errorf("first call in another loop = %q", res.Content)
		}
		if n := d.calls.Load(); n != 2 {
			t.Errorf("delegate called %d times, want 2", n)
		}
	})
}

// TestOneShotPerLoopFailures: what a delegate that fails or signals does to the shot,
// and that two wrappers of one tool keep their own.
func TestOneShotPerLoopFailures(t *testing.T) {
	t.Run("a failed first call uses up the shot", func(t *testing.T) {
		d := &counting{res: tool.Error("boom")}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		if res := call(t, tl, inLoop("l1")); !res.IsError() {
			t.Errorf("first call = %+v, want the delegate's error", res)
		}
		if res := call(t, tl, inLoop("l1")); res.Content != wantLoaded {
			t.Errorf("second call = %q", res.Content)
		}
	})
	t.Run("a signal error from the delegate is returned", func(t *testing.T) {
		replan := tool.ReplanRequested{Reason: "again"}
		d := &counting{err: replan}
		tl := toolctx.OneShotPerLoop(d.tool(), advice)
		if _, err := tl.Call(inLoop("l1"), "{}"); !reflect.DeepEqual(err, replan) {
			t.Errorf("Call error = %v, want the delegate's signal", err)
		}
	})
	t.Run("wrappers are independent", func(t *testing.T) {
		d := &counting{}
		t1, t2 := toolctx.OneShotPerLoop(d.tool(), advice), toolctx.OneShotPerLoop(d.tool(), advice)
		call(t, t1, inLoop("l1"))
		call(t, t2, inLoop("l1"))
		if n := d.calls.Load(); n != 2 {
			t.Errorf("delegate called %d times, want 2", n)
		}
	})
}

func TestOneShotPerLoopIsTransparent(t *testing.T) {
	d := &counting{}
	inner := d.tool()
	tl := toolctx.OneShotPerLoop(inner, advice)

	dl, ok := tl.(tool.Delegating)
	if !ok || dl.Delegate() != inner {
		t.Fatalf("OneShotPerLoop does not expose its delegate")
	}
	if tool.Unwrap(tl) != inner {
		t.Error("Unwrap does not reach the delegate")
	}
	if diff := cmp.Diff(inner.Definition(), tl.Definition(), cmp.Comparer(schema.Schema.Equal)); diff != "" {
		t.Errorf("Definition not forwarded (-delegate +wrapper):\n%s", diff)
	}
	// The delegate's, marked once per loop with the advice, for the worker to register.
	want := tool.Metadata{ReturnDirect: true, Idempotent: true, Timeout: 3 * time.Second, OncePerLoop: true, OnceAdvice: advice}
	if diff := cmp.Diff(want, tl.Metadata()); diff != "" {
		t.Errorf("Metadata not forwarded (-want +got):\n%s", diff)
	}

	type key struct{}
	ctx := context.WithValue(inLoop("l1"), key{}, "value")
	ctx = toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "r", LoopID: "l1", CallID: "c"})
	call(t, tl, ctx)
	got := *d.last.Load()
	if got != ctx {
		t.Error("the delegate did not receive the caller's ctx")
	}
	if got.Value(key{}) != "value" || toolctx.FromContext(got).GetOr("tenantId", "") != "acme" {
		t.Error("ctx values did not reach the delegate")
	}
}

func TestOneShotPerLoopConcurrent(t *testing.T) {
	d := &counting{}
	tl := toolctx.OneShotPerLoop(d.tool(), advice)
	done := make(chan string)
	for range 32 {
		go func() {
			res, _ := tl.Call(inLoop("l1"), "{}")
			done <- res.Content
		}()
	}
	loaded := 0
	for range 32 {
		if <-done == wantLoaded {
			loaded++
		}
	}
	if loaded != 31 || d.calls.Load() != 1 {
		t.Errorf("%d ALREADY LOADED answers and %d delegate calls, want 31 and 1", loaded, d.calls.Load())
	}
}
