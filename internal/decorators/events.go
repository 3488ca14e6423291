package decorators

import (
	"context"
	"time"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Call is one finished call, as the event-publishing decorator reports it.
type Call struct {
	Tool, CallID, LoopID string
	Input                string
	Result               tool.Result
	// Signal is the control-flow signal the call raised, if any.
	Signal   error
	Duration time.Duration
}

// Listener hears what a run's decorated tools do. The run service sets one in the
// context of every call (WithListener); its methods may be called from several
// goroutines at once.
type Listener interface {
	// Captured: an artifact (or an element of one) went to the named sink.
	Captured(sink string, c Capture)
	// Called: a call finished.
	Called(c Call)
}

// ListenerKey is the context key of a run's Listener: WithListener sets it, and a
// context of the run's own may answer it.
type ListenerKey struct{}

// WithListener returns ctx whose decorated calls report to l.
func WithListener(ctx context.Context, l Listener) context.Context {
	return context.WithValue(ctx, ListenerKey{}, l)
}

func listenerFrom(ctx context.Context) Listener {
	l, _ := ctx.Value(ListenerKey{}).(Listener)
	return l
}

// EventsLayer reports every finished call, failed or not, with its duration, to the
// context's Listener.
var EventsLayer = toolcall.Layer{Name: LayerEvents, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
	name := t.Definition().Name
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
			start := time.Now()
			res, err := next(ctx, c)
			if l := listenerFrom(ctx); l != nil {
				took := time.Since(start)
				if d := c.Dispatch; d != nil && (d.Replayed || d.Took > 0) {
					// What the journal records (and a replay reports) of how long the call
					// took, so that the run's history reads the same after a resume.
					took = d.Took
				}
				l.Called(Call{Tool: name, CallID: c.Info.CallID, LoopID: c.Info.LoopID, Input: c.Input, Result: res, Signal: err, Duration: took})
			}
			return res, err
		}
	}
}}

// EventPublishing wraps t in EventsLayer.
func EventPublishing(t tool.Tool) tool.Tool { return layer(EventsLayer)(t) }
