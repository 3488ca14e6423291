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
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer recovered(log, info.FullMethod, &err)
			return h(srv, ss)
		}),
	}
}

// recoverUnary is the unary interceptor of RecoveryInterceptors.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer recovered(log, info.FullMethod, &err)
		return h(ctx, req)
	}
}

// recovered, deferred, turns a panic of method's handler into err (INTERNAL) and a log
// line.
func recovered(log *slog.Logger, method string, err *error) {
	if p := recover(); p != nil {
		log.Error("handler panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
		*err = internalError(method)
	}
}

// internalError is the status of a handler that panicked.
func internalError(method string) error {
	return wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_INTERNAL, Message: "internal error in " + method}.Err()
}
