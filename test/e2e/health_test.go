package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestPlaintextHealthUnderTLS: with mutual TLS on, a kubelet's gRPC probe (plaintext, no
// certificate) reaches the orchestrator's and the worker's health_listen ports, which
// carry the same statuses as the TLS ports and nothing else; the TLS ports stay closed to
// plaintext.
func TestPlaintextHealthUnderTLS(t *testing.T) {
	orchHealth, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	workerHealth, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startTLSMeshWith(t, tlsMeshConfig{script: "onecall.yaml",
		workers: []string{"{id: spiffe://" + trustDomain + "/worker/math, groups: [math]}"},
		clients: []string{"spiffe://" + trustDomain + "/client/dev"},
		extra:   "health_listen: " + orchHealth + "\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := m.worker("math-1", "math", append(tlsArgs(m.pki.valid(t, "worker-math", "/worker/math")), "--health-listen", workerHealth)...)
	m.waitWorker(ctx, "math-1", true)

	check := func(addr, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer func() { _ = conn.Close() }()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	for _, c := range []struct{ addr, service string }{
		{orchHealth, ""}, {orchHealth, toolpb.ToolRegistryService_ServiceDesc.ServiceName}, {orchHealth, toolpb.OrchestratorService_ServiceDesc.ServiceName},
		{workerHealth, ""}, {workerHealth, toolpb.ToolWorkerService_ServiceDesc.ServiceName},
	} {
		var st healthpb.HealthCheckResponse_ServingStatus
		// The orchestrator turns ready once the worker it waits for is back, or at once.
		for st, err = check(c.addr, c.service); err == nil && st != healthpb.HealthCheckResponse_SERVING && ctx.Err() == nil; st, err = check(c.addr, c.service) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("plaintext health of %q at %s: %v, %v", c.service, c.addr, st, err)
		}
	}
	// Only health is there: the orchestrator's API is not.
	conn, err := grpc.NewClient(orchHealth, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := toolpb.NewOrchestratorServiceClient(conn).ListTools(ctx, &toolpb.ListToolsRequest{}); err == nil {
		t.Error("the health port answered ListTools")
	}
	// The TLS ports take no plaintext probe.
	if _, err := check(m.orch.Addr, ""); err == nil {
		t.Error("the orchestrator's TLS port answered a plaintext health check")
	}

	// A draining worker says so on its health port too.
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := check(workerHealth, "")
		if err != nil || st == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's health port still says %v after SIGTERM", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
