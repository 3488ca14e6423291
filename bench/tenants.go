package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
var noisyLimits = config.Tenant{MaxConcurrentRuns: 2, ToolCallsPerMinute: 600, MaxMessages: 100}

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
	P99Ratio float64       `json:"p99_ratio"`
	Rounds   []tenantRound `json:"rounds"`
}

// tenantRound is one round: the quiet tenant's runs alone, then with the flood, and what
// the flood saw.
type tenantRound struct {
	Alone   latency     `json:"alone"`
	Flooded latency     `json:"flooded"`
	Ratio   float64     `json:"p99_ratio"`
	Flood   floodCounts `json:"flood"`
}

// floodCounts is the line bench/cmd/flood prints at its end.
type floodCounts = peer.FloodCounts

func (t *TenantResult) aggregate() {
	var xs []float64
	for _, r := range t.Rounds {
		xs = append(xs, r.Ratio)
	}
	t.P99Ratio = math.NaN()
	if len(xs) > 0 {
		t.P99Ratio = median(xs)
	}
}

func floodDescription() string {
	return fmt.Sprintf("one client identity of the noisy tenant keeps %d runs open at once (a refused run is retried after the refusal's RetryInfo delay), and sends, one at a time every 250 ms, a %d MiB request and a %d-message conversation; a separate process (bench/cmd/flood) on the same machine",
		floodRuns, floodBig>>20, floodHistory)
}

func limitsDescription() string {
	return fmt.Sprintf("tenants.%s: max_concurrent_runs %d, tool_calls_per_minute %d, max_messages %d; tenants.%s: none; server.max_receive_bytes %d MiB",
		tenantNoisy, noisyLimits.MaxConcurrentRuns, noisyLimits.ToolCallsPerMinute, noisyLimits.MaxMessages, tenantQuiet, config.Default().Server.MaxReceiveBytes>>20)
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
// alone and then while bench/cmd/flood floods as the noisy tenant.
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
	f, err := startProc("flood", e.cfg.Bins.Flood, childEnv("OTEL_SDK_DISABLED=true"), e.floodArgs...)
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			f.stop(10 * time.Second)
		}
	}()
	if _, err := f.waitJSON(ctx, "flooding"); err != nil {
		return r, fmt.Errorf("the flood did not start: %w\n%s", err, f.tail())
	}
	// Let the flood reach its steady state: every run open once, the first retries due.
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(1500 * time.Millisecond):
	}
	if r.Flooded, err = measureLatency(ctx, quiet, 1<<30, d); err != nil {
		return r, fmt.Errorf("the quiet tenant during the flood: %w", err)
	}
	f.stop(10 * time.Second)
	stopped = true
	out := f.tail()
	i := strings.LastIndex(out, `{"runs_admitted"`)
	if i < 0 {
		return r, fmt.Errorf("the flood printed no counts:\n%s", out)
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	if err := json.Unmarshal([]byte(line), &r.Flood); err != nil {
		return r, fmt.Errorf("the flood's counts: %w", err)
	}
	if r.Flood.BigAccepted > 0 || r.Flood.HistoryAccepted > 0 {
		return r, fmt.Errorf("the orchestrator accepted %d oversized requests and %d conversations over the limit", r.Flood.BigAccepted, r.Flood.HistoryAccepted)
	}
	if r.Flood.Refused == 0 || r.Flood.BigRefused == 0 || r.Flood.HistoryRefused == 0 {
		return r, fmt.Errorf("the flood was not refused as it should be: %+v", r.Flood)
	}
	r.Ratio = r.Flooded.P99us / r.Alone.P99us
	return r, nil
}
