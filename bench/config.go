package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// Arguments are the JSON arguments of every add call of every variant: about 100 bytes,
// as in the reference measurements.
const Arguments = `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`

// contextEntries is the ToolCallContext of the toolmesh variants: four keys, as in the
// reference measurement with four metadata keys.
var contextEntries = []string{
	"tenant_id", "acme-corp",
	"user_id", "user-7f3c9a2e-5d41-4b8e-9c07-1a2b3c4d5e6f",
	"request_id", "req-01HZX4Q7N8P9R2S3T4V5W6X7Y8",
	"session_id", "sess-9b1d2f3e4a5c6b7d8e9f",
}

// Bins are the paths of the binaries the benchmark starts.
type Bins struct {
	Orchestrator string // bin/orchestrator
	Toolworker   string // bin/toolworker
	RawAdd       string // bench/cmd/rawadd
	MCPAdd       string // bench/cmd/mcpadd
	Flood        string // bench/cmd/flood
	LoopPeer     string // bench/cmd/looppeer
	// Eino is bin/einoloop, built from bench/peers/eino (a module of its own); empty: the
	// loop comparison with eino is left out.
	Eino string
	// Everything is the mcp-server-everything command of @modelcontextprotocol/server-everything
	// (npm), from $TOOLMESH_MCP_EVERYTHING; make bench installs it. Empty: the
	// mcp-everything variant is left out.
	Everything string
}

// FindBins locates the binaries the way the end-to-end tests do: $TOOLMESH_BIN, else
// bin/ in the working directory or one of its parents (make build; make bench also builds
// rawadd, mcpadd and flood there).
func FindBins() (Bins, error) {
	var b Bins
	var errs []error
	for _, x := range []struct {
		name string
		dst  *string
	}{{"orchestrator", &b.Orchestrator}, {"toolworker", &b.Toolworker}, {"rawadd", &b.RawAdd}, {"mcpadd", &b.MCPAdd}, {"flood", &b.Flood}, {"looppeer", &b.LoopPeer}} {
		p, err := harness.Bin(x.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*x.dst = p
	}
	if err := errors.Join(errs...); err != nil {
		return b, fmt.Errorf("%w (make bench builds them all into bin/)", err)
	}
	if p, err := harness.Bin("einoloop"); err == nil {
		b.Eino = p
	}
	b.Everything = os.Getenv("TOOLMESH_MCP_EVERYTHING")
	return b, nil
}

// Config sizes a benchmark run. Every phase is bounded both in calls and in time.
type Config struct {
	// Mode names the preset ("full", "quick", or anything for a custom run).
	Mode string
	// Rounds is the number of round-robin rounds; every metric is the median over them.
	Rounds int
	// Warmup calls precede each variant's measurement in each round.
	Warmup int
	// LatencyCalls and LatencyTime bound the concurrency-1 phase of a variant in a round;
	// the phase is cut into LatencySlices slices that alternate with the other variants'.
	LatencyCalls  int
	LatencyTime   time.Duration
	LatencySlices int
	// Concurrency, ThroughputTime and ThroughputCalls shape the throughput phase.
	Concurrency     int
	ThroughputTime  time.Duration
	ThroughputCalls int64
	// LoopToolCalls is N: the loop variants make N tool calls (N turns of one call plus a
	// final answer, N+1 model calls).
	LoopToolCalls int
	// OpenRuns is the number of runs held open for the memory measurement; RSSRounds how
	// many times it is measured (each time on a fresh orchestrator); OpenHold how long
	// they are held open before the second reading: longer than the period of their
	// leases' renewals (renewalPeriod: a third of journal.lease_ttl at its default, which
	// the measured orchestrator runs with), so that the reading counts what an open run
	// costs for as long as it waits, not only at its start; the report says when it is
	// not (the smoke test's).
	OpenRuns  int
	RSSRounds int
	OpenHold  time.Duration
	// ResumeRuns is the number of open runs of the resume measurement (an orchestrator
	// killed with them, another resuming them); ResumeRounds how many times it is
	// measured per store.
	ResumeRuns   int
	ResumeRounds int
	// ScaleSizes are the routing-table sizes of the scaling rows.
	ScaleSizes []int
	// LookupTime bounds the lookups timed per size and round.
	LookupTime time.Duration
	// RegisterWorkers is the number of fake workers that register at once;
	// RegisterWorkersLarge the number that register at once in the first round (0: none).
	RegisterWorkers      int
	RegisterWorkersLarge int
	// ProfileTime is how long a variant whose toolmesh goal was missed is profiled.
	// Zero turns the automatic profiles off.
	ProfileTime time.Duration
	// ProfileDir receives the automatic CPU profiles; empty means the system temp dir.
	ProfileDir string
	// Only, when not empty, narrows the run to the variants it names and to the
	// measurements among "routing", "facades", "components", "registration", "tenants",
	// "peers", "memory" and "profiles" it names: a quick look at a few figures while
	// working on them. Goals without their measurements are reported as not measured.
	Only []string

	Bins Bins
	// Progress receives one line per step; nil means io.Discard.
	Progress io.Writer
}

// Full is the configuration of make bench: a few minutes on two cores.
func Full() Config {
	return Config{
		Mode:                 "full",
		Rounds:               5,
		Warmup:               200,
		LatencyCalls:         3000,
		LatencyTime:          800 * time.Millisecond,
		LatencySlices:        10,
		Concurrency:          32,
		ThroughputTime:       time.Second,
		ThroughputCalls:      500_000,
		LoopToolCalls:        10,
		OpenRuns:             1000,
		RSSRounds:            5,
		OpenHold:             4 * time.Second,
		ResumeRuns:           1000,
		ResumeRounds:         2,
		ScaleSizes:           []int{10, 100, 1000, 10000, 100000},
		LookupTime:           200 * time.Millisecond,
		RegisterWorkers:      100,
		RegisterWorkersLarge: 1000,
		ProfileTime:          3 * time.Second,
	}
}

// Quick is the configuration of make bench-quick: under a minute.
func Quick() Config {
	return Config{
		Mode:                 "quick",
		Rounds:               3,
		Warmup:               50,
		LatencyCalls:         800,
		LatencyTime:          200 * time.Millisecond,
		LatencySlices:        5,
		Concurrency:          32,
		ThroughputTime:       250 * time.Millisecond,
		ThroughputCalls:      200_000,
		LoopToolCalls:        10,
		OpenRuns:             1000,
		RSSRounds:            1,
		OpenHold:             4 * time.Second,
		ResumeRuns:           1000,
		ResumeRounds:         1,
		ScaleSizes:           []int{10, 100, 1000, 10000, 100000},
		LookupTime:           40 * time.Millisecond,
		RegisterWorkers:      100,
		RegisterWorkersLarge: 1000,
		ProfileTime:          2 * time.Second,
	}
}

func (c Config) validate() error {
	switch {
	case c.Rounds < 1, c.LatencyCalls < 1, c.LatencySlices < 1, c.LatencyTime <= 0, c.Concurrency < 1, c.ThroughputTime <= 0,
		c.ThroughputCalls < 1, c.LoopToolCalls < 1, c.OpenRuns < 1, c.RSSRounds < 1, c.OpenHold <= 0, len(c.ScaleSizes) == 0,
		c.LookupTime <= 0, c.RegisterWorkers < 1:
		return fmt.Errorf("bench: config %q has a zero bound: %+v", c.Mode, c)
	case c.Bins.Orchestrator == "" || c.Bins.Toolworker == "" || c.Bins.RawAdd == "" || c.Bins.MCPAdd == "":
		return fmt.Errorf("bench: config %q misses a binary: %+v", c.Mode, c.Bins)
	}
	return nil
}

// wants says whether the run measures what name names: a variant, or one of the
// measurements Only lists.
func (c Config) wants(name string) bool {
	return len(c.Only) == 0 || slices.Contains(c.Only, name)
}
