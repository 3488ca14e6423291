package decorators

import (
	"context"
	"time"

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

type listenerKey struct{}

// WithListener returns ctx whose decorated calls report to l.
func WithListener(ctx context.Context, l Listener) context.Context {
	return context.WithValue(ctx, listenerKey{}, l)
}

func listenerFrom(ctx context.Context) Listener {
	l, _ := ctx.Value(listenerKey{}).(Listener)
	return l
}

// publishing reports every finished call to the context's Listener.
type publishing struct{ base }

// EventPublishing wraps t so that each call is reported, with its duration, when it
// finishes, failed or not.
func EventPublishing(t tool.Tool) tool.Tool { return publishing{base{t}} }

func (p publishing) Call(ctx context.Context, input string) (tool.Result, error) {
	start := time.Now()
	res, err := p.d.Call(ctx, input)
	if l := listenerFrom(ctx); l != nil {
		info, _ := tool.CallInfoFrom(ctx)
		l.Called(Call{Tool: p.d.Definition().Name, CallID: info.CallID, LoopID: info.LoopID, Input: input, Result: res, Signal: err, Duration: time.Since(start)})
	}
	return res, err
}
