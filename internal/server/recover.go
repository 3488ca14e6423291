package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// RecoveryInterceptors turn a panic in a handler into an INTERNAL status and a log line,
// so that one bad request cannot take the orchestrator down with every other run.
func RecoveryInterceptors(log *slog.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if p := recover(); p != nil {
					log.Error("handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
					err = internalError(info.FullMethod)
				}
			}()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer func() {
				if p := recover(); p != nil {
					log.Error("handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
					err = internalError(info.FullMethod)
				}
			}()
			return h(srv, ss)
		}),
	}
}

// internalError is the status of a handler that panicked.
func internalError(method string) error {
	return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_INTERNAL, Message: "internal error in " + method}.Err()
}
