package netns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const orchestratorConfig = `
listen: %s:7070
tls: {plaintext: true}
registry:
  heartbeat_interval: 500ms
  lease_ttl: 3s
  grace_period: 1s
  readiness_grace: 1s
router:
  default_tool_timeout: 30s
  eject_after_failures: 2
  eject_duration: 2s
loop:
  max_parallel_tool_calls: 8
provider: {name: scripted}
`

// Each replica runs 4 calls at once, each taking 50 ms: a tool bound by what it waits for
// (a database, an API), not by CPU, so that one machine can show what replicas add.
const (
	capacity  = 4
	toolDelay = 50 * time.Millisecond
	phase     = 3 * time.Second
)

// TestToolTypeScaling: the orchestrator and every worker in a network namespace of its
// own, each with its own address, like pods. Under a steady load on two groups, the math
// group is scaled from 1 to 2 to 4 replicas while the text group keeps one: the math
// group's throughput rises and every new replica takes calls, while the text group's
// holds. Then one math replica's link goes down: its lease expires for want of
// heartbeats, the orchestrator finds it unreachable and fails its calls in flight at once
// (add is idempotent: they go to another replica) rather than at their 30 s deadline, no
// run hangs or fails, and it serves again once the link is back.
//
// TOOLMESH_NETNS_REPORT, a directory, receives netns-scaling.md with the figures and the
// goals (math at 4 replicas ≥ 2.5× its throughput at 1, text within 10 % of its own).
func TestToolTypeScaling(t *testing.T) {
	l := newLab(t)
	orchBin, err := harness.Bin("orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	workerBin, err := harness.Bin("toolworker")
	if err != nil {
		t.Fatal(err)
	}
	op := l.pod("orchestrator", 2)
	cfg := filepath.Join(t.TempDir(), "orchestrator.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(orchestratorConfig, op.ip)), 0o600); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "scaling.yaml"))
	orch := l.start(op, "orchestrator", orchBin, "--config", cfg, "--script", script, "--log-format", "json")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := orch.WaitLog(ctx, "orchestrator serving"); err != nil {
		t.Fatalf("%v\n%s", err, orch.Output())
	}
	orchAddr := op.ip + ":7070"
	c, err := client.Dial(orchAddr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	s := &scalingMesh{t: t, l: l, ctx: ctx, c: c, orch: orch, workerBin: workerBin, orchAddr: orchAddr, pods: map[string]*pod{}}
	s.startWorker("text-1", "text", 10)
	s.startWorker("math-1", "math", 20)
	s.waitReady("text-1", "math-1")
	results := s.scaleMath()
	p := s.partitionMath4()
	checkPartition(t, p)
	scalingReport(t, results, p)
}

// scalingMesh is the orchestrator of TestToolTypeScaling, a client of it, and the pods
// of its workers.
type scalingMesh struct {
	t         *testing.T
	l         *lab
	ctx       context.Context
	c         *client.Client
	orch      *harness.Proc
	workerBin string
	orchAddr  string
	pods      map[string]*pod
}

// scalingResult is what one phase of the load measured.
type scalingResult struct {
	replicas   int
	math, text float64 // tool calls per second
	perReplica map[string]int64
	failed     int64
}

// partitionOutcome is what the partition phase saw.
type partitionOutcome struct {
	load                   loadResult
	leaseGone, back        time.Duration
	leaseLost, probeFailed int
}

// startWorker starts worker id of group in a pod of its own on host.
func (s *scalingMesh) startWorker(id, group string, host int) {
	p := s.l.pod(id, host)
	s.pods[id] = p
	addr := p.ip + ":7171"
	s.l.start(p, id, s.workerBin, "--id", id, "--groups", group, "--orchestrator", s.orchAddr, "--listen", addr, "--plaintext", "--advertise", addr,
		"--capacity", fmt.Sprint(capacity), "--delay", toolDelay.String(), "--reconnect-min", "100ms", "--reconnect-max", "1s", "--log-level", "warn")
}

// waitReady waits until the workers ids are READY.
func (s *scalingMesh) waitReady(ids ...string) {
	s.t.Helper()
	if err := harness.WaitWorkers(s.ctx, s.c, ids...); err != nil {
		s.t.Fatalf("workers %v: %v", ids, err)
	}
}

// measure runs the load for a phase and checks that every replica ids took calls and
// that nothing failed.
func (s *scalingMesh) measure(replicas int, ids []string) scalingResult {
	t, ctx, c := s.t, s.ctx, s.c
	t.Helper()
	before := calls(t, ctx, c)
	r := load(ctx, c, phase)
	after := calls(t, ctx, c)
	res := scalingResult{replicas: replicas, math: float64(r.math) / phase.Seconds(), text: float64(r.text) / phase.Seconds(), perReplica: map[string]int64{}, failed: r.failed}
	for _, id := range ids {
		res.perReplica[id] = after[id] - before[id]
		if res.perReplica[id] == 0 {
			t.Errorf("at %d replicas, %s took no call", replicas, id)
		}
	}
	if r.failed > 0 || r.runErrors > 0 {
		t.Errorf("at %d replicas: %d calls failed, %d runs failed (last: %v)", replicas, r.failed, r.runErrors, r.lastErr)
	}
	t.Logf("math ×%d: math %.0f calls/s, text %.0f calls/s, per replica %v", replicas, res.math, res.text, res.perReplica)
	return res
}

// scaleMath measures the load at 1, 2 and 4 math replicas.
func (s *scalingMesh) scaleMath() []scalingResult {
	s.t.Helper()
	var results []scalingResult
	load(s.ctx, s.c, 500*time.Millisecond) // warm up the connections
	results = append(results, s.measure(1, []string{"math-1"}))
	s.startWorker("math-2", "math", 21)
	s.waitReady("text-1", "math-1", "math-2")
	results = append(results, s.measure(2, []string{"math-1", "math-2"}))
	s.startWorker("math-3", "math", 22)
	s.startWorker("math-4", "math", 23)
	s.waitReady("text-1", "math-1", "math-2", "math-3", "math-4")
	results = append(results, s.measure(4, []string{"math-1", "math-2", "math-3", "math-4"}))
	return results
}

// partitionMath4 takes math-4's link down under load, then up again, and checks that it
// takes calls once it is back.
func (s *scalingMesh) partitionMath4() partitionOutcome {
	t, ctx, c := s.t, s.ctx, s.c
	t.Helper()
	// A partition: math-4's link goes down under load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var p partitionOutcome
	var wg sync.WaitGroup
	wg.Go(func() { p.load = load(loadCtx, c, time.Hour) })
	time.Sleep(300 * time.Millisecond)
	cut := time.Now()
	if err := s.l.partition(s.pods["math-4"]); err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		if ready(t, ctx, c)["math-4"] == false {
			p.leaseGone = time.Since(cut)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // calls go on without it
	if err := s.l.heal(s.pods["math-4"]); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	s.waitReady("text-1", "math-1", "math-2", "math-3", "math-4")
	p.back = time.Since(healed)
	before := calls(t, ctx, c)
	time.Sleep(time.Second)
	if after := calls(t, ctx, c); after["math-4"] == before["math-4"] {
		t.Error("math-4 took no call after its link came back")
	}
	stopLoad()
	wg.Wait()
	p.leaseLost = s.orch.CountLogs("worker lease expired: no heartbeat", map[string]string{"worker_id": "math-4"})
	p.probeFailed = s.orch.CountLogs("worker unreachable after its lease expired: its calls in flight fail now", map[string]string{"worker_id": "math-4"})
	return p
}

// checkPartition checks that math-4 left the routing table while partitioned and that no
// run hung or failed meanwhile.
func checkPartition(t *testing.T, p partitionOutcome) {
	t.Helper()
	leaseGone, back, partitioned := p.leaseGone, p.back, p.load
	if p.leaseLost == 0 {
		t.Error("the orchestrator never saw math-4's lease expire while its link was down")
	}
	t.Logf("partition: math-4 left the routing table %s after its link went down and was back %s after it came up; during it %d math and %d text calls succeeded, %d failed, %d runs failed, the longest run took %s",
		leaseGone.Round(time.Millisecond), back.Round(time.Millisecond), partitioned.math, partitioned.text, partitioned.failed, partitioned.runErrors, partitioned.longest.Round(time.Millisecond))
	// No run hangs: a call to the partitioned replica fails once its lease expired (3 s)
	// and the probe of its connection went unanswered (3 s), long before its 30 s
	// deadline, and goes to another replica.
	if partitioned.longest > 15*time.Second {
		t.Errorf("a run took %s during the partition: its calls to the partitioned replica waited for their 30 s deadline", partitioned.longest)
	}
	if partitioned.runErrors > 0 {
		t.Errorf("%d runs failed during the partition (last: %v)", partitioned.runErrors, partitioned.lastErr)
	}
	if leaseGone == 0 {
		t.Error("math-4 stayed READY while partitioned")
	}
}

// scalingReport logs the figures against the goals and writes them to
// TOOLMESH_NETNS_REPORT if it is set.
func scalingReport(t *testing.T, results []scalingResult, p partitionOutcome) {
	t.Helper()
	one, four := results[0], results[len(results)-1]
	scaled, other := four.math/one.math, four.text/one.text
	verdict := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Tool-type scaling across network namespaces\n\n%s. Every process in a network namespace of its own on a bridge (its own address, like a pod). Load: two runs at a time offered the math group's add (eight calls at once each) and one offered the text group's uppercase (four calls at once); every replica runs %d calls at once, each taking %s. %s per phase.\n\n",
		time.Now().UTC().Format(time.RFC3339), capacity, toolDelay, phase)
	fmt.Fprintf(&b, "| math replicas | math calls/s | text calls/s | math calls per replica |\n|---:|---:|---:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %v |\n", r.replicas, r.math, r.text, r.perReplica)
	}
	fmt.Fprintf(&b, "\n| goal | target | measured | verdict |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| math at 4 replicas vs 1 | ≥ 2.5× | %.2f× | %s |\n", scaled, verdict(scaled >= 2.5))
	fmt.Fprintf(&b, "| text while math scales, vs its own at 1 | within 10 %% | %.2f× | %s |\n", other, verdict(other >= 0.9 && other <= 1.1))
	how := fmt.Sprintf("the orchestrator logged math-4's lease expiring %d times and its calls in flight failed for want of an answer to the probe %d times", p.leaseLost, p.probeFailed)
	fmt.Fprintf(&b, "\nPartition: math-4's link down under load; it left the routing table after %s, came back %s after the link did; %d runs failed, the longest run took %s (the tools' deadline is 30 s; %s).\n",
		p.leaseGone.Round(time.Millisecond), p.back.Round(time.Millisecond), p.load.runErrors, p.load.longest.Round(time.Millisecond), how)
	t.Log("\n" + b.String())
	if dir := os.Getenv("TOOLMESH_NETNS_REPORT"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "netns-scaling.md"), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// loadResult is what one load phase did.
type loadResult struct {
	math, text, failed, runErrors int64
	longest                       time.Duration
	lastErr                       error
}

// load runs two math runs and one text run at a time for d (or until ctx ends) and counts
// the tool calls that succeeded per group.
func load(ctx context.Context, c *client.Client, d time.Duration) loadResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var r loadResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	loop := func(tool string, counter *int64) {
		for ctx.Err() == nil {
			start := time.Now()
			runCtx, runCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			var ok int64
			_, err := c.RunAndWait(runCtx, &toolpb.RunRequest{Prompt: "work", Tools: []string{tool}}, func(ev *toolpb.RunResponse) {
				if f := ev.GetToolCallFinished(); f != nil {
					if f.GetOutcome() == toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
						ok++
					} else {
						atomic.AddInt64(&r.failed, 1)
					}
				}
			})
			runCancel()
			// A run cut by the end of the phase is not counted.
			if ctx.Err() != nil && time.Since(start) > 0 && err == nil {
				break
			}
			atomic.AddInt64(counter, ok)
			mu.Lock()
			r.longest = max(r.longest, time.Since(start))
			if err != nil {
				r.runErrors++
				r.lastErr = err
			}
			mu.Unlock()
		}
	}
	wg.Go(func() { loop("add", &r.math) })
	wg.Go(func() { loop("add", &r.math) })
	wg.Go(func() { loop("uppercase", &r.text) })
	wg.Wait()
	return r
}

// workers reads every worker's count of calls the orchestrator sent it, and whether it
// is READY.
func workers(t *testing.T, ctx context.Context, c *client.Client) (calls map[string]int64, ready map[string]bool) {
	t.Helper()
	ws, err := c.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls, ready = map[string]int64{}, map[string]bool{}
	for _, w := range ws {
		calls[w.GetWorkerId()] = w.GetCalls()
		ready[w.GetWorkerId()] = w.GetState() == toolpb.WorkerState_WORKER_STATE_READY
	}
	return calls, ready
}

func calls(t *testing.T, ctx context.Context, c *client.Client) map[string]int64 {
	n, _ := workers(t, ctx, c)
	return n
}

func ready(t *testing.T, ctx context.Context, c *client.Client) map[string]bool {
	_, r := workers(t, ctx, c)
	return r
}
