package loop_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"testing/synctest"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestRunParallel proves that the calls of one turn run at the same time: each waits at a
// barrier that opens only when all of them are inside. With the calls run one by one the
// barrier would never open; its timeout (in synctest's fake time, so instant) turns that
// into a failure instead of a hang. The calls then finish in reverse order, and the
// history must still be in call order.
func TestRunParallel(t *testing.T) {
	tests := []struct {
		name        string
		maxParallel int
		calls       int
		wantOK      bool
	}{
		{name: "default bound lets 4 calls meet", maxParallel: 0, calls: 4, wantOK: true},
		{name: "bound 4 lets 4 calls meet", maxParallel: 4, calls: 4, wantOK: true},
		// The barrier itself: with a bound below the batch, the calls cannot all meet.
		{name: "bound 3 keeps 4 calls from meeting", maxParallel: 3, calls: 4, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var inside atomic.Int32
				all := make(chan struct{})
				var mu sync.Mutex
				var finished []string
				var tools []tool.Tool
				var reqCalls []scripted.ToolCall
				var want []llm.Message
				var wantCalls []llm.ToolCall
				for i := range tt.calls {
					name := fmt.Sprintf("t%d", i)
					tools = append(tools, tool.New(name, "waits", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
						if inside.Add(1) == int32(tt.calls) {
							close(all)
						}
						select {
						case <-all:
						case <-time.After(time.Minute):
							return tool.Error("barrier timed out"), nil
						}
						time.Sleep(time.Duration(tt.calls-i) * time.Millisecond) // later calls finish first
						mu.Lock()
						finished = append(finished, name)
						mu.Unlock()
						return tool.Text(name + " done"), nil
					}))
					reqCalls = append(reqCalls, raw(name, `{}`))
					id := fmt.Sprintf("call_1_%d", i)
					wantCalls = append(wantCalls, call(id, name, `{}`))
					want = append(want, toolMsg(id, name, name+" done", false))
				}
				p := newScript(t, onTurn(1, calls(reqCalls...)), onTurn(2, text("done")))
				res, err := loop.Run(t.Context(), loop.Options{Provider: p, MaxParallel: tt.maxParallel}, loop.Input{
					Messages: []llm.Message{user("go")}, Tools: tools,
				})
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				timedOut := 0
				for _, m := range res.History {
					if m.Text == "Error: barrier timed out" {
						timedOut++
					}
				}
				if gotOK := timedOut == 0; gotOK != tt.wantOK {
					t.Fatalf("%d calls timed out at the barrier; want all to meet: %v", timedOut, tt.wantOK)
				}
				if !tt.wantOK {
					return
				}
				want = append([]llm.Message{user("go"), assistant("", wantCalls...)}, append(want, assistant("done"))...)
				if diff := cmp.Diff(want, res.History); diff != "" {
					t.Errorf("history (-want +got):\n%s", diff)
				}
				var reverse []string
				for i := tt.calls - 1; i >= 0; i-- {
					reverse = append(reverse, fmt.Sprintf("t%d", i))
				}
				if diff := cmp.Diff(reverse, finished); diff != "" {
					t.Errorf("finish order (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestRunMaxParallel counts the calls running at once.
func TestRunMaxParallel(t *testing.T) {
	tests := []struct {
		maxParallel int
		calls       int
		want        int
	}{
		{maxParallel: 1, calls: 5, want: 1},
		{maxParallel: 2, calls: 5, want: 2},
		{maxParallel: 3, calls: 5, want: 3},
		{maxParallel: 10, calls: 5, want: 5},
		{maxParallel: 0, calls: 12, want: loop.DefaultMaxParallel},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("bound %d, %d calls", tt.maxParallel, tt.calls), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var running, peak, total atomic.Int32
				slow := tool.New("slow", "takes a while", schema.Empty(), func(context.Context, string) (tool.Result, error) {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(time.Second)
					running.Add(-1)
					total.Add(1)
					return tool.Text("ok"), nil
				})
				var cs []scripted.ToolCall
				for range tt.calls {
					cs = append(cs, raw("slow", `{}`))
				}
				p := newScript(t, onTurn(1, calls(cs...)), onTurn(2, text("done")))
				start := time.Now()
				res, err := loop.Run(t.Context(), loop.Options{Provider: p, MaxParallel: tt.maxParallel}, loop.Input{
					Messages: []llm.Message{user("go")}, Tools: []tool.Tool{slow},
				})
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if got := int(peak.Load()); got != tt.want {
					t.Errorf("peak concurrent calls = %d, want %d", got, tt.want)
				}
				if got := int(total.Load()); got != tt.calls || res.ToolCalls != tt.calls {
					t.Errorf("calls run = %d, Result.ToolCalls = %d, want %d", got, res.ToolCalls, tt.calls)
				}
				// In fake time the batch takes one second per wave of calls.
				waves := (tt.calls + tt.want - 1) / tt.want
				if got := time.Since(start); got != time.Duration(waves)*time.Second {
					t.Errorf("batch took %v, want %v", got, time.Duration(waves)*time.Second)
				}
			})
		})
	}
}

// TestRunCancel checks that a cancelled context ends the loop promptly with the
// context's error, whether the model or a tool is working.
func TestRunCancel(t *testing.T) {
	t.Run("during the model call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newScript(t, onTurn(1, scripted.Reply{Delay: time.Hour, Text: "too late"}))
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			start := time.Now()
			res, err := loop.Run(ctx, loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("hi")}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %+v, %v; want context.Canceled", res, err)
			}
			var me *loop.ModelError
			if errors.As(err, &me) {
				t.Errorf("error = %v, want the context's error, not a *ModelError", err)
			}
			if got := time.Since(start); got != time.Second {
				t.Errorf("Run returned after %v, want 1s (when ctx was cancelled)", got)
			}
		})
	})
	t.Run("deadline during the model call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newScript(t, onTurn(1, scripted.Reply{Delay: time.Hour, Text: "too late"}))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err := loop.Run(ctx, loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("hi")}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run error = %v, want context.DeadlineExceeded", err)
			}
		})
	})
	t.Run("during a tool call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newScript(t, onTurn(1, calls(raw("wait", `{}`))), onTurn(2, text("must not be asked")))
			wait := tool.New("wait", "waits for ctx", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
				<-ctx.Done()
				return tool.Result{}, ctx.Err()
			})
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			_, err := loop.Run(ctx, loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{wait}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run error = %v, want context.Canceled", err)
			}
			if n := len(p.Requests()); n != 1 {
				t.Errorf("model calls = %d, want 1", n)
			}
		})
	})
}
