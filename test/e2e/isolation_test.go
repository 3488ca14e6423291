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

	"github.com/toolmesh/toolmesh/internal/examplegroups"
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
func callTokenFits(e examplegroups.Echo, tenant string, sentBy time.Time) bool {
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

// isolationTenants is how many tenants TestTenantIsolationUnderFaults runs.
const isolationTenants = 4

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
	wantCalls := isolationCalls(t)
	totalRuns := wantCalls / 2 // two calls of the echo per run
	m := startIsolationMesh(t)
	r := &isolationRun{m: m, totalRuns: totalRuns, wf: m.pki.valid(t, "worker-shared", "/worker/shared"),
		replicas: []string{"shared-1", "shared-2"}, procs: map[string]*harness.Proc{}, runs: map[string]int{}}
	r.startReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+time.Duration(totalRuns)*5*time.Millisecond)
	defer cancel()
	for _, id := range r.replicas {
		m.waitWorker(ctx, id, true)
	}
	r.cs = isolationClients(t, m)

	// The fault loop: a replica SIGKILLed, and started again, every two seconds or at
	// least four times over the test, one replica after the other. The next kill waits
	// for the restarted replica to have registered again, so that one replica always
	// serves: what is under test is isolation across failover, not a group with no
	// replica at all (its calls would fail, rightly, and prove nothing).
	faults := make(chan struct{})
	var faultWG sync.WaitGroup
	faultWG.Go(func() { r.injectFaults(ctx, t, faults) })

	began := time.Now()
	r.runAll(ctx)
	close(faults)
	faultWG.Wait()
	r.report(t, wantCalls, time.Since(began))
	r.checkRunsHidden(ctx, t)
}

// isolationCalls is how many calls TestTenantIsolationUnderFaults makes: 200, or
// TOOLMESH_ISOLATION_CALLS.
func isolationCalls(t *testing.T) int {
	t.Helper()
	wantCalls := 200
	if v := os.Getenv("TOOLMESH_ISOLATION_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 {
			t.Fatalf("TOOLMESH_ISOLATION_CALLS=%q: want a number of at least 8", v)
		}
		wantCalls = n
	}
	return wantCalls
}

// startIsolationMesh starts a mutual-TLS orchestrator whose tenants t0 to t3 each have a
// client identity (t0 the dev client's too) and share the group echo_shared.
func startIsolationMesh(t *testing.T) *tlsMesh {
	t.Helper()
	var clients []string
	extra := "tenants:\n"
	for i := range isolationTenants {
		id := fmt.Sprintf("spiffe://%s/client/t%d", trustDomain, i)
		clients = append(clients, id)
		extra += fmt.Sprintf("  t%d: {groups: [echo_shared], clients: [%s]}\n", i, id)
	}
	clients = append(clients, "spiffe://"+trustDomain+"/client/dev")
	extra = strings.Replace(extra, "clients: [spiffe://"+trustDomain+"/client/t0]", "clients: [spiffe://"+trustDomain+"/client/t0, spiffe://"+trustDomain+"/client/dev]", 1)
	return startTLSMeshWith(t, tlsMeshConfig{script: "isolation.yaml",
		workers: []string{"{id: spiffe://" + trustDomain + "/worker/shared, groups: [echo_shared]}"}, clients: clients, extra: extra})
}

// isolationClients dials the orchestrator once per tenant, with the tenant's client
// certificate.
func isolationClients(t *testing.T, m *tlsMesh) []*client.Client {
	t.Helper()
	cs := make([]*client.Client, isolationTenants)
	for i := range isolationTenants {
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
	return cs
}

// isolationRun is what the runners, the fault loop and the final checks of
// TestTenantIsolationUnderFaults share.
type isolationRun struct {
	m         *tlsMesh
	totalRuns int
	cs        []*client.Client // a client per tenant
	wf        trust.Files      // the replicas' certificate
	replicas  []string

	procsMu sync.Mutex
	procs   map[string]*harness.Proc // the replicas' processes, by id

	next, done, calls, mismatches, failed, kills atomic.Int64

	mu                   sync.Mutex
	runs                 map[string]int // a sample of run ids → tenant
	examples, unanswered []string
}

// start starts the replica id.
func (r *isolationRun) start(id string) error {
	p, err := harness.StartWorker(id, id, "echo_shared", r.m.orch.Addr, nil, tlsArgs(r.wf)...)
	if err != nil {
		return err
	}
	r.procsMu.Lock()
	r.procs[id] = p
	r.procsMu.Unlock()
	return nil
}

// startReplicas starts every replica, killed when the test ends.
func (r *isolationRun) startReplicas(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		r.procsMu.Lock()
		defer r.procsMu.Unlock()
		for _, p := range r.procs {
			_ = p.Kill()
		}
	})
	for _, id := range r.replicas {
		if err := r.start(id); err != nil {
			t.Fatal(err)
		}
	}
}

// registered reports whether the replica id is READY in the orchestrator's table with a
// registration made at since or later: until the orchestrator has seen a killed
// replica's stream break, its old entry still reads READY.
func (r *isolationRun) registered(ctx context.Context, id string, since time.Time) bool {
	ws, err := r.m.c.ListWorkers(ctx)
	if err != nil {
		return false
	}
	for _, w := range ws {
		if w.GetWorkerId() == id && w.GetState() == toolpb.WorkerState_WORKER_STATE_READY && !w.GetRegisteredAt().AsTime().Before(since) {
			return true
		}
	}
	return false
}

// mark(k) is the run whose start makes the k+1st fault due; the runners hold runs
// from a few past it until that fault has happened, so that each of the first four
// faults lands on calls in flight however fast the runs go.
func (r *isolationRun) mark(k int64) int64 { return int64(r.totalRuns) * (k + 1) / 5 }

// gate holds run n until the fault it waits for has happened (see mark); it reports
// false if ctx ended first.
func (r *isolationRun) gate(ctx context.Context, n int64) bool {
	for k := r.kills.Load(); k < 4 && n >= r.mark(k)+4; k = r.kills.Load() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// injectFaults SIGKILLs and restarts the replicas in turn until faults is closed.
func (r *isolationRun) injectFaults(ctx context.Context, t *testing.T, faults <-chan struct{}) {
	t.Helper()
	every := time.NewTicker(2 * time.Second)
	defer every.Stop()
	for i := 0; ; i++ {
		// A small run is over in a fraction of a second: its first four faults
		// follow its progress (see gate), later ones come with the ticker.
		due := r.next.Load() >= r.mark(r.kills.Load())
		select {
		case <-faults:
			return
		case <-every.C:
		case <-time.After(20 * time.Millisecond):
			if !due || r.kills.Load() >= 4 {
				continue
			}
		}
		id := r.replicas[i%len(r.replicas)]
		r.procsMu.Lock()
		p := r.procs[id]
		r.procsMu.Unlock()
		_ = p.Kill()
		r.kills.Add(1)
		restarted := time.Now()
		if err := r.start(id); err != nil {
			t.Errorf("restarting %s: %v", id, err)
			return
		}
		for !r.registered(ctx, id, restarted) {
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
}

// runAll makes every run, on eight runners, and returns when they are done.
func (r *isolationRun) runAll(ctx context.Context) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { r.runner(ctx) })
	}
	wg.Wait()
}

// runner makes the next run, as the next tenant in turn, until every run is made.
func (r *isolationRun) runner(ctx context.Context) {
	for {
		n := r.next.Add(1) - 1
		if n >= int64(r.totalRuns) || !r.gate(ctx, n) {
			return
		}
		tn := int(n % isolationTenants)
		id, runErr := r.runAs(ctx, tn)
		r.done.Add(1)
		if runErr != nil {
			r.failed.Add(1)
			continue
		}
		r.mu.Lock()
		if len(r.runs) < 64 {
			r.runs[id] = tn
		}
		r.mu.Unlock()
	}
}

// runAs makes a run as tenant tn and checks each call it answered; it returns the run's
// id and the error that ended it.
func (r *isolationRun) runAs(ctx context.Context, tn int) (string, error) {
	// The client claims another tenant in the context: the verified one wins.
	other := fmt.Sprintf("t%d", (tn+1)%isolationTenants)
	req := &toolpb.RunRequest{Prompt: "echo", ToolGroups: []string{"echo_shared"}, Context: map[string]string{"tenant_id": other, "tenantId": other}}
	var id string
	var runErr error
	for ev, err := range r.cs[tn].Run(ctx, req) {
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
			r.mu.Lock()
			if len(r.unanswered) < 5 {
				r.unanswered = append(r.unanswered, fmt.Sprintf("%s: %s", f.GetOutcome(), f.GetContent()))
			}
			r.mu.Unlock()
			continue
		}
		r.checkCall(f, tn)
	}
	return id, runErr
}

// checkCall counts an answered call of tenant tn, and a mismatch if the worker saw
// another tenant than tn or the call token does not fit.
func (r *isolationRun) checkCall(f *toolpb.ToolCallFinished, tn int) {
	r.calls.Add(1)
	var e examplegroups.Echo
	want := fmt.Sprintf("t%d", tn)
	sent := time.Now()
	if err := json.Unmarshal([]byte(f.GetContent()), &e); err != nil || e.Tenant != want || e.Context[toolctx.TenantKey] != want || e.Context["tenant_id"] != want || !callTokenFits(e, want, sent) {
		r.mismatches.Add(1)
		r.mu.Lock()
		if len(r.examples) < 5 {
			r.examples = append(r.examples, fmt.Sprintf("a call of tenant %s answered %q", want, f.GetContent()))
		}
		r.mu.Unlock()
	}
}

// report logs the summary of the runs, checks the counts and, when
// TOOLMESH_SOAK_REPORT names a directory, writes isolation-latest.md there.
func (r *isolationRun) report(t *testing.T, wantCalls int, elapsed time.Duration) {
	t.Helper()
	for _, e := range r.examples {
		t.Error(e)
	}
	summary := fmt.Sprintf("%d runs of %d tenants in %s (%.0f calls/s), %d failed, %d calls answered, %d mismatches, %d worker replicas SIGKILLed and restarted",
		r.totalRuns, isolationTenants, elapsed.Round(time.Millisecond), float64(r.calls.Load())/elapsed.Seconds(), r.failed.Load(), r.calls.Load(), r.mismatches.Load(), r.kills.Load())
	t.Log(summary)
	if r.mismatches.Load() > 0 {
		t.Errorf("%d calls saw another tenant", r.mismatches.Load())
	}
	if r.calls.Load() < int64(wantCalls)*9/10 {
		t.Errorf("only %d of %d calls were answered; some that were not: %q", r.calls.Load(), wantCalls, r.unanswered)
	}
	if r.failed.Load() > int64(r.totalRuns)/10 {
		t.Errorf("%d of %d runs failed", r.failed.Load(), r.totalRuns)
	}
	if r.kills.Load() < 2 {
		t.Errorf("only %d faults were injected", r.kills.Load())
	}
	if dir := os.Getenv("TOOLMESH_SOAK_REPORT"); dir != "" && !t.Failed() {
		report := "# Tenant isolation under faults (catalogue S07)\n\n" + time.Now().UTC().Format(time.RFC3339) + ": " + summary +
			". Four tenants, each a client certificate, over mutual TLS; each call's tenant read by the worker from its verified call token, from the request's tenant (toolmesh.tenant) and from the context's tenant_id, which every client set to another tenant's name (as tenantId too).\n"
		if err := os.WriteFile(filepath.Join(dir, "isolation-latest.md"), []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// checkRunsHidden checks, on a sample of the runs, that the next tenant neither finds
// nor cancels another tenant's run.
func (r *isolationRun) checkRunsHidden(ctx context.Context, t *testing.T) {
	t.Helper()
	checked := 0
	for id, tn := range r.runs {
		other := r.cs[(tn+1)%isolationTenants]
		if _, err := other.GetRun(ctx, id); status.Code(err) != codes.NotFound {
			t.Errorf("tenant t%d's GetRun of t%d's run %s: %v, want NotFound", (tn+1)%isolationTenants, tn, id, err)
		}
		if _, err := other.CancelRun(ctx, id, "not yours"); status.Code(err) != codes.NotFound {
			t.Errorf("tenant t%d's CancelRun of t%d's run %s: %v, want NotFound", (tn+1)%isolationTenants, tn, id, err)
		}
		if checked++; checked == 16 {
			break
		}
	}
}
