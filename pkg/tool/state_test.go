package tool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func TestState(t *testing.T) {
	var none *tool.State
	if none.Bytes() != nil || toolcall.StateChanged(none) || tool.StateFrom(context.Background()) != nil {
		t.Error("a missing state is not empty")
	}
	in := []byte("cart:1")
	s := toolcall.NewState(in)
	in[0] = 'X'
	if string(s.Bytes()) != "cart:1" || toolcall.StateChanged(s) {
		t.Errorf("toolcall.NewState kept a reference or reports a change: %q", s.Bytes())
	}
	ctx := toolcall.WithState(context.Background(), s)
	tool.StateFrom(ctx).Set([]byte("cart:1,2"))
	if string(s.Bytes()) != "cart:1,2" || !toolcall.StateChanged(s) {
		t.Errorf("Set through the context = %q, changed %v", s.Bytes(), toolcall.StateChanged(s))
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { s.Set(s.Bytes()) })
	}
	wg.Wait()
}
