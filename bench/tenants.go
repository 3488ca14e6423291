package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The tenants of the mutual-TLS core: quiet measures its runs' latency alone and while
// noisy floods the same orchestrator within noisy's limits.
const (
	tenantQuiet = "quiet"
	tenantNoisy = "noisy"
)

// noisyLimits are the noisy tenant's limits on the mutual-TLS core.
var noisyLimits = config.Tenant{MaxConcurrentRuns: 2, ToolCallsPerMinute: 600, ModelCallsPerMinute: 1200, MaxMessages: 100}

// floodRuns, floodBig and floodHistory shape the flood: runs kept open at once, the size
// of the oversized requests, the messages of the long conversations.
const (
	floodRuns    = 1000
	floodBig     = 100 << 20
	floodHistory = 10_000
)

// TenantResult is the quiet tenant's run latency alone and while the noisy tenant floods
// the same orchestrator.
type TenantResult struct {
	// Flood says what the noisy tenant does, and Limits its limits.
	Flood  string `json:"flood"`
	Limits string `json:"limits"`
	// P99Ratio is the median over the rounds of flooded p99 / alone p99.
	P99Ratio float64 `json:"p99_ratio"`
	// Hostile says how the second flood differs, and HostileP99Ratio is its P99Ratio.
	Hostile         string        `json:"hostile"`
	HostileP99Ratio float64       `json:"hostile_p99_ratio"`
	Rounds          []tenantRound `json:"rounds"`
}

// tenantRound is one round: the quiet tenant's runs alone, then with the flood, then
// with the flood of a client that ignores RetryInfo, and what each flood saw.
type tenantRound struct {
	Alone        latency     `json:"alone"`
	Flooded      latency     `json:"flooded"`
	Ratio        float64     `json:"p99_ratio"`
	Flood        floodCounts `json:"flood"`
	Hostile      latency     `json:"hostile"`
	HostileRatio float64     `json:"hostile_p99_ratio"`
	HostileFlood floodCounts `json:"hostile_flood"`
}

// floodCounts is the line bench/cmd/flood prints at its end.
type floodCounts = peer.FloodCounts

func (t *TenantResult) aggregate() {
	var xs, hs []float64
	for _, r := range t.Rounds {
		xs, hs = append(xs, r.Ratio), append(hs, r.HostileRatio)
	}
	t.P99Ratio, t.HostileP99Ratio = math.NaN(), math.NaN()
	if len(xs) > 0 {
		t.P99Ratio, t.HostileP99Ratio = median(xs), median(hs)
	}
}

// hostileRetry is how long the hostile flood waits after a refused run, whatever the
// refusal's RetryInfo says.
const hostileRetry = 100 * time.Millisecond

func hostileDescription() string {
	return fmt.Sprintf("the same flood from a client that ignores RetryInfo and retries a refused run after %s", hostileRetry)
}

func floodDescription() string {
	return fmt.Sprintf("one client identity of the noisy tenant keeps %d runs open at once (a refused run is retried after the refusal's RetryInfo delay), and sends, one at a time every 250 ms, a %d MiB request and a %d-message conversation; a separate process (bench/cmd/flood) on the same machine",
		floodRuns, floodBig>>20, floodHistory)
}

func limitsDescription() string {
	return fmt.Sprintf("tenants.%s: max_concurrent_runs %d, tool_calls_per_minute %d, model_calls_per_minute %d, max_messages %d; tenants.%s: none; server.max_receive_bytes %d MiB",
		tenantNoisy, noisyLimits.MaxConcurrentRuns, noisyLimits.ToolCallsPerMinute, noisyLimits.ModelCallsPerMinute, noisyLimits.MaxMessages, tenantQuiet, config.Default().Server.MaxReceiveBytes>>20)
}

// quietRun is one run of the quiet tenant: loop-grpc's run on the mutual-TLS core.
func (e *env) quietRun(c *client.Client) callFunc {
	n := e.cfg.LoopToolCalls
	req := &toolpb.RunRequest{Prompt: "Add the two numbers, again and again.", Tools: []string{peer.Name}, Context: toolctx.MustOf(contextEntries...).Map()}
	return func(ctx context.Context) error {
		final, err := c.RunAndWait(ctx, req, nil)
		if err != nil {
			return err
		}
		if final.GetText() != "done" || int(final.GetIterations()) != n+1 {
			return fmt.Errorf("the quiet tenant's run ended with %q after %d iterations, want \"done\" after %d", final.GetText(), final.GetIterations(), n+1)
		}
		return nil
	}
}

// measureTenants measures the quiet tenant's runs at concurrency 1 for LatencyTime × 2,
// alone, then while bench/cmd/flood floods as the noisy tenant, then while it floods
// ignoring RetryInfo.
func (e *env) measureTenants(ctx context.Context) (tenantRound, error) {
	var r tenantRound
	if e.quiet == nil || e.cfg.Bins.Flood == "" {
		return r, fmt.Errorf("no flood binary")
	}
	quiet := e.quietRun(e.quiet)
	d := 2 * e.cfg.LatencyTime
	var err error
	if r.Alone, err = measureLatency(ctx, quiet, 1<<30, d); err != nil {
		return r, fmt.Errorf("the quiet tenant alone: %w", err)
	}
	if r.Flooded, r.Flood, err = e.flooded(ctx, quiet, d); err != nil {
		return r, err
	}
	if r.Hostile, r.HostileFlood, err = e.flooded(ctx, quiet, d, "-retry-after", hostileRetry.String()); err != nil {
		return r, fmt.Errorf("ignoring RetryInfo: %w", err)
	}
	r.Ratio = r.Flooded.P99us / r.Alone.P99us
	r.HostileRatio = r.Hostile.P99us / r.Alone.P99us
	return r, nil
}

// flooded measures quiet for d while bench/cmd/flood, with extra arguments, floods,
// and checks that the flood was refused as it should be.
func (e *env) flooded(ctx context.Context, quiet callFunc, d time.Duration, extra ...string) (latency, floodCounts, error) {
	var l latency
	var n floodCounts
	f, err := startProc("flood", e.cfg.Bins.Flood, childEnv("OTEL_SDK_DISABLED=true"), append(slices.Clone(e.floodArgs), extra...)...)
	if err != nil {
		return l, n, err
	}
	stopped := false
	defer func() {
		if !stopped {
			f.stop(10 * time.Second)
		}
	}()
	if _, err := f.waitJSON(ctx, "flooding"); err != nil {
		return l, n, fmt.Errorf("the flood did not start: %w\n%s", err, f.tail())
	}
	// Let the flood reach its steady state: every run open once, the first retries due.
	select {
	case <-ctx.Done():
		return l, n, ctx.Err()
	case <-time.After(1500 * time.Millisecond):
	}
	if l, err = measureLatency(ctx, quiet, 1<<30, d); err != nil {
		return l, n, fmt.Errorf("the quiet tenant during the flood: %w", err)
	}
	f.stop(10 * time.Second)
	stopped = true
	out := f.tail()
	i := strings.LastIndex(out, `{"runs_admitted"`)
	if i < 0 {
		return l, n, fmt.Errorf("the flood printed no counts:\n%s", out)
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	if err := json.Unmarshal([]byte(line), &n); err != nil {
		return l, n, fmt.Errorf("the flood's counts: %w", err)
	}
	if n.BigAccepted > 0 || n.HistoryAccepted > 0 {
		return l, n, fmt.Errorf("the orchestrator accepted %d oversized requests and %d conversations over the limit", n.BigAccepted, n.HistoryAccepted)
	}
	if n.Refused == 0 || n.BigRefused == 0 || n.HistoryRefused == 0 {
		return l, n, fmt.Errorf("the flood was not refused as it should be: %+v", n)
	}
	// The flood must not have cost the worker its registration.
	if workers := e.mtls.router.ListWorkers(); len(workers) != 1 {
		return l, n, fmt.Errorf("after the flood the mutual-TLS core has %d workers, want 1\n%s", len(workers), e.workerMTLS.tail())
	}
	return l, n, nil
}
