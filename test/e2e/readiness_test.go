package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestReadinessAfterRestart (catalogue R13): an orchestrator restarted on its journal
// reports NOT_SERVING, while workers may already register, until the worker it knew has
// registered again; a run that arrives meanwhile waits and then calls the tool (the model
// never reads that it is missing). A known worker that never comes back holds readiness
// for registry.readiness_grace only (6s in the tests' configuration).
func TestReadinessAfterRestart(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	m := startMesh(t, "readiness.yaml", "journal: {data_dir: "+quote(dataDir)+", lease_ttl: 2s}\n")
	w := m.startWorker("pay-1", "payments", "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	m.waitWorkers("pay-1")
	addr := m.orch.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitKnownWorker(ctx, t, filepath.Join(dataDir, "journal.db"), "pay-1")

	// The worker cannot re-register while stopped: the restarted orchestrator waits.
	if err := w.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_ = m.orch.Kill()
	m.startOrchestrator(addr)
	checkHealth(ctx, t, addr, "", healthpb.HealthCheckResponse_NOT_SERVING)
	checkHealth(ctx, t, addr, toolpb.OrchestratorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	checkHealth(ctx, t, addr, toolpb.ToolRegistryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	events := make(chan *toolpb.RunResponse, 64)
	runErr := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{Prompt: "credit", ToolGroups: []string{"payments"}}) {
			if err != nil {
				runErr <- err
				return
			}
			events <- ev
		}
		runErr <- nil
	}()
	select {
	case ev := <-events:
		t.Fatalf("the run started while the orchestrator warmed up: %v", ev)
	case err := <-runErr:
		t.Fatalf("the run ended while the orchestrator warmed up: %v", err)
	case <-time.After(time.Second):
	}
	if err := w.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var final string
	for ev := range events {
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if err := <-runErr; err != nil {
		m.dump()
		t.Fatalf("the run that waited for readiness: %v", err)
	}
	if final != "credit: credited 100 cents to alice" {
		m.dump()
		t.Errorf("final text %q: the credit should have run on pay-1", final)
	}
	if _, err := m.orch.WaitLog(ctx, "orchestrator ready: every known worker registered again"); err != nil {
		t.Error(err)
	}
	checkHealth(ctx, t, addr, "", healthpb.HealthCheckResponse_SERVING)

	// A known worker that is gone for good: ready once the grace has passed.
	_ = m.orch.Kill()
	_ = w.Kill()
	start := time.Now()
	m.startOrchestrator(addr)
	checkHealth(ctx, t, addr, "", healthpb.HealthCheckResponse_NOT_SERVING)
	rec, err := m.orch.WaitLog(ctx, "orchestrator ready: readiness_grace passed before every known worker registered again")
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 5*time.Second {
		t.Errorf("ready after %s, before the 6s grace", waited)
	}
	if missing, _ := rec["missing_workers"].([]any); len(missing) != 1 || missing[0] != "pay-1" {
		t.Errorf("missing workers logged %v, want [pay-1]", rec["missing_workers"])
	}
	checkHealth(ctx, t, addr, "", healthpb.HealthCheckResponse_SERVING)
}

// waitKnownWorker waits until the orchestrator's journal records worker id as known.
func waitKnownWorker(ctx context.Context, t *testing.T, path, id string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM toolmesh_workers WHERE worker_id = ?`, id).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the journal never recorded worker %s: %v", id, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkHealth waits (briefly) for service's grpc.health.v1 status at addr to be want.
func checkHealth(ctx context.Context, t *testing.T, addr, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var got healthpb.HealthCheckResponse_ServingStatus
	for range 30 {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err == nil {
			if got = resp.GetStatus(); got == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("health of %q = %v, want %v", service, got, want)
}

// waitHealth waits up to within for the health of service at addr to be want.
func waitHealth(ctx context.Context, t *testing.T, addr, service string, want healthpb.HealthCheckResponse_ServingStatus, within time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(within)
	var got healthpb.HealthCheckResponse_ServingStatus
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}); err == nil {
			if got = resp.GetStatus(); got == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("health of %q = %v after %s, want %v", service, got, within, want)
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
