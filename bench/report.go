package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"time"
)

// Report is everything one benchmark run measured. It is written as latest.json and
// rendered as latest.md.
type Report struct {
	Mode            string    `json:"mode"`
	Started         time.Time `json:"started"`
	DurationSeconds float64   `json:"duration_seconds"`
	Machine         Machine   `json:"machine"`
	Method          Method    `json:"method"`

	Variants   []VariantResult   `json:"variants"`
	Ratios     []Ratio           `json:"ratios"`
	Components []ComponentResult `json:"hop_components"`
	Loop       LoopResult        `json:"loop"`
	Memory     MemoryResult      `json:"memory"`
	Resume     ResumeResult      `json:"resume"`
	Tenants    TenantResult      `json:"tenants"`
	Peers      PeerResult        `json:"loop_peers"`
	Routing    []RoutingRow      `json:"routing"`
	ToolDefs   []toolDefRow      `json:"tool_definitions"`
	Facades    FacadeResult      `json:"facades"`
	// Facades10k is 10,000 tools in 100 facades under 10 parents, Facades10kFlat the
	// same 100 facades offered side by side.
	Facades10k     FacadeResult       `json:"facades_10k"`
	Facades10kFlat FacadeResult       `json:"facades_10k_flat"`
	Registration   RegistrationResult `json:"registration"`
	// RegistrationLarge is RegisterWorkersLarge workers at once, in the first round.
	RegistrationLarge registrationRound `json:"registration_large"`
	Telemetry         TelemetryResult   `json:"telemetry"`
	// HopBothSides is the hop with the worker (pkg/worker) in this process: its
	// allocations are both sides', so that less the hop's is the worker side's.
	HopBothSides latency          `json:"hop_both_sides"`
	Goals        []Goal           `json:"goals"`
	Profiles     []profileSummary `json:"profiles,omitempty"`
	Failures     []string         `json:"failures,omitempty"`
}

// Method is how the run was sized.
type Method struct {
	Rounds          int     `json:"rounds"`
	Warmup          int     `json:"warmup_calls"`
	LatencyCalls    int     `json:"latency_max_calls"`
	LatencyMs       float64 `json:"latency_max_ms"`
	Concurrency     int     `json:"concurrency"`
	ThroughputMs    float64 `json:"throughput_ms"`
	LoopToolCalls   int     `json:"loop_tool_calls"`
	OpenRuns        int     `json:"open_runs"`
	ResumeRuns      int     `json:"resume_runs"`
	RSSRounds       int     `json:"memory_rounds"`
	OpenHoldMs      float64 `json:"open_hold_ms"`
	RegisterWorkers int     `json:"register_workers"`
	ArgumentsBytes  int     `json:"arguments_bytes"`
	ContextKeys     int     `json:"context_keys"`
}

// RoundResult is one variant in one round.
type RoundResult struct {
	Latency    latency    `json:"latency"`
	Throughput throughput `json:"throughput"`
}

// VariantResult is one variant over all rounds; the figures are medians over rounds.
type VariantResult struct {
	Name        string        `json:"name"`
	Unit        string        `json:"unit"`
	Measures    string        `json:"measures"`
	P50us       float64       `json:"p50_us"`
	P99us       float64       `json:"p99_us"`
	PerSecond   float64       `json:"per_second"`
	AllocsPerOp float64       `json:"allocs_per_call"`
	BytesPerOp  float64       `json:"bytes_per_call"`
	SelfCPUus   float64       `json:"self_cpu_us_per_call"`
	PeerCPUus   float64       `json:"peer_cpu_us_per_call"`
	Calls       int64         `json:"calls"`
	Rounds      []RoundResult `json:"rounds"`
	Error       string        `json:"error,omitempty"`
	// Journal is the commits of a variant whose runs a SQL store journals.
	Journal *JournalFigures `json:"journal,omitempty"`
}

func (v *VariantResult) ok() bool { return v != nil && v.Error == "" && len(v.Rounds) > 0 }

func (v *VariantResult) aggregate() {
	var p50, p99, thr, allocs, bytes, self, peer []float64
	for _, r := range v.Rounds {
		self = append(self, r.Throughput.SelfCPUus)
		peer = append(peer, r.Throughput.PeerCPUus)
		p50 = append(p50, r.Latency.P50us)
		p99 = append(p99, r.Latency.P99us)
		thr = append(thr, r.Throughput.PerSecond)
		allocs = append(allocs, r.Latency.AllocsPerOp)
		bytes = append(bytes, r.Latency.BytesPerOp)
	}
	v.P50us, v.P99us, v.PerSecond, v.AllocsPerOp, v.BytesPerOp = median(p50), median(p99), median(thr), median(allocs), median(bytes)
	v.SelfCPUus, v.PeerCPUus = median(self), median(peer)
	v.Journal = journalFigures(v.Rounds)
}

// Ratio is a comparison of two variants, computed in each round and reported as the
// median over rounds.
type Ratio struct {
	Name   string    `json:"name"`
	Value  float64   `json:"value"`
	Rounds []float64 `json:"rounds"`
	Note   string    `json:"note,omitempty"`
}

// LoopResult is the orchestrator's cost per loop iteration.
type LoopResult struct {
	ToolCalls    int `json:"tool_calls"`
	Iterations   int `json:"iterations"`
	EventsPerRun int `json:"events_per_run"`
	// OverheadUs is (Run p50 − N × hop p50) / iterations, per round, median.
	OverheadUs     float64   `json:"overhead_per_iteration_us"`
	OverheadRounds []float64 `json:"overhead_rounds_us"`
	// InProcessUs is the in-process loop's p50 / iterations.
	InProcessUs float64 `json:"in_process_per_iteration_us"`
	// ModelUs is the scripted model alone, per model call (p50).
	ModelUs     float64   `json:"scripted_model_per_call_us"`
	ModelRounds []float64 `json:"scripted_model_rounds_us"`
	// NestedUs is what one level of nesting adds to a run: loop-nested p50 − loop-grpc
	// p50, per round, median (one nested loop and one more model call).
	NestedUs     float64   `json:"nested_level_us"`
	NestedRounds []float64 `json:"nested_level_rounds_us"`
}

// MemoryResult is the orchestrator's memory per open run, and beside it what an open
// server stream costs a bare grpc-go server (the floor).
type MemoryResult struct {
	KiBPerRun      float64       `json:"kib_per_run"`
	Rounds         []memoryRound `json:"rounds"`
	FloorKiBPerRun float64       `json:"floor_kib_per_stream"`
	FloorRounds    []memoryRound `json:"floor_rounds"`
}

func (m *MemoryResult) aggregate() {
	var xs, fs []float64
	for _, r := range m.Rounds {
		xs = append(xs, r.KiBPerRun)
	}
	for _, r := range m.FloorRounds {
		fs = append(fs, r.KiBPerRun)
	}
	m.KiBPerRun, m.FloorKiBPerRun = median(xs), median(fs)
}

// ResumeResult is the resume of open runs after an orchestrator crash, per store: the
// median time from the restart until every run ended.
type ResumeResult struct {
	SQLiteSeconds   float64       `json:"sqlite_seconds"`
	PostgresSeconds float64       `json:"postgres_seconds"`
	Rounds          []resumeRound `json:"rounds"`
}

func (m *ResumeResult) aggregate() {
	var sq, pg []float64
	for _, r := range m.Rounds {
		switch r.Store {
		case "sqlite":
			sq = append(sq, r.ResumedSeconds)
		case "postgres":
			pg = append(pg, r.ResumedSeconds)
		}
	}
	m.SQLiteSeconds, m.PostgresSeconds = median(sq), median(pg)
}

// RoutingRow is router.Tool(name) with a table of Tools tools.
type RoutingRow struct {
	Tools       int           `json:"tools"`
	NsPerOp     float64       `json:"ns_per_op"`
	HotNsPerOp  float64       `json:"hot_ns_per_op"`
	AllocsPerOp float64       `json:"allocs_per_op"`
	Rounds      []lookupRound `json:"rounds"`
}

func (r *RoutingRow) aggregate() {
	var ns, hot, allocs []float64
	for _, x := range r.Rounds {
		ns = append(ns, x.NsPerOp)
		hot = append(hot, x.HotNsPerOp)
		allocs = append(allocs, x.AllocsPerOp)
	}
	r.NsPerOp, r.HotNsPerOp, r.AllocsPerOp = median(ns), median(hot), median(allocs)
}

// RegistrationResult is the registration of many workers at once.
type RegistrationResult struct {
	Workers int                 `json:"workers"`
	TotalMs float64             `json:"total_ms"`
	P50Ms   float64             `json:"p50_ms"`
	MaxMs   float64             `json:"max_ms"`
	Rounds  []registrationRound `json:"rounds"`
}

func (r *RegistrationResult) aggregate() {
	var total, p50, mx []float64
	for _, x := range r.Rounds {
		r.Workers = x.Workers
		total = append(total, x.TotalMs)
		p50 = append(p50, x.P50Ms)
		mx = append(mx, x.MaxMs)
	}
	r.TotalMs, r.P50Ms, r.MaxMs = median(total), median(p50), median(mx)
}

// TelemetryResult is what the in-benchmark OTLP receiver got.
type TelemetryResult struct {
	TracedCalls int64          `json:"traced_calls"`
	BenchSpans  int64          `json:"bench_spans"`
	WorkerSpans int64          `json:"worker_spans"`
	Services    []serviceSpans `json:"services"`
}

// Verdicts of a goal.
const (
	Met         = "MET"
	Missed      = "MISSED"
	NotMeasured = "NOT MEASURED"
)

// Goal is one of the harness's goals, judged on this run's ratios.
type Goal struct {
	ID       string  `json:"id"`
	Goal     string  `json:"goal"`
	Target   string  `json:"target"`
	Value    float64 `json:"value"`
	Measured string  `json:"measured"`
	Verdict  string  `json:"verdict"`
	Why      string  `json:"why,omitempty"`
	Fix      string  `json:"fix,omitempty"`
	// profile names the variant to profile when a toolmesh goal is missed.
	profile string
	// whyBrief and fixBrief are a clause each of Why and Fix, for latest.md.
	whyBrief, fixBrief string
}

func newReport(cfg Config, started time.Time) *Report {
	return &Report{
		Mode:    cfg.Mode,
		Started: started.UTC().Truncate(time.Second),
		Machine: machineInfo(),
		Method: Method{
			Rounds: cfg.Rounds, Warmup: cfg.Warmup, LatencyCalls: cfg.LatencyCalls,
			LatencyMs: ms(cfg.LatencyTime), Concurrency: cfg.Concurrency, ThroughputMs: ms(cfg.ThroughputTime),
			LoopToolCalls: cfg.LoopToolCalls, OpenRuns: cfg.OpenRuns, RSSRounds: cfg.RSSRounds, OpenHoldMs: float64(cfg.OpenHold.Milliseconds()), ResumeRuns: cfg.ResumeRuns,
			RegisterWorkers: cfg.RegisterWorkers, ArgumentsBytes: len(Arguments), ContextKeys: len(contextEntries) / 2,
		},
		Tenants: TenantResult{Flood: floodDescription(), Limits: limitsDescription(), Hostile: hostileDescription()},
		Peers:   PeerResult{Method: peerMethod(cfg)},
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *Report) fail(what string, err error) {
	r.Failures = append(r.Failures, what+": "+err.Error())
}

// Variant returns the result of the named variant, or nil.
func (r *Report) Variant(name string) *VariantResult {
	for i := range r.Variants {
		if r.Variants[i].Name == name {
			return &r.Variants[i]
		}
	}
	return nil
}

// perRound computes f for each round both variants have, and the median.
func (r *Report) perRound(a, b string, f func(a, b RoundResult) float64) (float64, []float64) {
	va, vb := r.Variant(a), r.Variant(b)
	if !va.ok() || !vb.ok() {
		return math.NaN(), nil
	}
	var xs []float64
	for i := range min(len(va.Rounds), len(vb.Rounds)) {
		xs = append(xs, f(va.Rounds[i], vb.Rounds[i]))
	}
	return median(xs), xs
}

func p50Ratio(a, b RoundResult) float64 { return a.Latency.P50us / b.Latency.P50us }
func thrRatio(a, b RoundResult) float64 { return a.Throughput.PerSecond / b.Throughput.PerSecond }
func peerCPURatio(a, b RoundResult) float64 {
	return a.Throughput.PeerCPUus / b.Throughput.PeerCPUus
}

func (r *Report) ratio(name, a, b string, f func(a, b RoundResult) float64, note string) Ratio {
	v, xs := r.perRound(a, b, f)
	return Ratio{Name: name, Value: v, Rounds: xs, Note: note}
}

func (r *Report) computeRatios() {
	r.Ratios = []Ratio{
		r.ratio("hop p50 / limit p50", VHop, VLimit, p50Ratio, "goal ≤ 1.3"),
		r.ratio("hop throughput / limit throughput", VHop, VLimit, thrRatio, "goal ≥ 0.75"),
		r.ratio("hop+otel p50 / limit p50", VHopOTel, VLimit, p50Ratio, "goal ≤ 1.5"),
		r.ratio("hop+otel throughput / limit throughput", VHopOTel, VLimit, thrRatio, ""),
		r.ratio("hop+mtls p50 / hop p50", VHopMTLS, VHop, p50Ratio, "what mutual TLS costs a call on a long-lived connection; goal ≤ 1.15"),
		r.ratio("hop+mtls throughput / hop throughput", VHopMTLS, VHop, thrRatio, ""),
		r.ratio("hop+mtls worker CPU / hop worker CPU", VHopMTLS, VHop, peerCPURatio, "the mTLS worker skips validating arguments the orchestrator validated against the same definition, and pays for TLS"),
		r.ratio("limit+4md p50 / limit p50", VLimitMD, VLimit, p50Ratio, "what four metadata entries cost a bare call"),
		r.ratio("hop p50 / limit+4md p50", VHop, VLimitMD, p50Ratio, "toolmesh beyond carrying the context"),
		r.ratio("mcp-http p50 / hop p50", VMCPHTTP, VHop, p50Ratio, "goal ≥ 4, or ≥ 0.9 × the limit's own lead where that is under 4"),
		r.ratio("mcp-http p50 / limit p50", VMCPHTTP, VLimit, p50Ratio, "how much faster the raw gRPC limit itself is than MCP on this machine"),
		r.ratio("hop throughput / mcp-http throughput", VHop, VMCPHTTP, thrRatio, "goal ≥ 8"),
		r.ratio("mcp-stdio p50 / hop p50", VMCPStdio, VHop, p50Ratio, ""),
		r.ratio("hop throughput / mcp-stdio throughput", VHop, VMCPStdio, thrRatio, ""),
		r.ratio("loop-memory throughput / loop-grpc throughput", VLoopMemory, VLoopGRPC, thrRatio, "what keeping the runs' records in memory (the default journal) costs"),
		r.ratio("loop-sqlite throughput / loop-grpc throughput", VLoopSQLite, VLoopGRPC, thrRatio, "the SQLite journal's cost; goal ≥ 0.8"),
		r.ratio("loop-sqlite throughput / loop-memory throughput", VLoopSQLite, VLoopMemory, thrRatio, "durability's own cost: SQLite against the journal in memory"),
		r.ratio("loop-sqlite p50 / loop-grpc p50", VLoopSQLite, VLoopGRPC, p50Ratio, ""),
		r.ratio("loop-postgres throughput / loop-grpc throughput", VLoopPostgres, VLoopGRPC, thrRatio, "the PostgreSQL journal's cost; goal ≥ 0.6"),
		r.ratio("loop-postgres p50 / loop-grpc p50", VLoopPostgres, VLoopGRPC, p50Ratio, ""),
		r.ratio("loop-postgres throughput / loop-memory throughput", VLoopPostgres, VLoopMemory, thrRatio, "durability's own cost: PostgreSQL against the journal in memory"),
		r.ratio("hop p50 / inproc p50", VHop, VInProcess, p50Ratio, "what leaving the process costs"),
	}
}

func (r *Report) ratioValue(name string) float64 {
	for _, x := range r.Ratios {
		if x.Name == name {
			return x.Value
		}
	}
	return math.NaN()
}

func (r *Report) computeLoop(cfg Config) {
	n := cfg.LoopToolCalls
	l := &r.Loop
	l.ToolCalls, l.Iterations = n, n+1
	l.OverheadUs, l.OverheadRounds = r.perRound(VLoopGRPC, VHop, func(run, hop RoundResult) float64 {
		return (run.Latency.P50us - float64(n)*hop.Latency.P50us) / float64(n+1)
	})
	l.NestedUs, l.NestedRounds = r.perRound(VLoopNested, VLoopGRPC, func(nested, flat RoundResult) float64 {
		return nested.Latency.P50us - flat.Latency.P50us
	})
	l.InProcessUs = math.NaN()
	if v := r.Variant(VLoopInProc); v.ok() {
		l.InProcessUs = v.P50us / float64(n+1)
	}
	l.ModelUs = median(l.ModelRounds)
}

// The journal goals: loop throughput with each durable journal against loop-grpc's.
const (
	journalSQLiteGoal   = 0.8
	journalPostgresGoal = 0.6
)

// evaluateGoals judges the goals on the medians of the per-round ratios.
func (r *Report) evaluateGoals() {
	atMost := func(v, limit float64) string {
		switch {
		case math.IsNaN(v):
			return NotMeasured
		case v <= limit:
			return Met
		}
		return Missed
	}
	atLeast := func(v, limit float64) string {
		switch {
		case math.IsNaN(v):
			return NotMeasured
		case v >= limit:
			return Met
		}
		return Missed
	}
	x := func(v float64) string { return fmt.Sprintf("%.2f×", v) }

	hopP50 := r.ratioValue("hop p50 / limit p50")
	hopThr := r.ratioValue("hop throughput / limit throughput")
	otelP50 := r.ratioValue("hop+otel p50 / limit p50")
	mtlsP50 := r.ratioValue("hop+mtls p50 / hop p50")
	r.Tenants.aggregate() // NaN without rounds: not measured
	r.Peers.aggregate()
	r.Resume.aggregate()
	mcpP50 := r.ratioValue("mcp-http p50 / hop p50")
	mcpThr := r.ratioValue("hop throughput / mcp-http throughput")
	facades, facades10k := math.NaN(), math.NaN()
	if r.Facades.BytesWith > 0 {
		facades = r.Facades.Ratio
	}
	if r.Facades10k.BytesWith > 0 {
		facades10k = r.Facades10k.Ratio
	}
	// MCP against the hop: 4× at p50, or, on a machine where the raw gRPC limit itself is
	// not 4× faster than MCP, 0.9 of the limit's own lead.
	mcpTarget, mcpTargetText := 4.0, "≥ 4× lower"
	if lim := r.ratioValue("mcp-http p50 / limit p50"); lim < 4 {
		mcpTarget, mcpTargetText = 0.9*lim, fmt.Sprintf("≥ %.2f× lower (0.9 × the limit's own %.2f×: under 4× here)", 0.9*lim, lim)
	}
	// The hop's CPU per call, both sides, at concurrency 32: median over rounds of the sums.
	hopCPU := math.NaN()
	if v := r.Variant(VHop); v.ok() {
		var sums []float64
		for _, rr := range v.Rounds {
			if rr.Throughput.SelfCPUus > 0 && rr.Throughput.PeerCPUus > 0 {
				sums = append(sums, rr.Throughput.SelfCPUus+rr.Throughput.PeerCPUus)
			}
		}
		if len(sums) > 0 {
			hopCPU = median(sums)
		}
	}
	r.Goals = []Goal{
		{ID: "hop-cpu", Goal: "hop, telemetry off: CPU per call at c32, both sides (this process and the worker)", Target: "≤ 90 µs", Value: hopCPU, Measured: fmt.Sprintf("%.0f µs", hopCPU), Verdict: atMost(hopCPU, 90), profile: VHop},
		{ID: "hop-p50", Goal: "hop, telemetry off: p50 vs the raw gRPC limit", Target: "≤ 1.3×", Value: hopP50, Measured: x(hopP50), Verdict: atMost(hopP50, 1.3), profile: VHop},
		{ID: "hop-throughput", Goal: "hop, telemetry off: throughput at c32 vs the limit", Target: "≥ 0.75×", Value: hopThr, Measured: x(hopThr), Verdict: atLeast(hopThr, 0.75), profile: VHop},
		{ID: "hop-otel-p50", Goal: "hop, tracing on (batching exporter): p50 vs the limit", Target: "≤ 1.5×", Value: otelP50, Measured: x(otelP50), Verdict: atMost(otelP50, 1.5), profile: VHopOTel},
		{ID: "hop-mtls-p50", Goal: "hop with mutual TLS on a long-lived connection: p50 vs the plaintext hop", Target: "≤ 1.15×", Value: mtlsP50, Measured: x(mtlsP50), Verdict: atMost(mtlsP50, 1.15), profile: VHopMTLS},
		{ID: "tenant-isolation", Goal: "a quiet tenant's run p99 while another tenant floods the same orchestrator within its limits, vs alone", Target: "≤ 2×", Value: r.Tenants.P99Ratio, Measured: x(r.Tenants.P99Ratio), Verdict: atMost(r.Tenants.P99Ratio, 2)},
		{ID: "mcp-p50", Goal: "MCP SDK over streamable HTTP: p50 vs the hop (lower is better for the hop)", Target: mcpTargetText, Value: mcpP50, Measured: x(mcpP50), Verdict: atLeast(mcpP50, mcpTarget), profile: VHop},
		{ID: "mcp-throughput", Goal: "hop throughput vs the MCP SDK over streamable HTTP", Target: "≥ 8× higher", Value: mcpThr, Measured: x(mcpThr), Verdict: atLeast(mcpThr, 8), profile: VHop},
		{ID: "loop-overhead", Goal: "orchestrator overhead per loop iteration at p50, (Run − N × hop) / iterations", Target: "≤ 150 µs", Value: r.Loop.OverheadUs, Measured: fmt.Sprintf("%.0f µs", r.Loop.OverheadUs), Verdict: atMost(r.Loop.OverheadUs, 150), profile: VLoopGRPC},
		{ID: "journal-sqlite", Goal: "loop throughput at c32 with the SQLite journal vs memory only (loop-sqlite / loop-grpc)", Target: fmt.Sprintf("≥ %.1f×", journalSQLiteGoal), Value: r.ratioValue("loop-sqlite throughput / loop-grpc throughput"), Measured: x(r.ratioValue("loop-sqlite throughput / loop-grpc throughput")), Verdict: atLeast(r.ratioValue("loop-sqlite throughput / loop-grpc throughput"), journalSQLiteGoal), profile: VLoopSQLite},
		{ID: "journal-postgres", Goal: "loop throughput at c32 with the PostgreSQL journal vs memory only (loop-postgres / loop-grpc)", Target: fmt.Sprintf("≥ %.1f×", journalPostgresGoal), Value: r.ratioValue("loop-postgres throughput / loop-grpc throughput"), Measured: x(r.ratioValue("loop-postgres throughput / loop-grpc throughput")), Verdict: atLeast(r.ratioValue("loop-postgres throughput / loop-grpc throughput"), journalPostgresGoal), profile: VLoopPostgres},
		{ID: "memory-per-run", Goal: "orchestrator memory per open run (RSS delta / open runs) above the floor: a bare grpc-go server's open stream, measured in the same run", Target: "≤ floor + 8 KiB", Value: r.Memory.KiBPerRun - r.Memory.FloorKiBPerRun,
			Measured: fmt.Sprintf("%.1f KiB (floor %.1f + %.1f)", r.Memory.KiBPerRun, r.Memory.FloorKiBPerRun, r.Memory.KiBPerRun-r.Memory.FloorKiBPerRun), Verdict: atMost(r.Memory.KiBPerRun-r.Memory.FloorKiBPerRun, 8)},
		{ID: "resume-sqlite", Goal: fmt.Sprintf("resume of %d open runs after the orchestrator is killed (SIGKILL), SQLite journal: from the restart until every run was resumed and ended", r.Method.ResumeRuns), Target: "≤ 5 s", Value: r.Resume.SQLiteSeconds, Measured: fmt.Sprintf("%.2f s", r.Resume.SQLiteSeconds), Verdict: atMost(r.Resume.SQLiteSeconds, 5)},
		{ID: "resume-postgres", Goal: fmt.Sprintf("the same resume of %d runs, PostgreSQL journal (a private server, fsync on)", r.Method.ResumeRuns), Target: "≤ 5 s", Value: r.Resume.PostgresSeconds, Measured: fmt.Sprintf("%.2f s", r.Resume.PostgresSeconds), Verdict: atMost(r.Resume.PostgresSeconds, 5)},
		{ID: "facades-smaller", Goal: fmt.Sprintf("first request's tool definitions, %d tools in %d facades of %d vs all offered flat", r.Facades.Facades*r.Facades.ToolsPerFacade, r.Facades.Facades, r.Facades.ToolsPerFacade), Target: "≥ 50× fewer bytes", Value: facades, Measured: x(facades), Verdict: atLeast(facades, 50)},
		{ID: "facades-10k", Goal: fmt.Sprintf("first request's tool definitions, %d tools in %d facades of %d under %d parent facades vs all offered flat", r.Facades10k.Facades*r.Facades10k.ToolsPerFacade, r.Facades10k.Facades, r.Facades10k.ToolsPerFacade, r.Facades10k.Domains), Target: "≥ 500× fewer bytes", Value: facades10k, Measured: x(facades10k), Verdict: atLeast(facades10k, 500)},
	}
	for _, row := range r.Routing {
		if row.Tools < 10000 {
			continue
		}
		r.Goals = append(r.Goals, Goal{ID: fmt.Sprintf("routing-%dk", row.Tools/1000), Goal: fmt.Sprintf("routing: one lookup by a random name in a table of %d tools", row.Tools),
			Target: "≤ 100 ns", Value: row.NsPerOp, Measured: fmt.Sprintf("%.0f ns", row.NsPerOp), Verdict: atMost(row.NsPerOp, 100)})
	}
	r.Goals = append(r.Goals,
		Goal{ID: "loop-vs-eino-p50", Goal: "toolmesh's in-process loop p50 vs cloudwego/eino's ReAct agent (same fake model, tool and arguments)", Target: "≤ 0.7×",
			Value: r.Peers.P50Ratio, Measured: x(r.Peers.P50Ratio), Verdict: atMost(r.Peers.P50Ratio, 0.7)},
		Goal{ID: "loop-vs-eino-throughput", Goal: fmt.Sprintf("toolmesh's in-process loop throughput at c%d vs eino's ReAct agent", peerConcurrency), Target: "≥ 1.5×",
			Value: r.Peers.ThroughputRatio, Measured: x(r.Peers.ThroughputRatio), Verdict: atLeast(r.Peers.ThroughputRatio, 1.5)},
	)
}

// profileTargets are the variants behind missed toolmesh goals, each once.
func (r *Report) profileTargets() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range r.Goals {
		if g.Verdict == Missed && g.profile != "" && !seen[g.profile] {
			seen[g.profile] = true
			out = append(out, g.profile)
		}
	}
	return out
}

// WriteFiles writes latest.json and latest.md into dir, each through a temporary file.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md := r.Markdown()
	// JSON has no NaN: what was not measured is written as 0 (its variant has an error,
	// its goal the verdict NOT MEASURED).
	zeroNaN(reflect.ValueOf(r).Elem())
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"latest.json": append(js, '\n'), "latest.md": []byte(md)} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// zeroNaN sets every NaN or infinite float64 reachable from v to 0.
func zeroNaN(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float64:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && v.CanSet() {
			v.SetFloat(0)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			zeroNaN(v.Field(i))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			zeroNaN(v.Index(i))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			zeroNaN(v.Elem())
		}
	}
}

// FacadeResult compares the tool definitions of a model's first request with and without
// facades (progressive disclosure).
type FacadeResult struct {
	Facades        int `json:"facades"`
	ToolsPerFacade int `json:"tools_per_facade"`
	// Domains, when set, is the parent facades the facades are grouped under.
	Domains       int     `json:"domains,omitempty"`
	BytesWith     int     `json:"bytes_with_facades"`
	BytesWithout  int     `json:"bytes_without_facades"`
	TokensWith    int     `json:"tokens_with_facades"`
	TokensWithout int     `json:"tokens_without_facades"`
	Ratio         float64 `json:"ratio"`
}
