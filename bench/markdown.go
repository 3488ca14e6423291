package bench

import (
	"fmt"
	"math"
	"strings"
)

// Markdown renders the report: goals first, then a table per metric.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
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
	p("Method: %d round-robin rounds; in each round every variant runs in turn (%d warm-up calls, then up to %d calls or %.0f ms one at a time for the latency percentiles and the allocations, then %.0f ms with %d calls in flight for the throughput). Every figure is the median over the rounds, and every ratio is computed within each round and then the median taken, so that drift of the (shared) machine cancels. Arguments: %d bytes of JSON; toolmesh calls carry a ToolCallContext of %d keys. All servers listen on 127.0.0.1; peers run as separate processes, so client and server share the %d cores.",
		me.Rounds, me.Warmup, me.LatencyCalls, me.LatencyMs, me.ThroughputMs, me.Concurrency, me.ArgumentsBytes, me.ContextKeys, m.NProc)
	p("")
	if len(r.Failures) > 0 {
		p("## Failures")
		p("")
		for _, f := range r.Failures {
			p("* %s", oneLine(f))
		}
		p("")
	}

	p("## Goals")
	p("")
	p("| goal | target | measured | verdict |")
	p("|---|---|---|---|")
	for _, g := range r.Goals {
		p("| %s | %s | %s | **%s** |", g.Goal, g.Target, g.Measured, g.Verdict)
	}
	p("")
	for _, g := range r.Goals {
		if g.Verdict != Missed {
			continue
		}
		p("* **%s missed.** Why: %s Fix: %s", g.ID, g.Why, g.Fix)
	}
	p("")

	p("## Latency at concurrency 1")
	p("")
	p("| variant | p50 | p99 | p50 vs limit | p50 per round |")
	p("|---|---:|---:|---:|---|")
	limit := r.Variant(VLimit)
	if limit == nil {
		limit = &VariantResult{}
	}
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s | %s |", v.Name, dur(v.P50us), dur(v.P99us), vs(v.P50us, limit.P50us, limit.ok() && v.ok()), perRound(v, func(x RoundResult) string { return dur(x.Latency.P50us) }))
	}
	p("")
	p("## Throughput at concurrency %d", me.Concurrency)
	p("")
	p("| variant | per second | vs limit | per round |")
	p("|---|---:|---:|---|")
	for _, v := range r.Variants {
		p("| %s | %s %s/s | %s | %s |", v.Name, count(v.PerSecond), v.Unit, vs(v.PerSecond, limit.PerSecond, limit.ok() && v.ok()), perRound(v, func(x RoundResult) string { return count(x.Throughput.PerSecond) }))
	}
	p("")
	p("## CPU per call at concurrency %d", me.Concurrency)
	p("")
	p("CPU time used while the throughput phase ran, divided by its calls: this process (`/proc/self/task/*/schedstat`) and the peer process on the other side of the call. On %d cores, throughput is bounded by about %d s / (the sum).", m.NProc, m.NProc)
	p("")
	p("| variant | this process | peer process | sum | peer |")
	p("|---|---:|---:|---:|---|")
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s | %s |", v.Name, dur(v.SelfCPUus), dur(v.PeerCPUus), dur(v.SelfCPUus+v.PeerCPUus), peerOf(v.Name))
	}
	p("")
	if len(r.Components) > 0 {
		p("Pieces of a hop's work, each timed alone in this process (mean CPU per call, median over rounds):")
		p("")
		p("| piece | where | per call |")
		p("|---|---|---:|")
		for _, c := range r.Components {
			p("| %s | %s | %s |", c.Name, c.Where, dur(c.Us))
		}
		p("")
	}
	p("## Allocations per call (this process)")
	p("")
	p("| variant | allocs | bytes | whose |")
	p("|---|---:|---:|---|")
	for _, v := range r.Variants {
		p("| %s | %s | %s | %s |", v.Name, num1(v.AllocsPerOp), count(v.BytesPerOp), whose(v.Name))
	}
	p("")
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
	p("")
	rounds := make([]string, len(l.OverheadRounds))
	for i, x := range l.OverheadRounds {
		rounds[i] = dur(x)
	}
	p("Overhead per iteration by round: %s.", strings.Join(rounds, ", "))
	p("")

	p("## Orchestrator memory per open run")
	p("")
	p("bin/orchestrator with a scripted model whose reply waits an hour; %d Run streams opened with pkg/client over one connection; VmRSS from /proc/<pid>/status before the first run and once every run has sent its RunStarted event (plus 300 ms).", me.OpenRuns)
	p("")
	p("| round | runs | VmRSS before | VmRSS after | per open run | time to open all |")
	p("|---|---:|---:|---:|---:|---:|")
	for i, x := range r.Memory.Rounds {
		p("| %d | %d | %d KiB | %d KiB | %.1f KiB | %.2f s |", i+1, x.Runs, x.BeforeKiB, x.AfterKiB, x.KiBPerRun, x.OpenSeconds)
	}
	p("| **median** | | | | **%.1f KiB** | |", r.Memory.KiBPerRun)
	p("")

	p("## Scaling")
	p("")
	p("Routing-table lookup, `router.Tool(name)` over names in random order (each tool shaped like add: one-line description, two documented number parameters):")
	p("")
	p("| tools registered | ns per lookup (random names) | vs smallest | ns per lookup (one name again and again) | allocs per lookup |")
	p("|---:|---:|---:|---:|---:|")
	for _, x := range r.Routing {
		p("| %s | %.0f | %s | %.0f | %.1f |", integer(x.Tools), x.NsPerOp, vs(x.NsPerOp, r.Routing[0].NsPerOp, true), x.HotNsPerOp, x.AllocsPerOp)
	}
	p("")
	p("Flat means the table's cost does not grow with its size beyond what a bigger working set costs the CPU caches: a logarithmic structure would grow about 4× from 10 to 10,000 entries and a linear one 1,000×, so the goal allows 2×. The same-name column is the control: it keeps the table's algorithm and drops the cache misses.")
	p("")
	p("Tool definitions a run's first model request carries when the whole group is offered (JSON `[{name, description, parameters}]`, the provider-neutral part; tokens estimated as bytes / 4), and the wall time of a one-turn run offering them (resolve, decorate, first request, RunStarted event with every name):")
	p("")
	p("| tools offered | bytes | ≈ tokens | bytes per tool | one-turn run |")
	p("|---:|---:|---:|---:|---:|")
	for _, x := range r.ToolDefs {
		p("| %s | %s | %s | %.0f | %.2f ms |", integer(x.Tools), integer(x.Bytes), integer(x.TokensEstimate), x.BytesPerTool, x.RunMs)
	}
	p("")
	if f := r.Facades; f.BytesWith > 0 {
		p("The same with progressive disclosure: %d tools in %d facades of %d, measured through the loop (the first model request of a run offering them; internal/progressive.FirstRequestTools):", f.Facades*f.ToolsPerFacade, f.Facades, f.ToolsPerFacade)
		p("")
		p("| offered as | bytes | ≈ tokens |")
		p("|---|---:|---:|")
		p("| %d facades | %s | %s |", f.Facades, integer(f.BytesWith), integer(f.TokensWith))
		p("| %d tools, flat | %s | %s |", f.Facades*f.ToolsPerFacade, integer(f.BytesWithout), integer(f.TokensWithout))
		p("| **ratio** | **%.0f×** | |", f.Ratio)
		p("")
	}
	g := r.Registration
	p("Registration: %d fake workers, each on its own connection, open the registry stream and register the built-in math group (one facade over ten operations, as pkg/worker registers it) at the same moment, against a fresh in-process core:", g.Workers)
	p("")
	p("| | median over rounds |")
	p("|---|---:|")
	p("| all %d registered (start to last acknowledgement) | %.1f ms |", g.Workers, g.TotalMs)
	p("| one worker: dial, stream, register, ack (p50) | %.1f ms |", g.P50Ms)
	p("| slowest worker | %.1f ms |", g.MaxMs)
	p("")

	t := r.Telemetry
	p("## Telemetry of the traced hop")
	p("")
	p("Spans received by the in-benchmark OTLP receiver (%s calls were made on the traced hop):", integer(int(t.TracedCalls)))
	p("")
	p("| service | spans |")
	p("|---|---:|")
	for _, s := range t.Services {
		p("| %s | %s |", s.Service, integer(int(s.Spans)))
	}
	p("")
	if t.TracedCalls > 0 {
		p("Per traced call: %.2f spans from this process, %.2f from the worker (the traced calls include warm-ups and the profile, if any).", float64(t.BenchSpans)/float64(t.TracedCalls), float64(t.WorkerSpans)/float64(t.TracedCalls))
		p("")
	}
	if t.WorkerSpans == 0 {
		p("The worker process sent no span (it exports over OTLP/gRPC from its OTEL_* variables; was bin/toolworker built from this tree?), so the hop+otel row traces the orchestrator's side only (otelgrpc client span, rpc.client metrics, traceparent header).")
	} else {
		p("The worker process exported spans too, so the hop+otel row includes tracing on both sides of the hop.")
	}
	p("")

	if len(r.Profiles) > 0 {
		p("## Profiles of missed goals")
		p("")
		for _, s := range r.Profiles {
			p("### %s at concurrency %d, %.0f s (`go tool pprof %s`)", s.Variant, me.Concurrency, s.Seconds, s.Path)
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

	p("## What each variant measures")
	p("")
	for _, v := range r.Variants {
		p("* **%s** (per %s): %s.", v.Name, v.Unit, v.Measures)
	}
	p("")
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
	p("## Caveats")
	p("")
	for _, c := range caveats {
		p("* %s", c)
	}
	return b.String()
}

var caveats = []string{
	"Two cores serve everything: the benchmark process (clients, the in-process orchestrator core, the OTLP receiver) and the peer process of the variant compete for them, so throughput is CPU-bound and counts the work on both sides of a call. The machine is shared; the load averages above show how busy it was, and interleaved rounds spread that noise over all variants alike.",
	"The limit reuses toolmesh's ToolWorkerService messages with a hand-written handler in bench/cmd/rawadd (no custom codec): the raw call moves the same protobuf bytes as the hop minus the request ids, so the ratio isolates toolmesh's machinery, not protobuf.",
	"The hop is measured from the orchestrator's router inward: the router, decorators.Default() and the worker SDK. The loop's own per-call work (events, validation) is in the loop rows. cmd/orchestrator also puts decorators.Telemetry around every tool, a no-op wrapper when telemetry is off; the hop row leaves it out, the hop+otel row has it.",
	"At concurrency 1 a call between two processes pays the VM's wake-up latency on both sides, and on this machine that latency is bimodal: the raw limit's p50 sits near 80 µs or near 160 µs depending on how the scheduler places the two processes (the reference's 78 µs is the lower level). The latency phase of each round is cut into slices that alternate between the variants, so that every variant samples both levels alike, and the first call of each slice is not recorded.",
	"Allocations are runtime.MemStats deltas of this process during the latency phase divided by the calls: the client side for the gRPC, MCP and in-process variants, and for the loop-grpc variant the in-process orchestrator as well as the client. Background goroutines (heartbeats, exporters) add a little to all.",
	"The scripted model is not free: it renders templates, streams chunks, and records every request (a deep copy, keeping the last 1000). Its cost per model call is measured alone and shown in the loop table; a real provider's client would replace it with HTTP and JSON parsing.",
	"The memory per open run is an RSS delta of a Go process: it includes heap the garbage collector has not returned and goroutine stacks, and varies by a few KiB per run between rounds.",
	"The MCP client keeps up to 64 idle HTTP connections per host (net/http's default is 2), the setting most favourable to it at concurrency 32; the MCP server runs with the SDK's defaults (stateful sessions, SSE responses).",
	"p99 at concurrency 1 comes from the calls of one round's latency phase (at most a few thousand, a few hundred in quick mode), so it is rough, and the loop variants' p99 rests on a few dozen runs.",
}

func peerOf(name string) string {
	switch name {
	case VLimit, VLimitMD:
		return "bench/cmd/rawadd"
	case VHop, VHopOTel:
		return "bin/toolworker"
	case VMCPHTTP, VMCPStdio:
		return "bench/cmd/mcpadd"
	case VLoopGRPC:
		return "bin/toolworker (the orchestrator is in this process)"
	default:
		return "none"
	}
}

func whose(name string) string {
	switch name {
	case VLoopGRPC:
		return "client + in-process orchestrator, per run"
	case VLoopInProc:
		return "the loop, per run"
	case VHop, VHopOTel:
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
