package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// TestTenantIsolationUnderFaults (catalogue S07, in its end-to-end form): four tenants,
// each a client certificate, run concurrently through two replicas of one worker, one of
// which is SIGKILLed and restarted meanwhile. Every call a worker ran reports, from its
// verified call token, the tenant of the run it belongs to, and carries that tenant as
// the context's tenant_id whatever the client sent: 0 mismatches. No tenant finds
// another's runs.
func TestTenantIsolationUnderFaults(t *testing.T) {
	const tenants, runsPerTenant = 4, 25
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
	m.worker("shared-1", "echo_shared", tlsArgs(wf)...)
	m.worker("shared-2", "echo_shared", tlsArgs(wf)...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m.waitWorker(ctx, "shared-1", true)
	m.waitWorker(ctx, "shared-2", true)

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

	type call struct{ tenant, verified, claimed string }
	var mu sync.Mutex
	var calls []call
	runs := map[string]int{} // run id → tenant
	failed := 0
	var wg sync.WaitGroup
	var done atomic.Int64
	var kill sync.Once
	sem := make(chan struct{}, 8)
	for n := range tenants * runsPerTenant {
		tn := n % tenants
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			// The client claims another tenant in the context: the verified one wins.
			req := &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_shared"}, Context: map[string]string{"tenant_id": fmt.Sprintf("t%d", (tn+1)%tenants)}}
			var id string
			var got []call
			var runErr error
			for ev, err := range cs[tn].Run(ctx, req) {
				if err != nil {
					runErr = err
					break
				}
				id = ev.GetRunId()
				if f := ev.GetToolCallFinished(); f != nil && f.GetOutcome() == toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
					var e builtin.Echo
					if err := json.Unmarshal([]byte(f.GetContent()), &e); err != nil {
						t.Errorf("a call's answer is not an echo: %q", f.GetContent())
						continue
					}
					got = append(got, call{tenant: fmt.Sprintf("t%d", tn), verified: e.Tenant, claimed: e.Context["tenant_id"]})
				}
			}
			if done.Add(1) == tenants*runsPerTenant/4 {
				// A replica dies while runs are in flight, and comes back.
				kill.Do(func() {
					_ = m.procs[1].Kill() // shared-1
					m.worker("shared-1", "echo_shared", tlsArgs(wf)...)
				})
			}
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, got...)
			if runErr != nil {
				failed++
				return
			}
			runs[id] = tn
		})
	}
	wg.Wait()
	mismatches := 0
	for _, c := range calls {
		if c.verified != c.tenant || c.claimed != c.tenant {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("a call of tenant %s saw verified tenant %q and tenant_id %q", c.tenant, c.verified, c.claimed)
			}
		}
	}
	t.Logf("%d runs, %d failed, %d calls, %d mismatches", tenants*runsPerTenant, failed, len(calls), mismatches)
	if len(calls) < tenants*runsPerTenant {
		t.Errorf("only %d calls ran", len(calls))
	}
	if failed > tenants*runsPerTenant/10 {
		t.Errorf("%d of %d runs failed", failed, tenants*runsPerTenant)
	}
	checked := 0
	for id, tn := range runs {
		other := cs[(tn+1)%tenants]
		if _, err := other.GetRun(ctx, id); status.Code(err) != codes.NotFound {
			t.Errorf("tenant t%d's GetRun of t%d's run %s: %v, want NotFound", (tn+1)%tenants, tn, id, err)
		}
		if checked++; checked == 16 {
			break
		}
	}
}
