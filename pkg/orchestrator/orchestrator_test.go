package orchestrator_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/orchestrator"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig is a config for an orchestrator on a free loopback port, its journal in
// memory.
func testConfig() orchestrator.Config {
	cfg := orchestrator.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Provider.Name = "scripted"
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serving starts an orchestrator of opts that serves until the test ends or stop is
// called (its shutdown), and a context that ends with the test, within 60 s.
func serving(t *testing.T, opts orchestrator.Options) (o *orchestrator.Orchestrator, ctx context.Context, stop context.CancelFunc) {
	t.Helper()
	o, err := orchestrator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(runCtx) }()
	t.Cleanup(func() { stop(); o.Close(); <-done; cancel() })
	return o, ctx, stop
}

// TestRunFailsCleanly: when a listener cannot be opened after serving began, Run shuts
// everything down before it returns the reason: no goroutine of it is left (TestMain
// checks), and it cannot run again.
func TestRunFailsCleanly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig()
	cfg.Telemetry.MetricsListen = busy.Addr().String()
	o, err := orchestrator.New(orchestrator.Options{Config: cfg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := o.Run(ctx); err == nil || !strings.Contains(err.Error(), "metrics listen") {
		t.Errorf("Run = %v, want the metrics listener's failure", err)
	}
	if err := o.Run(ctx); err == nil {
		t.Error("a second Run served again")
	}
	o.Close() // a no-op now
}

// TestCloseStopsRun: Close on a running orchestrator stops it as the end of Run's
// context does; Run returns without an error, and TestMain finds nothing of it left.
func TestCloseStopsRun(t *testing.T) {
	o, err := orchestrator.New(orchestrator.Options{Config: testConfig(), Logger: quiet(), ShutdownTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- o.Run(context.Background()) }()
	// Serving: the registry's health answers once the gRPC server serves.
	conn, err := grpc.NewClient(o.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: toolpb.ToolRegistryService_ServiceDesc.ServiceName}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	o.Close()
	// Run's work is over when Close returns; its result follows.
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after Close, want nil", err)
		}
	case <-ctx.Done():
		t.Error("Run did not return after Close")
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	p, err := orchestrator.OpenAI(orchestrator.ProviderOptions{APIKey: "k", BaseURL: "http://127.0.0.1:1/v1", DefaultModel: "m"})
	if err != nil {
		t.Fatal(err)
	}
	bad := testConfig()
	bad.Loop.MaxIterations = 0
	for name, opts := range map[string]orchestrator.Options{
		"a bad config":             {Config: bad},
		"a provider name with '/'": {Config: testConfig(), Providers: map[string]orchestrator.Provider{"a/b": p}},
		"a zero provider":          {Config: testConfig(), Providers: map[string]orchestrator.Provider{"x": {}}},
		"an unknown default":       {Config: testConfig(), DefaultProvider: "nope"},
		"a layer after no layer":   {Config: testConfig(), Layers: []orchestrator.Layer{{Name: "x", After: "nowhere"}}},
		"a nil converter":          {Config: testConfig(), Converters: map[string]orchestrator.Converter{"g": nil}},
	} {
		opts.Logger = quiet()
		if o, err := orchestrator.New(opts); err == nil {
			o.Close()
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestInterceptorMisbehaving: an interceptor that panics, returns a plain error, or calls
// the rest of the pipeline twice still gives the model a result, and the tool runs at
// most once per call.
func TestInterceptorMisbehaving(t *testing.T) {
	runs := 0
	probe := tool.New("probe", "Probes.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		runs++
		return tool.Text("ran"), nil
	})
	for _, tc := range []struct {
		name string
		ic   orchestrator.Interceptor
		want string
		runs int
	}{
		{"panics", func(ctx context.Context, _ orchestrator.Call, next func(context.Context) (tool.Result, error)) (tool.Result, error) {
			_, _ = next(ctx)
			panic("boom")
		}, "tool 'probe' failed in the orchestrator's layer 'bad'", 1},
		{"a plain error", func(context.Context, orchestrator.Call, func(context.Context) (tool.Result, error)) (tool.Result, error) {
			return tool.Result{}, errors.New("no such thing")
		}, "no such thing", 0},
		{"next twice", func(ctx context.Context, _ orchestrator.Call, next func(context.Context) (tool.Result, error)) (tool.Result, error) {
			_, _ = next(ctx)
			return next(ctx)
		}, "the orchestrator's layer 'bad' called tool 'probe' twice; it ran once", 1},
	} {
		runs = 0
		l := orchestrator.Layer{Name: "bad", For: func(tool.Tool) orchestrator.Interceptor { return tc.ic }}
		wrapped := toolcall.Pipeline{orchestrator.LayerForTest(l)}.Wrap(probe)
		res, err := wrapped.Call(t.Context(), `{}`)
		if err != nil || !res.IsError() || res.Content != tc.want || runs != tc.runs {
			t.Errorf("%s: %+v, %v after %d runs; want the error result %q after %d", tc.name, res, err, runs, tc.want, tc.runs)
		}
	}
}
