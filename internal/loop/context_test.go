package loop_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// TestRunToolCallContext: every call of a loop receives the loop's context plus its loop
// id; another loop stamps its own id; the context never appears in what the model sees.
func TestRunToolCallContext(t *testing.T) {
	var mu sync.Mutex
	var seen []map[string]string
	probe := tool.New("probe", "records its context", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		mu.Lock()
		seen = append(seen, toolctx.FromContext(ctx).Map())
		mu.Unlock()
		return tool.Text("ok"), nil
	})
	bag := toolctx.MustOf("tenantId", "acme", "authToken", "s3cr3t")
	for _, loopID := range []string{"loop-a", "loop-b"} {
		p := newScript(t, onTurn(1, calls(raw("probe", `{}`), raw("probe", `{}`))), onTurn(2, text("done")))
		if _, err := loop.Run(t.Context(), loop.Options{Provider: p, LoopID: loopID, Context: bag}, loop.Input{
			Messages: []llm.Message{user("go")}, Tools: []tool.Tool{probe},
		}); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Requests() {
			for _, spec := range r.Tools {
				if s := string(spec.Parameters); s != `{"type":"object","properties":{}}` {
					t.Errorf("the tool schema changed: %s", s)
				}
			}
		}
	}
	want := []map[string]string{}
	for _, id := range []string{"loop-a", "loop-a", "loop-b", "loop-b"} {
		want = append(want, map[string]string{"tenantId": "acme", "authToken": "s3cr3t", toolctx.LoopIDKey: id})
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("contexts seen by the tool (-want +got):\n%s", diff)
	}

	// No context: the tool still learns its loop id.
	seen = nil
	p := newScript(t, onTurn(1, calls(raw("probe", `{}`))), onTurn(2, text("done")))
	if _, err := loop.Run(t.Context(), loop.Options{Provider: p, LoopID: "loop-c"}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{probe}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]map[string]string{{toolctx.LoopIDKey: "loop-c"}}, seen); diff != "" {
		t.Errorf("context without a bag (-want +got):\n%s", diff)
	}
}
