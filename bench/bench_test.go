package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// smokeConfig runs every variant for a handful of calls: the harness works, no timing is
// judged.
func smokeConfig(bins Bins) Config {
	return Config{
		Mode: "smoke", Rounds: 1, Warmup: 2,
		LatencyCalls: 6, LatencyTime: 200 * time.Millisecond, LatencySlices: 2,
		Concurrency: 4, ThroughputTime: 30 * time.Millisecond, ThroughputCalls: 40,
		LoopToolCalls: 2, OpenRuns: 20, RSSRounds: 1, OpenHold: 300 * time.Millisecond, ResumeRuns: 20, ResumeRounds: 1,
		ScaleSizes: []int{10, 100}, LookupTime: 5 * time.Millisecond, RegisterWorkers: 5,
		Bins: bins,
	}
}

// smokeBins finds the toolmesh binaries the way test/e2e does (failing when they are
// missing: make build, or TOOLMESH_BIN) and builds the two peer servers, which make build
// does not build, into a temporary directory.
func smokeBins(t *testing.T) Bins {
	t.Helper()
	var b Bins
	var err error
	if b.Orchestrator, err = harness.Bin("orchestrator"); err != nil {
		t.Fatal(err)
	}
	if b.Toolworker, err = harness.Bin("toolworker"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/rawadd", "./cmd/mcpadd", "./cmd/flood", "./cmd/looppeer")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the peer servers: %v\n%s", err, out)
	}
	// The eino peer is a module of its own.
	cmd = exec.Command("go", "build", "-o", filepath.Join(dir, "einoloop"), ".")
	cmd.Dir = filepath.Join("peers", "eino")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the eino peer: %v\n%s", err, out)
	}
	b.RawAdd, b.MCPAdd, b.Flood, b.LoopPeer, b.Eino = filepath.Join(dir, "rawadd"), filepath.Join(dir, "mcpadd"), filepath.Join(dir, "flood"),
		filepath.Join(dir, "looppeer"), filepath.Join(dir, "einoloop")
	b.Everything = os.Getenv("TOOLMESH_MCP_EVERYTHING")
	return b
}

func TestSmoke(t *testing.T) {
	cfg := smokeConfig(smokeBins(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Failures) > 0 {
		t.Fatalf("failures: %q", rep.Failures)
	}

	want := []string{VLimit, VLimitMD, VHop, VHopOTel, VHopMTLS, VMCPHTTP, VMCPStdio, VMCPGroup, VInProcess, VLoopGRPC, VLoopNested, VLoopInProc, VLoopMemory, VLoopSQLite}
	if _, err := harness.PostgresBin(); err == nil {
		want = append(want, VLoopPostgres)
	}
	if cfg.Bins.Everything != "" {
		want = slices.Insert(want, slices.Index(want, VMCPGroup)+1, VMCPEverything)
	}
	if len(rep.Variants) != len(want) {
		t.Fatalf("got %d variants, want %d", len(rep.Variants), len(want))
	}
	for i, name := range want {
		v := rep.Variants[i]
		if v.Name != name {
			t.Errorf("variant %d is %q, want %q", i, v.Name, name)
		}
		if !v.ok() || v.Calls == 0 || !(v.P50us > 0) || !(v.PerSecond > 0) {
			t.Errorf("variant %s did not run: %+v", v.Name, v)
		}
	}
	for _, g := range rep.Goals {
		pg := g.ID == "journal-postgres" || g.ID == "resume-postgres"
		if g.Verdict != Met && g.Verdict != Missed && (!pg || slices.Contains(want, VLoopPostgres)) {
			t.Errorf("goal %s: verdict %q, measured %q", g.ID, g.Verdict, g.Measured)
		}
		if g.Verdict == Missed && (g.Why == "" || g.Fix == "") {
			t.Errorf("goal %s missed without a why and a fix", g.ID)
		}
	}
	// Sixteen, and the two of the loop against eino; no routing goal (the smoke tables
	// are small).
	if len(rep.Goals) != 18 {
		t.Errorf("got %d goals, want 18", len(rep.Goals))
	}
	if pr := rep.Peers.Rounds; len(pr) != 1 || pr[0].Toolmesh.Runs == 0 || pr[0].Eino.Runs == 0 || !(pr[0].P50Ratio > 0) || !(pr[0].ThroughputRatio > 0) {
		t.Errorf("loop peers: %+v", pr)
	}
	if f := rep.Facades10k; f.Domains != 10 || f.Facades != 100 || !(f.Ratio > rep.Facades10kFlat.Ratio) {
		t.Errorf("facades at 10,000 tools: %+v, side by side %+v", f, rep.Facades10kFlat)
	}
	if tr := rep.Tenants.Rounds; len(tr) != 1 || tr[0].Alone.Calls == 0 || tr[0].Flooded.Calls == 0 || tr[0].Flood.Refused == 0 || tr[0].Flood.BigRefused == 0 || tr[0].Flood.HistoryRefused == 0 ||
		tr[0].Hostile.Calls == 0 || tr[0].HostileFlood.Refused <= tr[0].Flood.Refused {
		t.Errorf("tenant isolation: %+v", tr)
	}
	if len(rep.Memory.Rounds) != 1 || rep.Memory.Rounds[0].Runs != cfg.OpenRuns || rep.Memory.Rounds[0].AfterKiB == 0 {
		t.Errorf("memory rounds: %+v", rep.Memory.Rounds)
	}
	stores := 1
	if slices.Contains(want, VLoopPostgres) {
		stores = 2
	}
	if rr := rep.Resume.Rounds; len(rr) != stores || rr[0].Runs != cfg.ResumeRuns || !(rr[0].ResumedSeconds > 0) || !(rr[0].EventsPerRun > 0) {
		t.Errorf("resume rounds: %+v", rr)
	}
	if len(rep.ToolDefs) != 2 || rep.ToolDefs[1].Tools != 100 || rep.ToolDefs[1].Bytes <= rep.ToolDefs[0].Bytes {
		t.Errorf("tool definitions: %+v", rep.ToolDefs)
	}
	if len(rep.Routing) != 2 || !(rep.Routing[1].NsPerOp > 0) {
		t.Errorf("routing: %+v", rep.Routing)
	}
	if len(rep.Registration.Rounds) != 1 || rep.Registration.Rounds[0].Accepted != cfg.RegisterWorkers {
		t.Errorf("registration: %+v", rep.Registration)
	}
	if len(rep.Components) == 0 || rep.Loop.EventsPerRun == 0 {
		t.Errorf("components %+v, events per run %d", rep.Components, rep.Loop.EventsPerRun)
	}
	// Both ends of the traced hop export: this process, and the worker process from its
	// OTEL_* variables (OTLP over gRPC to the same receiver).
	if rep.Telemetry.BenchSpans == 0 || rep.Telemetry.WorkerSpans == 0 {
		t.Errorf("the traced hop exported %d spans from this process and %d from the worker, want both: %+v", rep.Telemetry.BenchSpans, rep.Telemetry.WorkerSpans, rep.Telemetry)
	}

	checkRenders(t, rep)
}

// checkRenders writes the report and reads it back.
func checkRenders(t *testing.T, rep *Report) {
	t.Helper()
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Goals", "## Latency at concurrency 1", "## Throughput", "## CPU per call", "## Allocations", "## Ratios", "## The loop", "## Orchestrator memory", "## Tenant isolation", "## Scaling", "## Caveats", "| nproc / GOMAXPROCS |"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("latest.md has no %q", s)
		}
	}
	for _, v := range rep.Variants {
		if !strings.Contains(string(md), "| "+v.Name+" |") {
			t.Errorf("latest.md has no row for %s", v.Name)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("latest.json: %v", err)
	}
	if back.Mode != rep.Mode || len(back.Variants) != len(rep.Variants) || len(back.Goals) != len(rep.Goals) {
		t.Errorf("latest.json does not hold the report: mode %q, %d variants, %d goals", back.Mode, len(back.Variants), len(back.Goals))
	}
}

// TestReportWithoutMeasurements renders a report whose variants all failed: no NaN may
// reach the JSON, every goal is NOT MEASURED, and the markdown still renders.
func TestReportWithoutMeasurements(t *testing.T) {
	rep := newReport(Quick(), time.Now())
	for _, name := range []string{VLimit, VHop, VMCPHTTP} {
		v := VariantResult{Name: name, Unit: "call", Error: "did not start"}
		v.aggregate()
		rep.Variants = append(rep.Variants, v)
	}
	rep.Memory.aggregate()
	rep.Registration.aggregate()
	rep.computeLoop(Quick())
	rep.computeRatios()
	rep.evaluateGoals()
	rep.explainMisses()
	rep.fail("variant limit", os.ErrNotExist)
	for _, g := range rep.Goals {
		if g.Verdict != NotMeasured {
			t.Errorf("goal %s: %s, want %s", g.ID, g.Verdict, NotMeasured)
		}
	}
	if !math.IsNaN(rep.Loop.OverheadUs) {
		t.Errorf("loop overhead %v, want NaN", rep.Loop.OverheadUs)
	}
	checkRenders(t, rep)
}

// TestExplainEveryGoal forces every goal to be missed on made-up figures: each gets a
// why and a fix, and none of them prints a NaN.
func TestExplainEveryGoal(t *testing.T) {
	rep := newReport(Quick(), time.Now())
	rep.Machine.NProc = 2
	mk := func(name string, p50, thr, self, peer float64) VariantResult {
		v := VariantResult{Name: name, Unit: "call", Rounds: []RoundResult{{
			Latency:    latency{Calls: 10, P50us: p50, P99us: 2 * p50},
			Throughput: throughput{Calls: 10, PerSecond: thr, SelfCPUus: self, PeerCPUus: peer},
		}}}
		v.aggregate()
		return v
	}
	rep.Variants = []VariantResult{
		mk(VLimit, 100, 30000, 20, 25), mk(VLimitMD, 105, 28000, 22, 27), mk(VHop, 300, 10000, 60, 100),
		mk(VHopOTel, 400, 7000, 90, 130), mk(VHopMTLS, 400, 9000, 66, 110), mk(VMCPHTTP, 420, 2500, 300, 320), mk(VMCPStdio, 300, 3000, 200, 220),
		mk(VInProcess, 1.5, 900000, 2, 0), mk(VLoopGRPC, 6000, 400, 1500, 1100), mk(VLoopInProc, 350, 2000, 500, 0),
		mk(VLoopSQLite, 30000, 200, 1700, 1100), mk(VLoopPostgres, 40000, 150, 3200, 1200), mk(VLoopMemory, 7000, 350, 1800, 1100),
	}
	rep.Memory.Rounds = []memoryRound{{Runs: 1000, BeforeKiB: 30000, AfterKiB: 130000, KiBPerRun: 100}}
	rep.Memory.FloorRounds = []memoryRound{{Runs: 1000, BeforeKiB: 20000, AfterKiB: 35000, KiBPerRun: 15}}
	rep.Memory.aggregate()
	rep.Resume.Rounds = []resumeRound{{Store: "sqlite", ResumedSeconds: 8.2}, {Store: "postgres", ResumedSeconds: 5.8}}
	rep.Tenants.Rounds = []tenantRound{{Alone: latency{P99us: 5000}, Flooded: latency{P99us: 15000}, Ratio: 3, Flood: floodCounts{Admitted: 40, Refused: 3000, BigRefused: 4, HistoryRefused: 4}}}
	rep.Tenants.aggregate()
	rep.Routing = []RoutingRow{{Tools: 10, NsPerOp: 60, HotNsPerOp: 50}, {Tools: 10000, NsPerOp: 300, HotNsPerOp: 52}}
	rep.Components = []ComponentResult{{ID: "validate", Us: 7}, {ID: "typed-add", Us: 9}, {ID: "json-add", Us: 1}}
	rep.Facades = FacadeResult{Facades: 10, ToolsPerFacade: 100, BytesWith: 12000, BytesWithout: 360000, Ratio: 30}
	rep.Facades10k = FacadeResult{Facades: 100, ToolsPerFacade: 100, Domains: 10, BytesWith: 12000, BytesWithout: 3600000, Ratio: 300}
	rep.Peers.Rounds = []peerRound{{Toolmesh: loopMeasurement{Runs: 10, P50us: 100, PerSecond: 1000}, Eino: loopMeasurement{Runs: 10, P50us: 100, PerSecond: 1000}, P50Ratio: 1, ThroughputRatio: 1}}
	rep.Loop.ModelRounds = []float64{9}
	rep.Loop.EventsPerRun = 33
	rep.computeLoop(Quick())
	rep.computeRatios()
	rep.evaluateGoals()
	rep.Profiles = []profileSummary{{Variant: VHop + " (worker in this process)", Goal: VHop,
		Buckets:     []share{{"Go runtime: GC", 30}, {"toolmesh", 10}},
		TopToolmesh: []share{{"internal/router.(*Router).invoke", 50}, {"pkg/schema.Schema.Validate", 20}}}}
	rep.explainMisses()
	for _, g := range rep.Goals {
		if g.Verdict != Missed {
			t.Errorf("goal %s: %s (%s), want MISSED on these figures", g.ID, g.Verdict, g.Measured)
			continue
		}
		if g.Why == "" || g.Fix == "" || strings.Contains(g.Why, "NaN") || strings.Contains(g.Fix, "NaN") {
			t.Errorf("goal %s: why %q, fix %q", g.ID, g.Why, g.Fix)
		}
		if g.whyBrief == "" || g.fixBrief == "" || strings.Contains(g.whyBrief, "NaN") || len(g.whyBrief) > 320 || len(g.fixBrief) > 160 {
			t.Errorf("goal %s: brief why %q (%d bytes), fix %q (%d bytes)", g.ID, g.whyBrief, len(g.whyBrief), g.fixBrief, len(g.fixBrief))
		}
	}
	// The journal's fix weighs the CPU a run costs (with the journal and without) and how
	// busy the cores were: SQLite adds 200 µs of the 650 µs that 0.8× allows, and the
	// cores were idler (waits); PostgreSQL adds 1.80 ms, past the 1.73 ms of 0.6×.
	for id, wants := range map[string][]string{
		"journal-sqlite": {"alone gives 0.93×, and 0.8× allows the journal 650 µs of CPU per run where it adds 200 µs.",
			"2 cores 52% busy without a journal and 28% with it: the runs waited", "the measured 0.50× below the 0.93× of CPU alone",
			"less CPU per record (the journal adds 200 µs a run; 0.8× allows 650 µs)"},
		"journal-postgres": {"alone gives 0.59×, and 0.6× allows the journal 1.73 ms of CPU per run where it adds 1.80 ms (300 µs of it the journal's own: loop-memory adds as much)",
			"33% with it (PostgreSQL's server, on the same cores, is not counted)"},
	} {
		i := slices.IndexFunc(rep.Goals, func(g Goal) bool { return g.ID == id })
		for _, want := range wants {
			if i < 0 || !strings.Contains(rep.Goals[i].Fix+rep.Goals[i].fixBrief, want) {
				t.Errorf("goal %s: the fix does not say %q", id, want)
			}
		}
	}
	if !strings.Contains(rep.Goals[0].Why, "pkg/schema.Schema.Validate 20%") {
		t.Errorf("the hop's why does not cite the profile: %q", rep.Goals[0].Why)
	}
	// latest.md gives the brief of each miss; latest.json keeps the whole analysis.
	md := rep.Markdown()
	for _, g := range rep.Goals {
		if want := "* **" + g.ID + " missed.** Why: " + g.whyBrief + ". Fix: " + g.fixBrief + "."; !strings.Contains(md, want) {
			t.Errorf("latest.md has no line %q", want)
		}
		if strings.Contains(md, g.Why) {
			t.Errorf("latest.md repeats the whole why of %s", g.ID)
		}
	}
	checkRenders(t, rep)
}

// A journal goal's fix copes with CPU that was not measured, and with a journal that adds
// none.
func TestJournalFixEdges(t *testing.T) {
	rep := newReport(Quick(), time.Now())
	rep.Machine.NProc = 2
	v := func(thr, self, peer float64) *VariantResult {
		return &VariantResult{PerSecond: thr, SelfCPUus: self, PeerCPUus: peer}
	}
	g := &Goal{ID: "journal-sqlite"}
	for _, c := range []struct {
		base, jr   *VariantResult
		fix, brief string
	}{
		{v(400, 0, 0), v(200, 0, 0), "was not measured", "less CPU per record and fewer waits for commits"},
		{v(400, 1500, 1100), v(200, 1400, 1100), "the runs waited for their commits with cores idle", "fewer idle waits for commits (the journal adds no CPU per run)"},
		{v(400, 1500, 1100), v(200, 4100, 1100), "the CPU is the whole of the miss", "less CPU per record (the journal adds 2.60 ms a run; 0.8× allows 650 µs)"},
	} {
		fix, brief := rep.journalFix(c.base, rep.measured(VLoopMemory), c.jr, g)
		if !strings.Contains(fix, c.fix) || !strings.HasPrefix(brief, c.brief) {
			t.Errorf("fix %q, brief %q; want them to say %q and %q", fix, brief, c.fix, c.brief)
		}
		if strings.Contains(fix+brief, "NaN") || strings.Contains(fix+brief, "adds -") {
			t.Errorf("fix %q, brief %q", fix, brief)
		}
	}
}

// TestExplainWithoutTheLimit: the MCP goals are judged against the hop alone; their
// explanation must cope with a limit that did not run.
func TestExplainWithoutTheLimit(t *testing.T) {
	rep := newReport(Quick(), time.Now())
	for _, x := range []struct {
		name     string
		p50, thr float64
	}{{VHop, 300, 10000}, {VMCPHTTP, 420, 2500}} {
		v := VariantResult{Name: x.name, Unit: "call", Rounds: []RoundResult{{Latency: latency{Calls: 1, P50us: x.p50}, Throughput: throughput{Calls: 1, PerSecond: x.thr}}}}
		v.aggregate()
		rep.Variants = append(rep.Variants, v)
	}
	rep.computeLoop(Quick())
	rep.computeRatios()
	rep.evaluateGoals()
	rep.explainMisses()
	missed := 0
	for _, g := range rep.Goals {
		if g.Verdict == Missed {
			missed++
			if g.Why == "" || strings.Contains(g.Why, "NaN") || strings.Contains(g.Why, "Inf") {
				t.Errorf("goal %s: why %q", g.ID, g.Why)
			}
		}
	}
	if missed != 2 {
		t.Errorf("%d goals missed, want the two MCP goals", missed)
	}
	checkRenders(t, rep)
}

func TestSummarise(t *testing.T) {
	top := `File: benchrun
Type: cpu
Duration: 1s, Total samples = 1s (100%)
Showing nodes accounting for 1s, 100% of 1s total
      flat  flat%   sum%        cum   cum%
     0.40s 40.00% 40.00%      0.40s 40.00%  runtime.scanObject
     0.30s 30.00% 70.00%      0.50s 50.00%  github.com/google/jsonschema-go/jsonschema.(*state).validate
     0.20s 20.00% 90.00%      0.90s 90.00%  github.com/toolmesh/toolmesh/pkg/schema.Schema.Validate
     0.10s 10.00%   100%      0.10s 10.00%  internal/runtime/syscall/linux.Syscall6
         0     0%   100%      0.95s 95.00%  github.com/toolmesh/toolmesh/bench.measureThroughput.func1
`
	s := &profileSummary{}
	summarise(s, []byte(top))
	got := map[string]float64{}
	for _, b := range s.Buckets {
		got[b.Name] = b.Percent
	}
	want := map[string]float64{"Go runtime: GC": 40, "JSON and JSON Schema": 30, "toolmesh": 20, "system calls": 10, "benchmark harness": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("bucket %q = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(s.TopToolmesh) != 1 || s.TopToolmesh[0].Name != "pkg/schema.Schema.Validate" || s.TopToolmesh[0].Percent != 90 {
		t.Errorf("top toolmesh: %+v", s.TopToolmesh)
	}
	if len(s.TopFlat) != 5 || s.TopFlat[0].Name != "runtime.scanObject" {
		t.Errorf("top flat: %+v", s.TopFlat)
	}
}

func TestArgumentsSize(t *testing.T) {
	if n := len(Arguments); n < 90 || n > 110 {
		t.Errorf("Arguments are %d bytes, want about 100", n)
	}
	if !json.Valid([]byte(Arguments)) {
		t.Errorf("Arguments are not JSON: %s", Arguments)
	}
}

// TestMemoryHoldCoversARenewal: the full and quick configurations hold the runs open past
// a renewal of their leases, so that the memory per open run counts what the renewals
// cost (a default lease_ttl raised past it would let them go uncounted).
func TestMemoryHoldCoversARenewal(t *testing.T) {
	for _, c := range []Config{Full(), Quick()} {
		if c.OpenHold <= renewalPeriod() {
			t.Errorf("%s: runs held open %s, not past a lease renewal every %s", c.Mode, c.OpenHold, renewalPeriod())
		}
	}
}

// TestJournalFigures pins the journal's commit figures, computed from what the store
// counted in each round, and their place in a missed goal's fix and in the report.
func TestJournalFigures(t *testing.T) {
	round := func(calls int64, perSecond float64, j *journalRound) RoundResult {
		return RoundResult{Latency: latency{Calls: 10, P50us: 1000}, Throughput: throughput{Concurrency: 32, Calls: calls, PerSecond: perSecond, SelfCPUus: 1400, PeerCPUus: 300, Journal: j}}
	}
	// 1000 runs at 1280 runs/s: 12,000 writes in 800 commits; each commit 800 µs, 700 of
	// it the log's write; the writes waited 1.5 ms each.
	j := &journalRound{Commits: 800, Writes: 12000, CommittingUs: 800 * 800, WaitedUs: 12000 * 1500, LoggingUs: 800 * 700}
	v := VariantResult{Name: VLoopSQLite, Unit: "run", Rounds: []RoundResult{round(1000, 1280, j), round(1000, 1280, j), round(1000, 1280, nil)}}
	v.aggregate()
	want := JournalFigures{CommitsPerRun: 0.8, WritesPerRun: 12, WritesPerCommit: 15, CommitUs: 800, LogUs: 700, WaitUs: 1500, WaitedUsPerRun: 18000, RunUs: 25000, WaitShare: 0.72}
	if v.Journal == nil || *v.Journal != want {
		t.Fatalf("figures %+v, want %+v", v.Journal, want)
	}
	if nothing := (VariantResult{Rounds: []RoundResult{round(1000, 1280, nil)}}); journalFigures(nothing.Rounds) != nil {
		t.Error("figures from rounds without any")
	}

	rep := newReport(Quick(), time.Now())
	rep.Machine.NProc, rep.Machine.DiskSyncWriteUs, rep.Machine.DiskSyncWriteIdleUs = 2, 40, 400
	base := &VariantResult{PerSecond: 2300, SelfCPUus: 550, PeerCPUus: 250}
	fix, _ := rep.journalFix(base, rep.measured(VLoopMemory), &v, &Goal{ID: "journal-sqlite"})
	for _, s := range []string{"A run's 12.0 writes waited 18.0 ms of its 25.0 ms (72%), 1.50 ms each: a commit took 800 µs, 700 µs of it on the commit log, where the same directory took, before the load, 40 µs for a synchronous 16 KiB write back to back and 400 µs for one after the disk was idle for 1.00 ms"} {
		if !strings.Contains(fix, s) {
			t.Errorf("fix %q does not say %q", fix, s)
		}
	}
	rep.Variants = []VariantResult{v}
	var b mdBuilder
	rep.mdJournal(&b)
	md := b.String()
	for _, s := range []string{"| loop-sqlite | 12.0 | 15.0 | 800 µs | 700 µs | 1.50 ms | 18.0 ms of 25.0 ms | **72%** |", "took 40 µs (p50 of 200)", "and 400 µs for the same write after the disk was idle for 1.00 ms", "loop-sqlite's commits spent 700 µs each"} {
		if !strings.Contains(md, s) {
			t.Errorf("report section %q does not hold %q", md, s)
		}
	}
}
