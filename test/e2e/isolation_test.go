package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// callTokenFits reports whether the call token an echo call received names the worker's
// identity as its audience, the echo tool and tenant, and expires no later than the
// call's deadline (the router's default tool timeout, 30 s, from when the call was at the
// latest sent), and whether the client's raw credentials stayed out of the metadata.
func callTokenFits(e builtin.Echo, tenant string, sentBy time.Time) bool {
	raw := e.Metadata[trust.CallTokenHeader]
	if len(raw) != 1 || len(e.Metadata["authorization"]) != 0 {
		return false
	}
	var claims trust.CallClaims
	if _, _, err := jwt.NewParser().ParseUnverified(raw[0], &claims); err != nil {
		return false
	}
	aud := claims.Audience
	return len(aud) == 1 && aud[0] == "spiffe://"+trustDomain+"/worker/shared" && claims.Tool == "show_context_shared" &&
		claims.Tenant == tenant && claims.ExpiresAt != nil && !claims.ExpiresAt.After(sentBy.Add(30*time.Second))
}

// TestTenantIsolationUnderFaults (catalogue S07): four tenants, each a client
// certificate, run concurrently through two replicas of one worker, which a fault loop
// SIGKILLs and restarts in turn while the runs go on. Every call a worker ran reports,
// from its verified call token, the tenant of the run it belongs to, and carries that
// tenant under toolctx.TenantKey and as the context's tenant_id whatever the client sent
// (tenant_id and tenantId naming another tenant): 0 mismatches. No tenant
// finds or cancels another's runs.
//
// TOOLMESH_ISOLATION_CALLS sets how many calls to make (default 200; make soak: 100,000);
// TOOLMESH_SOAK_REPORT, a directory, receives isolation-latest.md.
func TestTenantIsolationUnderFaults(t *testing.T) {
	const tenants = 4
	wantCalls := 200
	if v := os.Getenv("TOOLMESH_ISOLATION_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 {
			t.Fatalf("TOOLMESH_ISOLATION_CALLS=%q: want a number of at least 8", v)
		}
		wantCalls = n
	}
	totalRuns := wantCalls / 2 // two calls of the echo per run
	var clients []string
	extra := "tenants:\n"
	for i := range tenants {
		id := fmt.Sprintf("spiffe://%s/client/t%d", trustDomain, i)
		clients = append(clients, id)
		extra += fmt.Sprintf("  t%d: {groups: [echo_shared], clients: [%s]}\n", i, id)
	}
	clients = append(clients, "spiffe://"+trustDomain+"/client/dev")
	extra = strings.Replace(extra, "clients: [spiffe://"+trustDomain+"/client/t0]", "clients: [spiffe://"+trustDomain+"/client/t0, spiffe://"+trustDomain+"/client/dev]", 1)
	m := startTLSMeshWith(t, tlsMeshConfig{script: "isolation.yaml",
		workers: []string{"{id: spiffe://" + trustDomain + "/worker/shared, groups: [echo_shared]}"}, clients: clients, extra: extra})
	wf := m.pki.valid(t, "worker-shared", "/worker/shared")
	replicas := []string{"shared-1", "shared-2"}
	var procsMu sync.Mutex
	procs := map[string]*harness.Proc{}
	start := func(id string) error {
		p, err := harness.StartWorker(id, id, "echo_shared", m.orch.Addr, nil, tlsArgs(wf)...)
		if err != nil {
			return err
		}
		procsMu.Lock()
		procs[id] = p
		procsMu.Unlock()
		return nil
	}
	t.Cleanup(func() {
		procsMu.Lock()
		defer procsMu.Unlock()
		for _, p := range procs {
			_ = p.Kill()
		}
	})
	for _, id := range replicas {
		if err := start(id); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+time.Duration(totalRuns)*5*time.Millisecond)
	defer cancel()
	for _, id := range replicas {
		m.waitWorker(ctx, id, true)
	}

	cs := make([]*client.Client, tenants)
	for i := range tenants {
		f := m.pki.valid(t, fmt.Sprintf("client-t%d", i), fmt.Sprintf("/client/t%d", i))
		src, err := trust.Load(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(src.Close)
		if cs[i], err = client.Dial(m.orch.Addr, src.ClientCredentials(m.orchID())); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs[i].Close() })
	}

	// The fault loop: a replica SIGKILLed, and started again, every two seconds or at
	// least four times over the test, one replica after the other. The next kill waits
	// for the restarted replica to have registered again, so that one replica always
	// serves: what is under test is isolation across failover, not a group with no
	// replica at all (its calls would fail, rightly, and prove nothing).
	var next, done, calls, mismatches, failed, kills atomic.Int64
	faults := make(chan struct{})
	var faultWG sync.WaitGroup
	registered := func(id string) bool {
		ws, err := m.c.ListWorkers(ctx)
		if err != nil {
			return false
		}
		for _, w := range ws {
			if w.GetWorkerId() == id && w.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
				return true
			}
		}
		return false
	}
	// mark(k) is the run whose start makes the k+1st fault due; the runners hold runs
	// from a few past it until that fault has happened, so that each of the first four
	// faults lands on calls in flight however fast the runs go.
	mark := func(k int64) int64 { return int64(totalRuns) * (k + 1) / 5 }
	gate := func(n int64) bool {
		for k := kills.Load(); k < 4 && n >= mark(k)+4; k = kills.Load() {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(5 * time.Millisecond):
			}
		}
		return true
	}
	faultWG.Go(func() {
		every := time.NewTicker(2 * time.Second)
		defer every.Stop()
		for i := 0; ; i++ {
			// A small run is over in a fraction of a second: its first four faults
			// follow its progress (see gate), later ones come with the ticker.
			due := next.Load() >= mark(kills.Load())
			select {
			case <-faults:
				return
			case <-every.C:
			case <-time.After(20 * time.Millisecond):
				if !due || kills.Load() >= 4 {
					continue
				}
			}
			id := replicas[i%len(replicas)]
			procsMu.Lock()
			p := procs[id]
			procsMu.Unlock()
			_ = p.Kill()
			kills.Add(1)
			if err := start(id); err != nil {
				t.Errorf("restarting %s: %v", id, err)
				return
			}
			for !registered(id) {
				select {
				case <-faults:
					return
				case <-ctx.Done():
					t.Errorf("replica %s did not register again after its restart", id)
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	})

	var mu sync.Mutex
	runs := map[string]int{} // a sample of run ids → tenant
	var examples, unanswered []string
	var wg sync.WaitGroup
	began := time.Now()
	for range 8 {
		wg.Go(func() {
			for {
				n := next.Add(1) - 1
				if n >= int64(totalRuns) || !gate(n) {
					return
				}
				tn := int(n % tenants)
				// The client claims another tenant in the context: the verified one wins.
				other := fmt.Sprintf("t%d", (tn+1)%tenants)
				req := &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_shared"}, Context: map[string]string{"tenant_id": other, "tenantId": other}}
				var id string
				var runErr error
				for ev, err := range cs[tn].Run(ctx, req) {
					if err != nil {
						runErr = err
						break
					}
					id = ev.GetRunId()
					f := ev.GetToolCallFinished()
					if f == nil {
						continue
					}
					if f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
						mu.Lock()
						if len(unanswered) < 5 {
							unanswered = append(unanswered, fmt.Sprintf("%s: %s", f.GetOutcome(), f.GetContent()))
						}
						mu.Unlock()
						continue
					}
					calls.Add(1)
					var e builtin.Echo
					want := fmt.Sprintf("t%d", tn)
					sent := time.Now()
					if err := json.Unmarshal([]byte(f.GetContent()), &e); err != nil || e.Tenant != want || e.Context[toolctx.TenantKey] != want || e.Context["tenant_id"] != want || !callTokenFits(e, want, sent) {
						mismatches.Add(1)
						mu.Lock()
						if len(examples) < 5 {
							examples = append(examples, fmt.Sprintf("a call of tenant %s answered %q", want, f.GetContent()))
						}
						mu.Unlock()
					}
				}
				done.Add(1)
				if runErr != nil {
					failed.Add(1)
					continue
				}
				mu.Lock()
				if len(runs) < 64 {
					runs[id] = tn
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(faults)
	faultWG.Wait()
	elapsed := time.Since(began)
	for _, e := range examples {
		t.Error(e)
	}
	summary := fmt.Sprintf("%d runs of %d tenants in %s (%.0f calls/s), %d failed, %d calls answered, %d mismatches, %d worker replicas SIGKILLed and restarted",
		totalRuns, tenants, elapsed.Round(time.Millisecond), float64(calls.Load())/elapsed.Seconds(), failed.Load(), calls.Load(), mismatches.Load(), kills.Load())
	t.Log(summary)
	if mismatches.Load() > 0 {
		t.Errorf("%d calls saw another tenant", mismatches.Load())
	}
	if calls.Load() < int64(wantCalls)*9/10 {
		t.Errorf("only %d of %d calls were answered; some that were not: %q", calls.Load(), wantCalls, unanswered)
	}
	if failed.Load() > int64(totalRuns)/10 {
		t.Errorf("%d of %d runs failed", failed.Load(), totalRuns)
	}
	if kills.Load() < 2 {
		t.Errorf("only %d faults were injected", kills.Load())
	}
	if dir := os.Getenv("TOOLMESH_SOAK_REPORT"); dir != "" && !t.Failed() {
		report := "# Tenant isolation under faults (catalogue S07)\n\n" + time.Now().UTC().Format(time.RFC3339) + ": " + summary +
			". Four tenants, each a client certificate, over mutual TLS; each call's tenant read by the worker from its verified call token, from the request's tenant (toolmesh.tenant) and from the context's tenant_id, which every client set to another tenant's name (as tenantId too).\n"
		if err := os.WriteFile(filepath.Join(dir, "isolation-latest.md"), []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	checked := 0
	for id, tn := range runs {
		other := cs[(tn+1)%tenants]
		if _, err := other.GetRun(ctx, id); status.Code(err) != codes.NotFound {
			t.Errorf("tenant t%d's GetRun of t%d's run %s: %v, want NotFound", (tn+1)%tenants, tn, id, err)
		}
		if _, err := other.CancelRun(ctx, id, "not yours"); status.Code(err) != codes.NotFound {
			t.Errorf("tenant t%d's CancelRun of t%d's run %s: %v, want NotFound", (tn+1)%tenants, tn, id, err)
		}
		if checked++; checked == 16 {
			break
		}
	}
}
