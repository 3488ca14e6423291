package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// mdBuilder collects the markdown of a report, a line at a time.
type mdBuilder struct{ strings.Builder }

// p writes one formatted line.
func (b *mdBuilder) p(format string, args ...any) { fmt.Fprintf(&b.Builder, format+"\n", args...) }

// Markdown renders the report: goals first, then a table per metric.
func (r *Report) Markdown() string {
	var b mdBuilder
	r.mdHeader(&b)
	r.mdFailures(&b)
	r.mdGoals(&b)
	r.mdLatency(&b)
	r.mdThroughput(&b)
	r.mdCPU(&b)
	r.mdAllocations(&b)
	r.mdRatios(&b)
	r.mdLoop(&b)
	r.mdJournal(&b)
	r.mdMemory(&b)
	r.mdResume(&b)
	r.mdTenants(&b)
	r.mdScaling(&b)
	r.mdPeers(&b)
	r.mdTelemetry(&b)
	r.mdProfiles(&b)
	r.mdVariants(&b)
	mdReference(&b)
	mdCaveats(&b)
	return b.String()
}

// mdHeader writes the title, the machine table and how the run was sized.
func (r *Report) mdHeader(b *mdBuilder) {
	p := b.p
	m := r.Machine
	p("# toolmesh benchmark: the cost of a hop and of a loop")
	p("")
	p("Mode **%s**, started %s, took %.0f s. Written by `go run ./bench/cmd/benchrun%s` (`make bench%s`).",
		r.Mode, r.Started.Format("2006-01-02 15:04 UTC"), r.DurationSeconds, map[bool]string{true: " -quick"}[r.Mode == "quick"], map[bool]string{true: "-quick"}[r.Mode == "quick"])
	p("")
	p("| machine | |")
	p("|---|---|")
	p("| CPU | %s |", m.CPUModel)
	p("| nproc / GOMAXPROCS | %d / %d |", m.NProc, m.GOMAXPROCS)
	p("| Go | %s |", m.GoVersion)
	p("| kernel | %s |", m.Kernel)
	p("| memory | %s |", m.MemTotal)
	p("| commit | %s |", m.Commit)
	p("| load average (1, 5, 15 min) at start / end | %s / %s |", m.LoadAtStart, m.LoadAtEnd)
	p("")
	me := r.Method
	p("Method: %d interleaved rounds; in each, every variant gets %d warm-up calls, up to %d calls or %.0f ms one at a time (latency, allocations), then %.0f ms with %d calls in flight (throughput). Figures are medians over the rounds, ratios medians of per-round ratios. Arguments are %d bytes of JSON, toolmesh calls carry a %d-key ToolCallContext, and every peer is a separate process on 127.0.0.1 sharing the %d cores.",
		me.Rounds, me.Warmup, me.LatencyCalls, me.LatencyMs, me.ThroughputMs, me.Concurrency, me.ArgumentsBytes, me.ContextKeys, m.NProc)
	p("")
}

// mdFailures lists what failed during the run, if anything did.
func (r *Report) mdFailures(b *mdBuilder) {
	p := b.p
	if len(r.Failures) > 0 {
		p("## Failures")
		p("")
		for _, f := range r.Failures {
			p("* %s", oneLine(f))
		}
		p("")
	}
}

// mdGoals writes the goals table and a line on each missed goal.
func (r *Report) mdGoals(b *mdBuilder) {
	p := b.p
	p("## Goals")
	p("")
	p("| goal | target | measured | verdict |")
	p("|---|---|---|---|")
	for _, g := range r.Goals {
		p("| %s | %s | %s | **%s** |", g.Goal, g.Target, g.Measured, g.Verdict)
	}
	p("")
	missed := false
	for _, g := range r.Goals {
		if g.Verdict != Missed {
			continue
		}
		missed = true
		why, fix := g.whyBrief, g.fixBrief
		if why == "" { // a report whose misses were not explained here
			why, fix = strings.TrimSuffix(g.Why, "."), strings.TrimSuffix(g.Fix, ".")
		}
		p("* **%s missed.** Why: %s. Fix: %s.", g.ID, why, fix)
	}
	if missed {
		p("")
		p("The full analysis of each miss is in latest.json (`why`, `fix`).")
	}
	p("")
}

// limitResult is the limit variant's result, empty when it is missing.
func (r *Report) limitResult() *VariantResult {
	limit := r.Variant(VLimit)
	if limit == nil {
		limit = &VariantResult{}
	}
	return limit
}

// mdLatency writes the latency table at concurrency 1.
func (r *Report) mdLatency(b *mdBuilder) {
	p := b.p
	p("## Latency at concurrency 1")
	p("")
	p("| variant | p50 | p99 | p50 vs limit | p50 per round |")
	p("|---|---:|---:|---:|---|")
	limit := r.limitResult()
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s | %s |", v.Name, dur(v.P50us), dur(v.P99us), vs(v.P50us, limit.P50us, limit.ok() && v.ok()), perRound(v, func(x RoundResult) string { return dur(x.Latency.P50us) }))
	}
	p("")
}

// mdThroughput writes the throughput table at the run's concurrency.
func (r *Report) mdThroughput(b *mdBuilder) {
	p := b.p
	p("## Throughput at concurrency %d", r.Method.Concurrency)
	p("")
	p("| variant | per second | vs limit | per round |")
	p("|---|---:|---:|---|")
	limit := r.limitResult()
	for _, v := range r.Variants {
		p("| %s | %s %s/s | %s | %s |", v.Name, count(v.PerSecond), v.Unit, vs(v.PerSecond, limit.PerSecond, limit.ok() && v.ok()), perRound(v, func(x RoundResult) string { return count(x.Throughput.PerSecond) }))
	}
	p("")
}

// mdCPU writes the CPU per call on each side and the pieces of a hop timed alone.
func (r *Report) mdCPU(b *mdBuilder) {
	p := b.p
	m := r.Machine
	p("## CPU per call at concurrency %d", r.Method.Concurrency)
	p("")
	p("CPU time of the throughput phase per call, in this process (`/proc/self/task/*/schedstat`) and in the peer; on %d cores throughput is at most about %d s / (the sum).", m.NProc, m.NProc)
	p("")
	p("| variant | this process | peer process | sum | peer |")
	p("|---|---:|---:|---:|---|")
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s | %s |", v.Name, dur(v.SelfCPUus), dur(v.PeerCPUus), dur(v.SelfCPUus+v.PeerCPUus), peerOf(v.Name))
	}
	p("")
	if len(r.Components) > 0 {
		p("Pieces of a hop, each timed alone in this process (mean CPU per call, median over rounds):")
		p("")
		p("| piece | where | per call |")
		p("|---|---|---:|")
		for _, c := range r.Components {
			p("| %s | %s | %s |", c.Name, c.Where, dur(c.Us))
		}
		p("")
	}
}

// mdAllocations writes the allocations per call, and the worker side's of a hop.
func (r *Report) mdAllocations(b *mdBuilder) {
	p := b.p
	p("## Allocations per call (this process)")
	p("")
	p("| variant | allocs | bytes | whose |")
	p("|---|---:|---:|---|")
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s |", v.Name, num1(v.AllocsPerOp), count(v.BytesPerOp), whose(v.Name))
	}
	if hop := r.Variant(VHop); hop != nil && r.HopBothSides.Calls > 0 {
		both := r.HopBothSides
		p("")
		p("The worker side of a hop, measured with a pkg/worker serving the math group in this process (both sides' allocations, less the orchestrator side's above): **%s allocs, %s bytes per call** (both sides %s allocs, %s bytes).",
			num1(both.AllocsPerOp-hop.AllocsPerOp), count(both.BytesPerOp-hop.BytesPerOp), num1(both.AllocsPerOp), count(both.BytesPerOp))
	}
	p("")
}

// mdRatios writes the ratios table.
func (r *Report) mdRatios(b *mdBuilder) {
	p := b.p
	p("## Ratios (median of per-round ratios)")
	p("")
	p("| ratio | value | per round | note |")
	p("|---|---:|---|---|")
	for _, x := range r.Ratios {
		rounds := make([]string, len(x.Rounds))
		for i, v := range x.Rounds {
			rounds[i] = fmt.Sprintf("%.2f", v)
		}
		p("| %s | %s | %s | %s |", x.Name, times(x.Value), strings.Join(rounds, ", "), x.Note)
	}
	p("")
}

// mdLoop writes the loop's cost per iteration and the overhead by round.
func (r *Report) mdLoop(b *mdBuilder) {
	p := b.p
	l := r.Loop
	p("## The loop: orchestrator cost per iteration")
	p("")
	p("A run of %d tool calls has %d iterations (model calls).", l.ToolCalls, l.Iterations)
	p("")
	p("| | value |")
	p("|---|---:|")
	if v := r.Variant(VLoopGRPC); v != nil {
		p("| Run over gRPC, p50 (%s) | %s |", VLoopGRPC, dur(v.P50us))
	}
	if v := r.Variant(VHop); v != nil {
		p("| %d × hop p50 | %s |", l.ToolCalls, dur(float64(l.ToolCalls)*v.P50us))
	}
	p("| **orchestrator overhead per iteration**, (Run − N × hop) / iterations | **%s** |", dur(l.OverheadUs))
	p("| of which the scripted model per call (template, streaming chunks, request recording) | %s |", dur(l.ModelUs))
	p("| in-process loop per iteration (%s p50 / iterations: no gRPC, no-op tool) | %s |", VLoopInProc, dur(l.InProcessUs))
	if v := r.Variant(VLoopNested); v != nil {
		p("| Run with the same calls in one agentic tool's nested loop, p50 (%s) | %s |", VLoopNested, dur(v.P50us))
		p("| **one level of nesting**, %s − %s (a nested loop and one more model call) | **%s** |", VLoopNested, VLoopGRPC, dur(l.NestedUs))
	}
	for _, name := range []string{VLoopMemory, VLoopSQLite, VLoopPostgres} {
		if v := r.Variant(name); v != nil {
			p("| Run with the run journaled, p50 (%s) | %s (%s per iteration) |", name, dur(v.P50us), dur(v.P50us/float64(l.Iterations)))
		}
	}
	p("")
	rounds := make([]string, len(l.OverheadRounds))
	for i, x := range l.OverheadRounds {
		rounds[i] = dur(x)
	}
	p("Overhead per iteration by round: %s.", strings.Join(rounds, ", "))
	p("")
}

// mdJournal writes the journaled variants' commits: how many a run makes, how long one
// takes and how long the runs waited for them.
func (r *Report) mdJournal(b *mdBuilder) {
	p := b.p
	var vs []*VariantResult
	for _, name := range []string{VLoopSQLite, VLoopPostgres} {
		if v := r.Variant(name); v != nil && v.Journal != nil {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return
	}
	p("## The journal's commits at c%d", r.Method.Concurrency)
	p("")
	p("What each durable journal's store counted while the variant's throughput was measured (medians over rounds). A run's writes are its request and each commit of the records it queued: at each call it sends, before a model call that an uncommitted outcome of a call that is not idempotent would change, and at its end, the run waits for the write; a queue nobody waits for is written after 5 ms, the run going on. A commit carries the writes of every run waiting. A write's wait runs from its hand-over to the store until its outcome: the commit under way before it, the gathering of its group, its own commit. A run's time is the concurrency divided by the throughput; the share is its writes' waits in it (those of writes it did not wait for included).")
	p("")
	p("| variant | writes per run | writes per commit | commit | of which the commit log | a write's wait | a run's writes' waits | **share of a run's time** |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, v := range vs {
		j := v.Journal
		p("| %s | %.1f | %.1f | %s | %s | %s | %s of %s | **%.0f%%** |", v.Name, j.WritesPerRun, j.WritesPerCommit, dur(j.CommitUs), dur(j.LogUs), dur(j.WaitUs), dur(j.WaitedUsPerRun), dur(j.RunUs), 100*j.WaitShare)
	}
	p("")
	if v, d := r.Variant(VLoopSQLite), r.Machine.DiskSyncWriteUs; d > 0 && v != nil && v.Journal != nil && v.Journal.LogUs > 0 {
		if idle := r.Machine.DiskSyncWriteIdleUs; idle > 0 {
			p("Before the load, the same directory took %s (p50 of %d) for a synchronous write of %d KiB (O_DSYNC, O_DIRECT where allowed, as the commit log writes) back to back, and %s for the same write after the disk was idle for %s, as it is between two commits' writes (a write comes after the last one's end and the gathering of its group); %s's commits spent %s each on the commit log under the load.", dur(d), syncProbeWrites, syncProbeBytes>>10, dur(idle), dur(float64(syncProbeIdle.Microseconds())), VLoopSQLite, dur(v.Journal.LogUs))
		} else {
			p("The same directory took %s (p50 of %d) for a synchronous write of %d KiB (O_DSYNC, O_DIRECT where allowed, as the commit log writes) before the load, where %s's commits spent %s each on the commit log under it.", dur(d), syncProbeWrites, syncProbeBytes>>10, VLoopSQLite, dur(v.Journal.LogUs))
		}
		p("")
	}
}

// mdMemory writes the orchestrator's memory per open run and the bare server's floor.
func (r *Report) mdMemory(b *mdBuilder) {
	p := b.p
	p("## Orchestrator memory per open run")
	p("")
	hold := time.Duration(r.Method.OpenHoldMs * float64(time.Millisecond))
	period := renewalPeriod().Round(100 * time.Millisecond)
	renewal := fmt.Sprintf("longer than the period of the runs' lease renewals (%s), so that what an open run does while it waits is counted", period)
	if hold <= renewalPeriod() {
		renewal = fmt.Sprintf("shorter than the period of the runs' lease renewals (%s): what an open run does while it waits is not all counted", period)
	}
	p("bin/orchestrator, whose scripted model waits an hour, holds %d Run streams open over one pkg/client connection; VmRSS once one run is open (what the process pays once: the code its first run touches, its connection), and again %s after the last RunStarted (%s):", r.Method.OpenRuns, hold, renewal)
	p("")
	p("| round | runs | VmRSS before | VmRSS after | per open run | time to open all |")
	p("|---|---:|---:|---:|---:|---:|")
	for i, x := range r.Memory.Rounds {
		p("| %d | %d | %d KiB | %d KiB | %.1f KiB | %.2f s |", i+1, x.Runs, x.BeforeKiB, x.AfterKiB, x.KiBPerRun, x.OpenSeconds)
	}
	p("| **median** | | | | **%.1f KiB** | |", r.Memory.KiBPerRun)
	p("")
	if len(r.Memory.FloorRounds) > 0 {
		p("The floor, measured the same way: bench/cmd/rawadd -health, a bare grpc-go server with default options, holding as many grpc.health.v1 Watch streams open over one connection (a Watch handler waits for a change as a run waits for its model). Whatever a run holds comes on top of this:")
		p("")
		p("| round | streams | VmRSS before | VmRSS after | per open stream |")
		p("|---|---:|---:|---:|---:|")
		for i, x := range r.Memory.FloorRounds {
			p("| %d | %d | %d KiB | %d KiB | %.1f KiB |", i+1, x.Runs, x.BeforeKiB, x.AfterKiB, x.KiBPerRun)
		}
		p("| **median** | | | | **%.1f KiB** |", r.Memory.FloorKiBPerRun)
		p("")
	}
}

// mdResume writes the resume after a crash, if it was measured.
func (r *Report) mdResume(b *mdBuilder) {
	p := b.p
	if len(r.Resume.Rounds) > 0 {
		p("## Resume after a crash")
		p("")
		p("bin/orchestrator journaling in SQLite (a data directory) or in a private PostgreSQL (fsync on) starts %d detached runs, each calling add %d times (bin/toolworker) and then waiting in a model call that answers after an hour; once every run waits, the orchestrator is killed with SIGKILL and another is started on the same journal and address, whose model answers that call at once. Timed from the restart: until it serves (it has taken every run's lease), and until every run ended, resumed from the journal (its request, last snapshot and the records after it read, its steps replayed without asking the model again):", r.Method.ResumeRuns, resumeSteps)
		p("")
		p("| round | store | runs | events per run before the crash | time to open them | serving after | **all resumed and ended after** |")
		p("|---|---|---:|---:|---:|---:|---:|")
		for i, x := range r.Resume.Rounds {
			p("| %d | %s | %d | %.0f | %.2f s | %.2f s | **%.2f s** |", i+1, x.Store, x.Runs, x.EventsPerRun, x.OpenSeconds, x.ServingSeconds, x.ResumedSeconds)
		}
		p("")
	}
}

// mdTenants writes the quiet tenant's latency alone, flooded and against a hostile flood.
func (r *Report) mdTenants(b *mdBuilder) {
	p := b.p
	me := r.Method
	p("## Tenant isolation")
	p("")
	p("The quiet tenant runs loop-grpc's run (%d calls of add) one at a time on the mutual-TLS core, for %s alone and then for as long while the noisy tenant floods the same orchestrator: %s. Limits: %s.",
		me.LoopToolCalls, dur(2*me.LatencyMs*1000), r.Tenants.Flood, r.Tenants.Limits)
	p("")
	p("| round | alone p50 | alone p99 | flooded p50 | flooded p99 | p99 ratio | flood: runs admitted | refused | oversized refused | long refused |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, x := range r.Tenants.Rounds {
		p("| %d | %s | %s | %s | %s | %.2f× | %d | %d | %d | %d |", i+1, dur(x.Alone.P50us), dur(x.Alone.P99us), dur(x.Flooded.P50us), dur(x.Flooded.P99us), x.Ratio,
			x.Flood.Admitted, x.Flood.Refused, x.Flood.BigRefused, x.Flood.HistoryRefused)
	}
	p("| **median** | | | | | **%.2f×** | | | | |", r.Tenants.P99Ratio)
	p("")
	p("Not a goal, for what it shows: %s. The refusals are cheap but not free (a TLS record, an HTTP/2 stream and a status each), and the flood process shares the machine.", r.Tenants.Hostile)
	p("")
	p("| round | hostile p50 | hostile p99 | p99 ratio to alone | runs refused | runs admitted | flood's CPU, honouring / ignoring RetryInfo |")
	p("|---|---:|---:|---:|---:|---:|---:|")
	for i, x := range r.Tenants.Rounds {
		p("| %d | %s | %s | %.2f× | %d | %d | %s / %s |", i+1, dur(x.Hostile.P50us), dur(x.Hostile.P99us), x.HostileRatio, x.HostileFlood.Refused, x.HostileFlood.Admitted,
			cpuShare(x.Flood), cpuShare(x.HostileFlood))
	}
	p("| **median** | | | **%.2f×** | | | |", r.Tenants.HostileP99Ratio)
	p("")
}

// mdScaling writes the scaling section: routing lookups, tool definitions, facades and
// registration.
func (r *Report) mdScaling(b *mdBuilder) {
	r.mdRouting(b)
	r.mdFacades(b)
	r.mdRegistration(b)
}

// mdRouting writes the lookup times by table size and the size of the tool definitions.
func (r *Report) mdRouting(b *mdBuilder) {
	p := b.p
	p("## Scaling")
	p("")
	p("`router.Tool(name)` over tables of add-shaped tools, by names in random order and, as the control without cache misses, by one name again and again:")
	p("")
	p("| tools registered | ns per lookup (random names) | vs smallest | ns per lookup (one name again and again) | allocs per lookup |")
	p("|---:|---:|---:|---:|---:|")
	for _, x := range r.Routing {
		p("| %s | %.0f | %s | %.0f | %.1f |", integer(x.Tools), x.NsPerOp, vs(x.NsPerOp, r.Routing[0].NsPerOp, true), x.HotNsPerOp, x.AllocsPerOp)
	}
	p("")
	p("The tool definitions of a run's first model request when the whole group is offered (JSON `[{name, description, parameters}]`, tokens ≈ bytes / 4), and the wall time of that one-turn run:")
	p("")
	p("| tools offered | bytes | ≈ tokens | bytes per tool | one-turn run |")
	p("|---:|---:|---:|---:|---:|")
	for _, x := range r.ToolDefs {
		p("| %s | %s | %s | %.0f | %.2f ms |", integer(x.Tools), integer(x.Bytes), integer(x.TokensEstimate), x.BytesPerTool, x.RunMs)
	}
	p("")
}

// mdFacades writes the first request's size with the tools offered as facades and flat.
func (r *Report) mdFacades(b *mdBuilder) {
	p := b.p
	if f := r.Facades; f.BytesWith > 0 {
		p("The first request of a loop offering %d tools as %d facades of %d, and flat:", f.Facades*f.ToolsPerFacade, f.Facades, f.ToolsPerFacade)
		p("")
		p("| offered as | bytes | ≈ tokens |")
		p("|---|---:|---:|")
		p("| %d facades | %s | %s |", f.Facades, integer(f.BytesWith), integer(f.TokensWith))
		p("| %d tools, flat | %s | %s |", f.Facades*f.ToolsPerFacade, integer(f.BytesWithout), integer(f.TokensWithout))
		p("| **ratio** | **%.0f×** | |", f.Ratio)
		p("")
	}
	if f, flat := r.Facades10k, r.Facades10kFlat; f.BytesWith > 0 {
		p("The same at %s tools: %d facades of %d, offered side by side and under %d parent facades of %d each (the tree a catalogue of thousands of tools is organised as):",
			integer(f.Facades*f.ToolsPerFacade), f.Facades, f.ToolsPerFacade, f.Domains, f.Facades/max(1, f.Domains))
		p("")
		p("| offered as | bytes | ≈ tokens | vs flat |")
		p("|---|---:|---:|---:|")
		p("| %d parent facades | %s | %s | **%.0f×** |", f.Domains, integer(f.BytesWith), integer(f.TokensWith), f.Ratio)
		if flat.BytesWith > 0 {
			p("| %d facades side by side | %s | %s | %.0f× |", flat.Facades, integer(flat.BytesWith), integer(flat.TokensWith), flat.Ratio)
		}
		p("| %s tools, flat | %s | %s | |", integer(f.Facades*f.ToolsPerFacade), integer(f.BytesWithout), integer(f.TokensWithout))
		p("")
	}
}

// mdRegistration writes how long fake workers take to register at once.
func (r *Report) mdRegistration(b *mdBuilder) {
	p := b.p
	g := r.Registration
	p("Registration: %d fake workers, each on its own connection, register the built-in math group (one facade over ten operations) at the same moment with a fresh in-process core:", g.Workers)
	p("")
	p("| | median over rounds |")
	p("|---|---:|")
	p("| all %d registered (start to last acknowledgement) | %.1f ms |", g.Workers, g.TotalMs)
	p("| one worker: dial, stream, register, ack (p50) | %.1f ms |", g.P50Ms)
	p("| slowest worker | %.1f ms |", g.MaxMs)
	if l := r.RegistrationLarge; l.Workers > 0 {
		p("| all %d registered at once (measured in the first round) | %.1f ms |", l.Workers, l.TotalMs)
		p("| one of the %d (p50) / the slowest | %.1f / %.1f ms |", l.Workers, l.P50Ms, l.MaxMs)
	}
	p("")
}

// mdPeers writes toolmesh's loop against eino's, if it was measured.
func (r *Report) mdPeers(b *mdBuilder) {
	p := b.p
	if pr := r.Peers; len(pr.Rounds) > 0 {
		p("## The loop against eino")
		p("")
		p("toolmesh's loop (`bench/cmd/looppeer`) and cloudwego/eino's ReAct agent (`bench/peers/eino`, a module of its own): %s.", pr.Method)
		p("")
		p("| round | toolmesh p50 | eino p50 | p50 ratio | toolmesh runs/s | eino runs/s | throughput ratio | allocs per run, toolmesh / eino |")
		p("|---|---:|---:|---:|---:|---:|---:|---:|")
		for i, x := range pr.Rounds {
			p("| %d | %s | %s | %.2f× | %s | %s | %.2f× | %.0f / %.0f |", i+1, dur(x.Toolmesh.P50us), dur(x.Eino.P50us), x.P50Ratio,
				count(x.Toolmesh.PerSecond), count(x.Eino.PerSecond), x.ThroughputRatio, x.Toolmesh.AllocsPerRun, x.Eino.AllocsPerRun)
		}
		p("| **median** | | | **%.2f×** | | | **%.2f×** | |", pr.P50Ratio, pr.ThroughputRatio)
		p("")
	}
}

// mdTelemetry writes the spans the OTLP receiver got from the traced hop.
func (r *Report) mdTelemetry(b *mdBuilder) {
	p := b.p
	t := r.Telemetry
	p("## Telemetry of the traced hop")
	p("")
	p("Spans the in-benchmark OTLP receiver got (%s calls on the traced hop):", integer(int(t.TracedCalls)))
	p("")
	p("| service | spans |")
	p("|---|---:|")
	for _, s := range t.Services {
		p("| %s | %s |", s.Service, integer(int(s.Spans)))
	}
	p("")
	if t.TracedCalls > 0 {
		p("Per traced call (warm-ups and the profile included): %.2f spans from this process, %.2f from the worker.", float64(t.BenchSpans)/float64(t.TracedCalls), float64(t.WorkerSpans)/float64(t.TracedCalls))
		p("")
	}
	if t.WorkerSpans == 0 {
		p("The worker sent no span (was bin/toolworker built from this tree?), so hop+otel traces the orchestrator's side only.")
		p("")
	}
}

// mdProfiles writes a digest of each profile taken for a missed goal.
func (r *Report) mdProfiles(b *mdBuilder) {
	p := b.p
	if len(r.Profiles) > 0 {
		p("## Profiles of missed goals")
		p("")
		for _, s := range r.Profiles {
			p("### %s at concurrency %d, %.0f s (`go tool pprof %s`)", s.Variant, r.Method.Concurrency, s.Seconds, s.Path)
			p("")
			if s.Note != "" {
				p("%s", s.Note)
				p("")
			}
			if len(s.Buckets) > 0 {
				p("CPU of this process by kind of code (flat): %s.", shares(s.Buckets))
				p("")
			}
			if len(s.TopToolmesh) > 0 {
				p("toolmesh functions by cumulative CPU: %s.", shares(s.TopToolmesh[:min(15, len(s.TopToolmesh))]))
				p("")
			}
			if len(s.TopFlat) > 0 {
				p("Top functions by own CPU: %s.", shares(s.TopFlat))
				p("")
			}
		}
	}
}

// mdVariants writes a sentence on what each variant measures.
func (r *Report) mdVariants(b *mdBuilder) {
	p := b.p
	p("## What each variant measures")
	p("")
	for _, v := range r.Variants {
		p("* **%s** (per %s): %s.", v.Name, v.Unit, r.rowSummary(v))
	}
	p("")
	p("latest.json spells out each variant's path in `measures`.")
	p("")
}

// mdReference writes the numbers measured before toolmesh existed.
func mdReference(b *mdBuilder) {
	p := b.p
	p("## Reference numbers (measured before toolmesh existed, 2-core machine of this kind, ~100-byte arguments)")
	p("")
	p("| | p50 | throughput at c32 |")
	p("|---|---:|---:|")
	p("| raw grpc-go unary | 78 µs | 33k/s |")
	p("| grpc-go with 4 metadata keys and otelgrpc tracing | 137 µs | 15k/s |")
	p("| Go MCP SDK, streamable HTTP | 424 µs | 2.4k/s |")
	p("| Go MCP SDK, stdio | 294 µs | 3.3k/s |")
	p("| in-process | 2.4 µs | |")
	p("")
}

// mdCaveats writes the caveats, the report's last section.
func mdCaveats(b *mdBuilder) {
	p := b.p
	p("## Caveats")
	p("")
	for _, c := range caveats {
		p("* %s", c)
	}
}

var caveats = []string{
	"Two shared cores run everything (this process, the variant's peer, the OTLP receiver), so throughput is CPU-bound and counts both sides of a call; interleaved rounds spread the machine's noise over all variants alike.",
	"The limit moves toolmesh's own ToolWorkerService messages through a hand-written handler (bench/cmd/rawadd), so the ratios isolate toolmesh's machinery, not protobuf.",
	"The hop starts at the router (router, decorators.Default(), worker SDK): the loop's per-call work is in the loop rows, and decorators.Telemetry only in hop+otel.",
	"At concurrency 1 this VM's wake-up latency is bimodal (the limit's p50 sits near 80 µs or near 160 µs), so each round's latency phase alternates between the variants in slices whose first call is not recorded.",
	"Allocations are this process's runtime.MemStats deltas per call: the client side, plus the in-process orchestrator for loop-grpc; background goroutines add a little to all.",
	"The scripted model (templates, streamed chunks, a copy of each of the last 1000 requests) is timed alone in the loop table; a real provider's client would cost HTTP and JSON parsing instead.",
	"Memory per open run is an RSS delta, heap not yet returned and goroutine stacks included, and varies by a few KiB between rounds.",
	"The MCP client keeps up to 64 idle HTTP connections per host (net/http's default is 2), the setting most favourable to it at concurrency 32; the MCP server runs with the SDK's defaults.",
	"p99 at concurrency 1 rests on at most a few thousand calls per round (a few hundred in quick mode, a few dozen runs for the loop variants), so it is rough.",
}

// rowSummary is what a variant's row measures, in a sentence; VariantResult.Measures,
// in latest.json, spells the path out.
func (r *Report) rowSummary(v VariantResult) string {
	switch v.Name {
	case VLimit:
		return "a raw grpc-go unary Invoke of add to bench/cmd/rawadd, a hand-written handler: the floor the hop is judged against"
	case VLimitMD:
		return "the limit call plus the four context entries as metadata, encoded as toolmesh encodes them; informative, not a goal"
	case VHop:
		return "the remote add from router.Tool in decorators.Default(), called as the loop calls a tool, over gRPC to bin/toolworker and back, telemetry off"
	case VHopOTel:
		return "the hop with telemetry on as cmd/orchestrator turns it on, both processes exporting in batches to an in-benchmark OTLP receiver"
	case VHopMTLS:
		return "the hop with mutual TLS on both sides (SPIFFE identities from a development CA), on a long-lived connection, telemetry off"
	case VMCPHTTP:
		return "tools/call of add with the Go MCP SDK, one session, to bench/cmd/mcpadd over streamable HTTP"
	case VMCPStdio:
		return "the same tools/call over stdio, bench/cmd/mcpadd a child process"
	case VMCPGroup:
		return "the orchestrator's MCP hop: mcpadd's add as an MCP group in the run's decorator chain, over streamable HTTP"
	case VMCPEverything:
		return "the same MCP hop to the echo tool of @modelcontextprotocol/server-everything (Node.js), over streamable HTTP"
	case VInProcess:
		return "a direct Go call: decode the JSON arguments, add, encode the result"
	case VLoopGRPC:
		return fmt.Sprintf("a whole Run over gRPC on the in-process core, the scripted model calling add %d times, one call per turn, then answering", r.Loop.ToolCalls)
	case VLoopNested:
		return fmt.Sprintf("the same Run with the %d calls made by one agentic tool's nested loop: one level of nesting", r.Loop.ToolCalls)
	case VLoopMemory:
		return "the loop-grpc Run on a core that journals it in memory (the orchestrator's default; not durable)"
	case VLoopSQLite:
		return "the loop-grpc Run on a core that journals it in SQLite: every commit on disk before it is acknowledged (commit log written with O_DSYNC and O_DIRECT, through io_submit)"
	case VLoopPostgres:
		return "the loop-grpc Run on a core that journals it in a private PostgreSQL with fsync on and synchronous_commit on"
	case VLoopInProc:
		return fmt.Sprintf("loop.Run in this process with the same model and %d turns, add a local no-op: the loop's own cost", r.Loop.ToolCalls)
	default:
		return v.Measures
	}
}

func peerOf(name string) string {
	switch name {
	case VLimit, VLimitMD:
		return "bench/cmd/rawadd"
	case VHop, VHopOTel, VHopMTLS:
		return "bin/toolworker"
	case VMCPHTTP, VMCPStdio, VMCPGroup:
		return "bench/cmd/mcpadd"
	case VMCPEverything:
		return "mcp-server-everything (node)"
	case VLoopGRPC, VLoopNested, VLoopMemory, VLoopSQLite, VLoopPostgres:
		return "bin/toolworker (the orchestrator is in this process)"
	default:
		return "none"
	}
}

func whose(name string) string {
	switch name {
	case VLoopGRPC, VLoopNested, VLoopMemory, VLoopSQLite, VLoopPostgres:
		return "client + in-process orchestrator, per run"
	case VLoopInProc:
		return "the loop, per run"
	case VHop, VHopOTel, VHopMTLS:
		return "orchestrator side (router, decorators, gRPC client)"
	case VInProcess:
		return "the call itself"
	default:
		return "client"
	}
}

func perRound(v VariantResult, f func(RoundResult) string) string {
	out := make([]string, len(v.Rounds))
	for i, x := range v.Rounds {
		out[i] = f(x)
	}
	if v.Error != "" {
		out = append(out, "failed: "+oneLine(v.Error))
	}
	return strings.Join(out, ", ")
}

func dur(us float64) string {
	switch {
	case math.IsNaN(us) || us == 0:
		return "–"
	case us >= 10000:
		return fmt.Sprintf("%.1f ms", us/1000)
	case us >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	case us >= 10:
		return fmt.Sprintf("%.0f µs", us)
	default:
		return fmt.Sprintf("%.2f µs", us)
	}
}

func count(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	default:
		return fmt.Sprintf("%.1f", x)
	}
}

// integer writes n with thousands separators: 10,000.
func integer(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + integer(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func num1(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f", x)
}

func times(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

func vs(x, base float64, ok bool) string {
	if !ok || base == 0 {
		return "–"
	}
	return times(x / base)
}

func shares(s []share) string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%s %.1f%%", x.Name, x.Percent)
	}
	return strings.Join(out, "; ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// cpuShare is the flood process's CPU as a share of one core over its flood.
func cpuShare(n floodCounts) string {
	if n.Seconds <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*n.CPUSeconds/n.Seconds)
}
