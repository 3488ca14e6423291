package router

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The entries sent with a call carry their binding names (contract: each a
// BlackboardObject (type_name, json, name)), so that Get(name) works on a worker as in
// process.
func TestNeededEntriesCarryBindingNames(t *testing.T) {
	ctx := testContext(t)
	got := make(chan []*toolpb.BlackboardObject, 1)
	f := startFake(t, func(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		got <- req.GetBlackboard()
		return textResponse("ok"), nil
	})
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("fake", f.addr, "crm", echoTool("reader", tool.NeedsBlackboard("Customer"))))
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	if err := p.Add(process.Origin{}, "best", tool.Entry{TypeName: "Customer", JSON: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []string
	call(runContext(ctx, p, &reports, &mu), t, r, "reader", `{}`)
	objs := <-got
	if len(objs) != 1 || objs[0].GetName() != "best" {
		t.Fatalf("sent %v, want the Customer entry with name \"best\"", objs)
	}
}

// blackboard_updates are bounded to 1 MiB of JSON (contract), as they are to 256 objects:
// a worker not built on pkg/worker that sends more is refused, like one that sends 257.
func TestBlackboardUpdatesByteBound(t *testing.T) {
	ctx := testContext(t)
	big := `"` + strings.Repeat("x", 512<<10) + `"`
	f := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		resp := textResponse("bound")
		for range 5 { // 2.5 MiB of JSON, under the 4 MiB message bound
			resp.BlackboardUpdates = append(resp.BlackboardUpdates, &toolpb.BlackboardObject{TypeName: "Blob", Json: big})
		}
		return resp, nil
	})
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("fake", f.addr, "crm", echoTool("bind")))
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	var mu sync.Mutex
	var reports []string
	res, _ := call(runContext(ctx, p, &reports, &mu), t, r, "bind", `{}`)
	if n := p.Snapshot().Blackboard.Bytes; !res.IsError() || n > 1<<20 {
		t.Fatalf("result %.80q, blackboard holds %d bytes from one call: want the updates over 1 MiB refused", res.Content, n)
	}
}
