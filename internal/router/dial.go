package router

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// DialOptions are the options every connection to a worker needs: keepalive, so that a
// silent partition fails fast instead of at the deadline; no service config from DNS, so
// that no retry policy can re-execute calls behind the router's back (the router is the
// only retry layer); and fixed flow-control windows. A custom Options.Dial should start
// from them.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableServiceConfig(),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithInitialWindowSize(wire.ReceiveStreamWindow),
		grpc.WithInitialConnWindowSize(wire.ReceiveConnWindow),
	}
}

// sent is what a failed call tells of how far it got.
type sent struct {
	// left: the call's stream was handed to a transport (gRPC queued its headers). A
	// call that fails before that provably never reached a worker, so it is safe to send
	// to another replica.
	left bool
	// answered: the worker sent response headers, so it ran the call (a refusal before
	// running it is a trailers-only response, without headers).
	answered bool
}

func (s sent) neverSent() bool      { return !s.left }
func (s sent) workerAnswered() bool { return s.answered }

var (
	invokeDesc       = grpc.StreamDesc{StreamName: "Invoke"}
	invokeStreamDesc = grpc.StreamDesc{StreamName: "InvokeStream", ServerStreams: true}
)

// invoke makes the unary Invoke call through the stream API, which says how far a
// failed call got without a stats handler on the connection: a stats handler makes
// gRPC copy every call's metadata and report every step of it, which costs a hop more
// than the rest of what the router does for it.
func invoke(ctx context.Context, cc grpc.ClientConnInterface, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, sent, error) {
	cs, err := cc.NewStream(ctx, &invokeDesc, toolpb.ToolWorkerService_Invoke_FullMethodName)
	if err != nil {
		return nil, sent{}, err
	}
	// SendMsg's error, if any, is io.EOF or the stream's own: RecvMsg returns the status.
	_ = cs.SendMsg(req)
	resp := new(toolpb.InvokeResponse)
	if err := cs.RecvMsg(resp); err != nil {
		return nil, sent{left: true, answered: headersArrived(cs)}, err
	}
	return resp, sent{left: true, answered: true}, nil
}

// headersArrived reports whether the worker sent response headers on a stream that has
// ended in failure.
func headersArrived(cs grpc.ClientStream) bool {
	md, err := cs.Header()
	return err == nil && md != nil
}
