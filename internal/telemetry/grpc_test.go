package telemetry_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

// echoServer is a one-method gRPC service that remembers what the handler saw.
type echoServer struct {
	mu   sync.Mutex
	span trace.SpanContext
	md   metadata.MD
}

func (e *echoServer) ping(ctx context.Context) (*emptypb.Empty, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.span = trace.SpanContextFromContext(ctx)
	e.md, _ = metadata.FromIncomingContext(ctx)
	return &emptypb.Empty{}, nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "toolmesh.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Ping",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return srv.(*echoServer).ping(ctx)
		},
	}},
}

// countingHandler is another stats handler, like the router's: both must see every RPC.
type countingHandler struct{ rpcs atomic.Int64 }

func (c *countingHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	c.rpcs.Add(1)
	return ctx
}
func (*countingHandler) HandleRPC(context.Context, stats.RPCStats) {}
func (*countingHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (*countingHandler) HandleConn(context.Context, stats.ConnStats) {}

func TestGRPCRoundTripIsOneTrace(t *testing.T) {
	client := telemetrytest.New(t, telemetry.Options{})
	server := telemetrytest.New(t, telemetry.Options{})

	lis := bufconn.Listen(1 << 20)
	serverCounter := &countingHandler{}
	srv := grpc.NewServer(append(server.ServerOptions(), grpc.StatsHandler(serverCounter))...)
	echo := &echoServer{}
	srv.RegisterService(&echoDesc, echo)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()

	clientCounter := &countingHandler{}
	opts := append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(clientCounter),
	}, client.DialOptions()...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()

	ctx, tool := client.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add", Group: "math"})
	member, _ := baggage.NewMember("secret", "must-not-travel")
	bag, _ := baggage.New(member)
	ctx = baggage.ContextWithBaggage(ctx, bag)
	ctx = metadata.AppendToOutgoingContext(ctx, "tm-ctx-tenant", "acme")
	if err := conn.Invoke(ctx, "/toolmesh.test.Echo/Ping", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	client.EndTool(tool, telemetry.ToolResult{})

	toolSpan := client.Span(t, "execute_tool add")
	clientSpan := client.Span(t, "toolmesh.test.Echo/Ping")
	serverSpan := server.Span(t, "toolmesh.test.Echo/Ping")

	if clientSpan.SpanKind() != trace.SpanKindClient || serverSpan.SpanKind() != trace.SpanKindServer {
		t.Errorf("kinds: client %v, server %v", clientSpan.SpanKind(), serverSpan.SpanKind())
	}
	if clientSpan.Parent().SpanID() != toolSpan.SpanContext().SpanID() {
		t.Errorf("client span's parent %s, want the execute_tool span %s", clientSpan.Parent().SpanID(), toolSpan.SpanContext().SpanID())
	}
	if !serverSpan.Parent().IsRemote() || serverSpan.Parent().SpanID() != clientSpan.SpanContext().SpanID() {
		t.Errorf("server span's parent %v, want the remote client span %s", serverSpan.Parent(), clientSpan.SpanContext().SpanID())
	}
	traceID := toolSpan.SpanContext().TraceID()
	for _, s := range []trace.SpanContext{clientSpan.SpanContext(), serverSpan.SpanContext()} {
		if s.TraceID() != traceID {
			t.Errorf("trace id %s, want %s across the hop", s.TraceID(), traceID)
		}
	}

	echo.mu.Lock()
	defer echo.mu.Unlock()
	if echo.span.SpanID() != serverSpan.SpanContext().SpanID() {
		t.Errorf("handler ran in span %s, want the server span %s", echo.span.SpanID(), serverSpan.SpanContext().SpanID())
	}
	if len(echo.md.Get("traceparent")) != 1 {
		t.Errorf("traceparent not sent: %v", echo.md)
	}
	if got := echo.md.Get("baggage"); len(got) != 0 {
		t.Errorf("baggage travelled: %q", got)
	}
	if got := echo.md.Get("tm-ctx-tenant"); len(got) != 1 || got[0] != "acme" {
		t.Errorf("tm-ctx-tenant = %q, want [acme] untouched", got)
	}

	for _, s := range append(client.Ended(), server.Ended()...) {
		if s.Name() == "grpc.health.v1.Health/Check" {
			t.Errorf("health check traced on %v", s.SpanKind())
		}
	}
	if serverCounter.rpcs.Load() != 2 || clientCounter.rpcs.Load() != 2 {
		t.Errorf("other stats handlers saw %d (server) and %d (client) RPCs, want 2 each", serverCounter.rpcs.Load(), clientCounter.rpcs.Load())
	}
}

func TestNilTelemetryGRPCOptions(t *testing.T) {
	var tel *telemetry.Telemetry
	if tel.ServerOptions() != nil || tel.DialOptions() != nil {
		t.Error("a nil Telemetry installs stats handlers")
	}
}
