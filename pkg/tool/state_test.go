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
	if none.Bytes() != nil || none.Changed() || tool.StateFrom(context.Background()) != nil {
		t.Error("a missing state is not empty")
	}
	in := []byte("cart:1")
	s := tool.NewState(in)
	in[0] = 'X'
	if string(s.Bytes()) != "cart:1" || s.Changed() {
		t.Errorf("NewState kept a reference or reports a change: %q", s.Bytes())
	}
	ctx := toolcall.WithState(context.Background(), s)
	tool.StateFrom(ctx).Set([]byte("cart:1,2"))
	if string(s.Bytes()) != "cart:1,2" || !s.Changed() {
		t.Errorf("Set through the context = %q, changed %v", s.Bytes(), s.Changed())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { s.Set(s.Bytes()) })
	}
	wg.Wait()
}
