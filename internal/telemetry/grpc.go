package telemetry

import (
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// ServerOptions instrument a gRPC server: a span per RPC (the child of the caller's span
// when the request carries a traceparent) and the rpc.server.* metrics. Health checks and
// reflection are left out: probes would fill the traces.
//
// It is a stats handler, so it composes with the server's interceptors and with other
// stats handlers; gRPC calls every handler installed.
func (t *Telemetry) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(t.ServerHandler())}
}

// DialOptions instrument a gRPC client connection: a CLIENT span per RPC, the traceparent
// header in its metadata (W3C tracecontext only: no baggage, and the tm-ctx-* entries of
// the ToolCallContext are left as they are), and the rpc.client.* metrics. Append them to
// the connection's other options; grpc.WithStatsHandler may be given several times.
func (t *Telemetry) DialOptions() []grpc.DialOption {
	if t == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(t.ClientHandler())}
}

// ServerHandler is the stats handler ServerOptions installs, for callers that build
// their options themselves.
func (t *Telemetry) ServerHandler() stats.Handler {
	return otelgrpc.NewServerHandler(t.grpcOptions()...)
}

// ClientHandler is the stats handler DialOptions installs.
func (t *Telemetry) ClientHandler() stats.Handler {
	return otelgrpc.NewClientHandler(t.grpcOptions()...)
}

func (t *Telemetry) grpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.TracerProvider()),
		otelgrpc.WithMeterProvider(t.MeterProvider()),
		otelgrpc.WithPropagators(t.Propagator()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return traced(info.FullMethodName) }),
	}
}

// traced reports whether an RPC gets a span: everything but health checks and reflection.
func traced(method string) bool {
	return !strings.HasPrefix(method, "/grpc.health.v1.Health/") &&
		!strings.HasPrefix(method, "/grpc.reflection.")
}
