package router

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/toolmesh/toolmesh/internal/wire"
)

// DialOptions are the options every connection to a worker needs: keepalive, so that a
// silent partition fails fast instead of at the deadline; no service config from DNS, so
// that no retry policy can re-execute calls behind the router's back (the router is the
// only retry layer); and the stats handler that tells whether a failed call ever left
// this process. A custom Options.Dial should start from them.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableServiceConfig(),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithStatsHandler(sentTracker{}),
		grpc.WithInitialWindowSize(wire.ReceiveStreamWindow),
		grpc.WithInitialConnWindowSize(wire.ReceiveConnWindow),
	}
}

// sent records whether a call's request reached the transport, and whether the worker
// answered with response headers. A call that fails before its request left provably
// never reached a worker, so it is safe to send to another replica; one that fails after
// the worker's headers arrived was answered by a live worker.
type sent struct {
	tracked  atomic.Bool // the stats handler saw the call: without it nothing is known
	headers  atomic.Bool
	answered atomic.Bool
}

// neverSent reports whether the call provably never left this process. A connection
// dialled without the stats handler (a custom Options.Dial that forgot DialOptions)
// proves nothing, so its calls count as possibly sent.
func (s *sent) neverSent() bool { return s.tracked.Load() && !s.headers.Load() }

// workerAnswered reports whether the worker sent response headers: it ran the call (a
// refusal before running it is a trailers-only response, without headers).
func (s *sent) workerAnswered() bool { return s.answered.Load() }

type sentKey struct{}

func withSent(ctx context.Context) (context.Context, *sent) {
	s := &sent{}
	return context.WithValue(ctx, sentKey{}, s), s
}

// sentTracker is a stats handler that marks a call as sent once its headers were handed to
// a transport.
type sentTracker struct{}

func (sentTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if m, ok := ctx.Value(sentKey{}).(*sent); ok {
		m.tracked.Store(true)
	}
	return ctx
}

func (sentTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	m, ok := ctx.Value(sentKey{}).(*sent)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.OutHeader, *stats.OutPayload:
		m.headers.Store(true)
	case *stats.InHeader:
		m.answered.Store(true)
	}
}

func (sentTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentTracker) HandleConn(context.Context, stats.ConnStats) {}
