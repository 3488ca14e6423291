package examplegroups

import (
	"context"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// delayed adds latency before each call, to make a tool slow for demos and failure tests.
type delayed struct {
	tool.Tool
	d time.Duration
}

// WithDelay wraps each tool so that every call waits d first (or until its context ends).
func WithDelay(d time.Duration, ts []tool.Tool) []tool.Tool {
	out := make([]tool.Tool, len(ts))
	for i, t := range ts {
		out[i] = delayed{t, d}
	}
	return out
}

// Delegate exposes the wrapped tool.
func (t delayed) Delegate() tool.Tool { return t.Tool }

// Call waits, then calls the wrapped tool with the same context.
func (t delayed) Call(ctx context.Context, input string) (tool.Result, error) {
	timer := time.NewTimer(t.d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return tool.ErrorWithCode(tool.CodeTimeout, "cancelled while waiting: "+ctx.Err().Error()), nil
	}
	return t.Tool.Call(ctx, input)
}
