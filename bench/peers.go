package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
)

// The loop peers: toolmesh's in-process loop (bench/cmd/looppeer) and cloudwego/eino's
// ReAct agent (bench/peers/eino), each in a process of its own with the same fake model,
// the same add tool, the same arguments and the same measurement code.
const (
	PeerToolmesh = "toolmesh"
	PeerEino     = "eino"
)

// peerConcurrency is the runs in flight of the peers' throughput phase.
const peerConcurrency = 8

// loopMeasurement is the line a loop peer prints.
type loopMeasurement = peer.LoopMeasurement

// peerRound is one round of both peers.
type peerRound struct {
	Toolmesh loopMeasurement `json:"toolmesh"`
	Eino     loopMeasurement `json:"eino"`
	// P50Ratio is toolmesh's p50 over eino's, ThroughputRatio toolmesh's runs per
	// second over eino's.
	P50Ratio        float64 `json:"p50_ratio"`
	ThroughputRatio float64 `json:"throughput_ratio"`
}

// PeerResult compares the two loops over the rounds; the ratios are medians of the
// rounds' ratios, NaN when not measured.
type PeerResult struct {
	Method          string      `json:"method"`
	P50Ratio        float64     `json:"p50_ratio"`
	ThroughputRatio float64     `json:"throughput_ratio"`
	Rounds          []peerRound `json:"rounds"`
}

func (p *PeerResult) aggregate() {
	var a, b []float64
	for _, r := range p.Rounds {
		a, b = append(a, r.P50Ratio), append(b, r.ThroughputRatio)
	}
	p.P50Ratio, p.ThroughputRatio = math.NaN(), math.NaN()
	if len(a) > 0 {
		p.P50Ratio, p.ThroughputRatio = median(a), median(b)
	}
}

func peerMethod(cfg Config) string {
	return fmt.Sprintf("each loop in a process of its own: a fake model that asks for add %d times, one call per turn, then answers \"done\"; add a typed function whose schema the framework infers from its input struct (toolmesh tool.MustFunc, eino utils.InferTool); the harness's arguments; %d warm-up runs, runs one at a time for %s (latency, allocations), then %s with %d in flight (throughput); no context, decorators or telemetry on either side. toolmesh's loop validates each call's arguments against the schema; eino's does not",
		cfg.LoopToolCalls, cfg.Warmup, 2*cfg.LatencyTime, cfg.ThroughputTime, peerConcurrency)
}

// measurePeers runs both loop peers, the one first in odd rounds, the other in even
// ones.
func measurePeers(ctx context.Context, cfg Config, round int) (peerRound, error) {
	var r peerRound
	args := []string{"-turns", fmt.Sprint(cfg.LoopToolCalls), "-warmup", fmt.Sprint(cfg.Warmup),
		"-latency", (2 * cfg.LatencyTime).String(), "-throughput", cfg.ThroughputTime.String(), "-concurrency", fmt.Sprint(peerConcurrency)}
	order := []string{PeerToolmesh, PeerEino}
	if round%2 == 0 {
		order = []string{PeerEino, PeerToolmesh}
	}
	for _, p := range order {
		bin, dst := cfg.Bins.LoopPeer, &r.Toolmesh
		if p == PeerEino {
			bin, dst = cfg.Bins.Eino, &r.Eino
		}
		m, err := runPeer(ctx, bin, args)
		if err != nil {
			return r, fmt.Errorf("%s: %w", p, err)
		}
		*dst = m
	}
	r.P50Ratio = r.Toolmesh.P50us / r.Eino.P50us
	r.ThroughputRatio = r.Toolmesh.PerSecond / r.Eino.PerSecond
	return r, nil
}

func runPeer(ctx context.Context, bin string, args []string) (loopMeasurement, error) {
	var m loopMeasurement
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return m, fmt.Errorf("%s: %w\n%s", bin, err, stderr.String())
	}
	if err := json.Unmarshal(out, &m); err != nil || m.Runs == 0 || m.PerSecond <= 0 {
		return m, fmt.Errorf("%s printed %q: %v", bin, out, err)
	}
	return m, nil
}
