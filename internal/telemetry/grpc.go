package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// ServerOptions instrument a gRPC server: a span per RPC (the child of the caller's span
// when the request carries a traceparent) and the rpc.server.* metrics. Health checks and
// reflection are left out: probes would fill the traces.
//
// It is a stats handler, so it composes with the server's interceptors and with other
// stats handlers; gRPC calls every handler installed. Over no-op providers
// (OTEL_SDK_DISABLED=true) it records nothing but still takes the caller's trace context
// into the call's, for the calls this process makes to join the caller's trace; when
// nothing is recorded at all, a handler that does only that takes otelgrpc's place, so
// that a call (a long-lived stream, say) holds nothing of otelgrpc's.
func (t *Telemetry) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	if t.Off() {
		return []grpc.ServerOption{grpc.StatsHandler(traceContextHandler{t: t})}
	}
	return []grpc.ServerOption{grpc.StatsHandler(t.ServerHandler())}
}

// traceContextHandler is the stats handler of a server that records nothing: it takes
// the W3C trace context of each call's metadata (traceparent, tracestate) into the
// call's context, as otelgrpc's handler does over no-op providers, and does nothing else.
type traceContextHandler struct{ t *Telemetry }

// TagRPC returns ctx carrying the remote span context the call's metadata holds; ctx
// itself when it holds none.
func (h traceContextHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	// Most calls carry no trace context: look for it before copying the metadata.
	if len(metadata.ValueFromIncomingContext(ctx, "traceparent")) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return h.t.Propagator().Extract(ctx, mdCarrier(md))
}

// HandleRPC records nothing.
func (traceContextHandler) HandleRPC(context.Context, stats.RPCStats) {}

// TagConn returns ctx as it is.
func (traceContextHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

// HandleConn records nothing.
func (traceContextHandler) HandleConn(context.Context, stats.ConnStats) {}

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

// Tool calls between the orchestrator and a worker are traced with one span on each
// side, the execute_tool span each side makes anyway, rather than an RPC span under it
// as well: the router sends the trace context of its execute_tool span with the call
// (AppendTraceContext), and the worker makes its execute_tool span a child of it
// (TraceContextFrom). Neither connection carries otelgrpc's stats handler, whose span,
// metrics and per-call copies of the metadata cost the hop more than the rest of what
// tracing adds.

// AppendTraceContext appends to kv, as gRPC metadata pairs, the W3C trace context of the
// span in ctx (traceparent, and tracestate when there is one) when ctx holds a valid
// one: its own span's, or the caller's when this process records no traces (no-op
// providers pass it through, so that the worker's spans still join the caller's trace).
func (t *Telemetry) AppendTraceContext(ctx context.Context, kv []string) []string {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return kv
	}
	c := appendCarrier{kv: kv}
	t.Propagator().Inject(ctx, &c)
	return c.kv
}

// TraceContextFrom returns ctx carrying the remote span context the caller sent in md
// (traceparent, tracestate), for spans started from it to join the caller's trace; ctx
// itself when traces are not recorded or md carries none.
func (t *Telemetry) TraceContextFrom(ctx context.Context, md map[string][]string) context.Context {
	if t == nil || t.noTraces || len(md["traceparent"]) == 0 {
		return ctx
	}
	return t.Propagator().Extract(ctx, mdCarrier(md))
}

// mdCarrier reads gRPC metadata (lower-case keys) for a propagator.
type mdCarrier map[string][]string

func (c mdCarrier) Get(key string) string {
	if v := c[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(string, string) {}
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// appendCarrier is a propagation.TextMapCarrier that appends what is set as metadata
// pairs; its keys are lower case, as gRPC wants them.
type appendCarrier struct{ kv []string }

func (c *appendCarrier) Get(string) string { return "" }
func (c *appendCarrier) Set(key, value string) {
	c.kv = append(c.kv, strings.ToLower(key), value)
}
func (c *appendCarrier) Keys() []string { return nil }
