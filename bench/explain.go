package bench

import (
	"fmt"
	"math"
	"strings"
)

// explainMisses fills Why and Fix of every missed goal from what the run measured: the
// CPU per call on each side, the pieces of a hop timed alone, the loop's breakdown and,
// for toolmesh goals, the CPU profile taken after the rounds. The Fix lines are
// recommendations from the investigation behind this harness; the figures
// in the Why lines are this run's. latest.json keeps them whole; latest.md shows a
// clause of each.
func (r *Report) explainMisses() {
	for i := range r.Goals {
		g := &r.Goals[i]
		if g.Verdict != Missed {
			continue
		}
		e := r.explain(g)
		g.Why, g.Fix, g.whyBrief, g.fixBrief = e.why, e.fix, e.whyBrief, e.fixBrief
	}
}

// explanation is why a goal was missed and what would fix it, in full and in brief.
type explanation struct {
	why, fix           string
	whyBrief, fixBrief string
}

// explain says why goal g was missed and what would fix it, by the kind of goal.
func (r *Report) explain(g *Goal) explanation {
	prof := r.profileDigest(g.profile)
	switch g.ID {
	case "hop-p50", "hop-throughput", "hop-cpu":
		return r.explainHop(g, prof)
	case "hop-otel-p50":
		return r.explainHopOTel(prof)
	case "hop-mtls-p50":
		return r.explainHopMTLS(prof)
	case "mcp-p50", "mcp-throughput":
		return r.explainMCP(g)
	case "loop-overhead":
		return r.explainLoop(prof)
	case "journal-sqlite", "journal-postgres":
		return r.explainJournal(g, prof)
	case "tenant-isolation":
		return r.explainTenants()
	case "memory-per-run":
		return r.explainMemory()
	case "resume-sqlite", "resume-postgres":
		return r.explainResume(g)
	case "routing-10k", "routing-100k":
		return r.explainRouting(g)
	case "facades-10k":
		return r.explainFacades10k()
	case "loop-vs-eino-p50", "loop-vs-eino-throughput":
		return r.explainPeers()
	case "facades-smaller":
		return r.explainFacades()
	}
	return explanation{"measured " + g.Measured + " against " + g.Target + "." + prof, "to be investigated.",
		"measured " + g.Measured + " against " + g.Target, "to be investigated"}
}

// explainHop explains a missed hop goal by the CPU per call on each side of a hop.
func (r *Report) explainHop(g *Goal, prof string) explanation {
	limit, hop := r.measured(VLimit), r.measured(VHop)
	hopFixBrief := "fewer allocations inside gRPC's call path on both sides (stream setup, metadata copies), and fewer context values per call"
	hopFix := "what is left is mostly gRPC's own per-call work and the garbage it makes, on both sides: stream setup, hpack and the base64 of the -bin context entries, the copy of the incoming metadata the worker reads the context from, the deadline's timer on each side. toolmesh's own part is small (no stats handler on the router's connections, the context's metadata encoded without allocating, flat arguments validated in one pass, one context value per call in the worker, its collector tuned for a small live heap); what remains of it is the context values the orchestrator's side adds per call and the protobuf strings of the request."
	brief := fmt.Sprintf("a hop costs %s of CPU per call (this process %s, worker %s) against the limit's %s, and on %d cores that CPU bounds the throughput and, spent in series, the p50",
		dur(hop.SelfCPUus+hop.PeerCPUus), dur(hop.SelfCPUus), dur(hop.PeerCPUus), dur(limit.SelfCPUus+limit.PeerCPUus), r.Machine.NProc)
	why := fmt.Sprintf("at concurrency 32 a hop uses %s of CPU per call (this process %s, worker %s) against the limit's %s (%s + %s): the worker side costs %s more and the orchestrator side %s more, and on %d cores throughput is about cores / CPU per call, while at concurrency 1 the same CPU is spent in series on the critical path.",
		dur(hop.SelfCPUus+hop.PeerCPUus), dur(hop.SelfCPUus), dur(hop.PeerCPUus),
		dur(limit.SelfCPUus+limit.PeerCPUus), dur(limit.SelfCPUus), dur(limit.PeerCPUus),
		dur(hop.PeerCPUus-limit.PeerCPUus), dur(hop.SelfCPUus-limit.SelfCPUus), r.Machine.NProc)
	if v, t, j := r.component("validate"), r.component("typed-add"), r.component("json-add"); !math.IsNaN(v) {
		why += fmt.Sprintf(" Timed alone, validating the arguments costs %s and the typed add %s (decoding the validated arguments, adding, formatting), where rawadd's json.Unmarshal-and-add costs %s.", dur(v), dur(t), dur(j))
	}
	if md := r.Variant(VLimitMD); md.ok() && limit.ok() {
		why += fmt.Sprintf(" Carrying the four context entries is a small part: limit+4md costs %s of CPU per call, %s more than the limit.",
			dur(md.SelfCPUus+md.PeerCPUus), dur(md.SelfCPUus+md.PeerCPUus-limit.SelfCPUus-limit.PeerCPUus))
	}
	why += prof
	if g.ID == "hop-throughput" && limit.ok() {
		target := float64(r.Machine.NProc) * 1e6 / (0.75 * limit.PerSecond)
		why += fmt.Sprintf(" For 0.75× the limit's throughput the hop would have to fit in about %s of CPU per call in all.", dur(target))
		brief += fmt.Sprintf("; 0.75× of the limit needs about %s in all", dur(target))
	}
	return explanation{why, hopFix, brief, hopFixBrief}
}

// explainHopOTel explains a missed traced-hop goal by what tracing adds to the plain hop.
func (r *Report) explainHopOTel(prof string) explanation {
	hop, otel := r.measured(VHop), r.measured(VHopOTel)
	brief := fmt.Sprintf("tracing adds %s of CPU per call in this process and %s in the worker to a plain hop already at %.2f× of the limit",
		dur(otel.SelfCPUus-hop.SelfCPUus), dur(otel.PeerCPUus-hop.PeerCPUus), r.ratioValue("hop p50 / limit p50"))
	why := fmt.Sprintf("tracing adds %s of CPU per call in this process and %s in the worker to the plain hop (%s → %s p50), on top of the plain hop's own %.2f× of the limit.",
		dur(otel.SelfCPUus-hop.SelfCPUus), dur(otel.PeerCPUus-hop.PeerCPUus), dur(hop.P50us), dur(otel.P50us), r.ratioValue("hop p50 / limit p50"))
	if t := r.Telemetry; t.TracedCalls > 0 {
		why += fmt.Sprintf(" Per call, this process exported %.1f spans and the worker %.1f.", float64(t.BenchSpans)/float64(t.TracedCalls), float64(t.WorkerSpans)/float64(t.TracedCalls))
	}
	why += prof
	return explanation{why, "fix the plain hop first (see hop-p50). Tracing costs each side one execute_tool span (with its attributes and its export through the batching processor) and the tool-call metrics; sampling (parentbased_traceidratio) is the lever where full tracing is not needed.",
		brief, "fix the plain hop first, or sample where full tracing is not needed"}
}

// explainHopMTLS explains a missed mutual-TLS goal by what TLS adds to the plain hop.
func (r *Report) explainHopMTLS(prof string) explanation {
	hop := r.measured(VHop)
	mtls := r.measured(VHopMTLS)
	brief := fmt.Sprintf("mutual TLS adds %s of CPU per call in this process and %s in the worker (p50 %s → %s)",
		dur(mtls.SelfCPUus-hop.SelfCPUus), dur(mtls.PeerCPUus-hop.PeerCPUus), dur(hop.P50us), dur(mtls.P50us))
	why := brief + ": on a long-lived connection the handshake is paid once, so what remains is encrypting and decrypting each frame (AES-GCM) and the extra copies through crypto/tls's records." + prof
	return explanation{why, "fewer, larger writes per call (gRPC's write buffer and header frames coalesced) cut the records TLS seals; the cipher itself is hardware-accelerated",
		brief, "fewer, larger TLS records per call"}
}

// explainMCP explains a missed MCP goal: the MCP peer against the limit, the gap the hop's.
func (r *Report) explainMCP(g *Goal) explanation {
	limit, mcpHTTP := r.measured(VLimit), r.measured(VMCPHTTP)
	brief := fmt.Sprintf("the MCP peer measures as expected (p50 %s, %s calls/s; the reference is 424 µs and 2.4k/s), so the gap is the hop's",
		dur(mcpHTTP.P50us), count(mcpHTTP.PerSecond))
	why := fmt.Sprintf("the MCP peer measures as expected (p50 %s and %s calls/s here; the reference is 424 µs and 2.4k/s): the gap is the hop's.",
		dur(mcpHTTP.P50us), count(mcpHTTP.PerSecond))
	if limit.ok() {
		why += fmt.Sprintf(" Against the raw gRPC limit, MCP over streamable HTTP is %.1f× slower at p50 and the limit %.1f× faster in throughput, so the goal is within reach once the hop approaches the limit.",
			mcpHTTP.P50us/limit.P50us, limit.PerSecond/mcpHTTP.PerSecond)
	}
	if g.ID == "mcp-p50" && limit.ok() && mcpHTTP.P50us/limit.P50us < 4 {
		why += " On this machine at concurrency 1 even the raw limit is less than 4× faster than MCP: a ping-pong between two processes pays the VM's wake-up latency twice per call, which no protocol saves."
		brief += fmt.Sprintf(", though even the raw limit is only %.1f× faster than MCP at concurrency 1 on this machine", mcpHTTP.P50us/limit.P50us)
	}
	return explanation{why, "the hop fixes under hop-p50; nothing on the MCP side.", brief, "the hop fixes under hop-p50; nothing on the MCP side"}
}

// explainLoop explains a missed loop goal by what a run costs beyond its hops.
func (r *Report) explainLoop(prof string) explanation {
	hop := r.measured(VHop)
	l := r.Loop
	run, inproc := r.measured(VLoopGRPC), r.measured(VLoopInProc)
	brief := fmt.Sprintf("a run leaves %s per iteration beyond its %d hops, of which the loop itself costs %s in process; the rest is the Run path (%d events per run over the stream) and waiting for wake-ups",
		dur(l.OverheadUs), l.ToolCalls, dur(l.InProcessUs), l.EventsPerRun)
	why := fmt.Sprintf("a run of %d calls takes %s at p50 and %d hops %s, leaving %s per iteration, of which the loop itself costs %s in process (no gRPC, no-op tool) and the scripted model %s per call.",
		l.ToolCalls, dur(run.P50us), l.ToolCalls, dur(float64(l.ToolCalls)*hop.P50us), dur(l.OverheadUs), dur(l.InProcessUs), dur(l.ModelUs))
	if run.ok() && inproc.ok() && hop.ok() {
		runCPU := (run.SelfCPUus - float64(l.ToolCalls)*hop.SelfCPUus) / float64(l.Iterations)
		why += fmt.Sprintf(" In CPU, this process spends %s per iteration on a run over gRPC besides the hops' client side, against %s for the in-process loop: the Run path (%d events per run, each marshalled, framed and written on the stream, then read by the client, which is in this process too) adds about %s of CPU per iteration; the rest of the %s is waiting, since every event and every hop's reply wakes a goroutine at this VM's wake-up latency, with the worker on the same two cores.",
			dur(runCPU), dur(inproc.SelfCPUus/float64(l.Iterations)), l.EventsPerRun, dur(runCPU-inproc.SelfCPUus/float64(l.Iterations)), dur(l.OverheadUs))
	}
	why += prof
	return explanation{why: why, whyBrief: brief, fixBrief: "send fewer, smaller events per call (the stream's writes and the client's wake-ups are most of what is left)",
		fix: "send fewer, smaller events on the hot path (ToolCallStarted and ToolCallFinished of a fast call could travel as one message, usage only with the final result unless the client asks for it): each event is a write on the stream and a wake-up of the client's reader on the same two cores; the loop itself (a few µs an iteration in process) shares the history and tool specs between requests already."}
}

// explainJournal explains a missed journal goal by the records and commits of a journaled run.
func (r *Report) explainJournal(g *Goal, prof string) explanation {
	name, store := VLoopSQLite, "SQLite (a commit log written with O_DSYNC and O_DIRECT, copied to the database)"
	if g.ID == "journal-postgres" {
		name, store = VLoopPostgres, "PostgreSQL (fsync on)"
	}
	base, mem, jr := r.measured(VLoopGRPC), r.measured(VLoopMemory), r.measured(name)
	perRun := func(v *VariantResult) float64 { return 1e6 / v.PerSecond * float64(r.Method.Concurrency) }
	vsMemory := ""
	if mem != nil && mem.PerSecond > 0 {
		vsMemory = fmt.Sprintf(" Against the journal in memory (%s, the orchestrator's default: %s runs/s) it is %.2f×: what durability itself costs.", VLoopMemory, count(mem.PerSecond), jr.PerSecond/mem.PerSecond)
	}
	brief := fmt.Sprintf("with the run journaled in %s a run takes %s at p50 against %s, and %s runs/s against %s at c%d: the waits for the dispatches' commits and the CPU of every record and commit",
		store, dur(jr.P50us), dur(base.P50us), count(jr.PerSecond), count(base.PerSecond), r.Method.Concurrency)
	why := fmt.Sprintf("a run journaled in %s writes about %d records (its request, one model response, dispatch and outcome per call, every event, its end) and waits for the commit of its request, of each dispatch (before the call leaves), of what the next model request depends on, and of its end; the records of every run in flight commit together (one commit-log write, or one PostgreSQL transaction of two statements, for all of them), a run's records packed into one row. At c%d a run takes %s of wall time against %s without a journal, and the process's CPU per run grows from %s to %s: each record is encoded, copied, written and (SQLite) applied to the database by this process, on the same two cores as the worker and the client; on this VM a write system call costs tens of µs and an fdatasync about 100 µs of CPU, and PostgreSQL's server, its WAL writer and its fsyncs share the cores too.%s",
		store, 4*r.Loop.ToolCalls+r.Loop.EventsPerRun+2, r.Method.Concurrency, dur(perRun(jr)), dur(perRun(base)), dur(base.SelfCPUus), dur(jr.SelfCPUus), vsMemory)
	why += prof
	fix, fixBrief := r.journalFix(base, mem, jr, g)
	return explanation{why, fix, brief, fixBrief}
}

// journalFix is what a missed journal goal asks for, from the runs' figures: the CPU a
// run costs (this process's and the worker's) with and without the journal, and how busy
// the cores were.
func (r *Report) journalFix(base, mem, jr *VariantResult, g *Goal) (fix, brief string) {
	target, postgres := journalSQLiteGoal, g.ID == "journal-postgres"
	if postgres {
		target = journalPostgresGoal
	}
	cpu := func(v *VariantResult) float64 { return v.SelfCPUus + v.PeerCPUus }
	cb, cj, n := cpu(base), cpu(jr), float64(r.Machine.NProc)
	if !(cb > 0 && cj > 0 && base.PerSecond > 0 && jr.PerSecond > 0 && n > 0) {
		return "less CPU per record and fewer waits for commits (the runs' CPU was not measured, so which counts more is not known)",
			"less CPU per record and fewer waits for commits"
	}
	budget, added, alone, measured := cb/target-cb, cj-cb, min(cb/cj, 1), jr.PerSecond/base.PerSecond
	var b strings.Builder
	fmt.Fprintf(&b, "two costs, in this run's figures. CPU: this process and the worker spend %s on a run without a journal and %s with it", dur(cb), dur(cj))
	if added > 0 {
		fmt.Fprintf(&b, "; at equal use of the cores that alone gives %.2f×, and %.1f× allows the journal %s of CPU per run where it adds %s", alone, target, dur(budget), dur(added))
		if m := cpu(mem) - cb; m > 0 && m <= added {
			fmt.Fprintf(&b, " (%s of it the journal's own: %s adds as much)", dur(m), VLoopMemory)
		}
	}
	fmt.Fprintf(&b, ". Waiting: the two processes kept the %d cores %.0f%% busy without a journal and %.0f%% with it", r.Machine.NProc, 100*base.PerSecond*cb/1e6/n, 100*jr.PerSecond*cj/1e6/n)
	if postgres {
		b.WriteString(" (PostgreSQL's server, on the same cores, is not counted)")
	}
	if measured < 0.97*alone {
		fmt.Fprintf(&b, ": the runs waited for their commits with cores idle, which takes the measured %.2f× below the %.2f× of CPU alone", measured, alone)
	} else {
		b.WriteString(": the CPU is the whole of the miss")
	}
	if j := jr.Journal; j != nil {
		fmt.Fprintf(&b, ". A run's %.1f writes waited %s of its %s (%.0f%%), %s each: a commit took %s", j.WritesPerRun, dur(j.WaitedUsPerRun), dur(j.RunUs), 100*j.WaitShare, dur(j.WaitUs), dur(j.CommitUs))
		if j.LogUs > 0 {
			fmt.Fprintf(&b, ", %s of it on the commit log", dur(j.LogUs))
			if d, idle := r.Machine.DiskSyncWriteUs, r.Machine.DiskSyncWriteIdleUs; d > 0 && idle > 0 {
				fmt.Fprintf(&b, ", where the same directory took, before the load, %s for a synchronous %d KiB write back to back and %s for one after the disk was idle for %s", dur(d), syncProbeBytes>>10, dur(idle), dur(float64(syncProbeIdle.Microseconds())))
			} else if d > 0 {
				fmt.Fprintf(&b, ", where the same directory took %s for a synchronous %d KiB write before the load", dur(d), syncProbeBytes>>10)
			}
		}
	}
	b.WriteString(". So: less CPU per record in the journal, which every store pays (each model answer, dispatch and outcome as JSON, each event's key and protobuf form, their copies into the store's rows, the garbage collector's work on all of it), then in each store (the commit log's entries and their copy to the database; pgx's encoding); and fewer idle waits (a run waits for a commit at its request, at each dispatch and at its end, and each commit already serves every run waiting)")
	if postgres {
		b.WriteString("; a PostgreSQL server on cores of its own, as in production")
	}
	b.WriteString(".")
	if added <= 0 {
		return b.String(), "fewer idle waits for commits (the journal adds no CPU per run)"
	}
	return b.String(), fmt.Sprintf("less CPU per record (the journal adds %s a run; %.1f× allows %s), and fewer idle waits for commits", dur(added), target, dur(budget))
}

// explainTenants explains a missed tenant-isolation goal by the quiet tenant's p99 alone and flooded.
func (r *Report) explainTenants() explanation {
	t := r.Tenants
	var alone, flooded []float64
	var admitted int64
	for _, x := range t.Rounds {
		alone, flooded = append(alone, x.Alone.P99us), append(flooded, x.Flooded.P99us)
		admitted += x.Flood.Admitted
	}
	brief := fmt.Sprintf("the quiet tenant's p99 goes from %s alone to %s while the noisy tenant floods (%d of its runs admitted within its limit): the admitted runs share the %d cores",
		dur(median(alone)), dur(median(flooded)), admitted, r.Machine.NProc)
	why := brief + "; a refused run costs no resolution, no run and no call, and its RetryInfo grows with the refusals per run that ends, so what the quiet tenant loses is CPU to the noisy tenant's admitted runs (bounded by its model_calls_per_minute) and to the flood process on the same machine."
	return explanation{why, "lower the noisy tenant's max_concurrent_runs and model_calls_per_minute (its admitted runs are its share of the machine), or give each tenant a weighted share of the orchestrator's CPU between model calls instead of a fixed rate.",
		brief, "lower the noisy tenant's limits, or weight the orchestrator's CPU per tenant"}
}

// explainMemory explains a missed memory goal by what an open run holds beyond a bare stream.
func (r *Report) explainMemory() explanation {
	f := r.Memory.FloorKiBPerRun
	return explanation{fmt.Sprintf("%.1f KiB per open run against %.1f KiB for a bare grpc-go server's open stream (its handler's goroutine and gRPC's stream state), measured the same way in the same run: %.1f KiB of the run's own. A run waiting for its model holds the Run stream's goroutine (the model call is made from a few frames on it), gRPC's per-stream state, and the run's own state: its record, its journal in memory, its loop, its request, its process (blackboard, budget), its contexts and their timers (the run's deadline), which the garbage collector's headroom (GOGC=100) roughly doubles in RSS.", r.Memory.KiBPerRun, f, r.Memory.KiBPerRun-f),
		"fold what a waiting run holds into fewer objects (the engine's context values as fields of one call value, the journal's replay maps made only on a resume, the run record's snapshot built when asked for), guided by a heap profile of an orchestrator holding runs open.",
		fmt.Sprintf("%.1f KiB per open run, %.1f above the floor: the run record, journal, loop and contexts", r.Memory.KiBPerRun, r.Memory.KiBPerRun-f),
		"fold what a waiting run holds into fewer objects, guided by a heap profile"}
}

// explainResume explains a missed resume goal by the time each round took to serve and to resume.
func (r *Report) explainResume(g *Goal) explanation {
	store := "sqlite"
	if g.ID == "resume-postgres" {
		store = "postgres"
	}
	var rs []string
	for _, x := range r.Resume.Rounds {
		if x.Store == store {
			rs = append(rs, fmt.Sprintf("serving after %.2f s, every run ended after %.2f s", x.ServingSeconds, x.ResumedSeconds))
		}
	}
	brief := fmt.Sprintf("%s to resume %d runs (%s)", g.Measured, r.Method.ResumeRuns, strings.Join(rs, "; "))
	return explanation{brief + ": the restarted orchestrator opens its journal, takes the leases 16 at a time (a transaction each), and resumes each run as its lease is taken: its request, its last snapshot and the records after it read, its steps replayed without asking the model again, then one more model call and its end committed.",
		"take the leases of many runs in one transaction, and read their journals in one query.", brief, "batch the lease takes and the reads"}
}

// explainRouting explains a missed routing goal by lookups in random order against one name again and again.
func (r *Report) explainRouting(g *Goal) explanation {
	var row RoutingRow
	for _, x := range r.Routing {
		if fmt.Sprintf("routing-%dk", x.Tools/1000) == g.ID {
			row = x
		}
	}
	brief := fmt.Sprintf("a lookup by a random name takes %.0f ns in a table of %s tools, and %.0f ns when one name is looked up again and again: cache and TLB misses on the table's working set, not the map's algorithm",
		row.NsPerOp, integer(row.Tools), row.HotNsPerOp)
	why := brief + ": the map's groups, the name's bytes and the entry each cost a miss once the table outgrows the caches (the harness's own names, read in random order, add theirs)."
	return explanation{why, "a denser table: names interned next to their hashes in one array, the stubs in another, so that a lookup touches two cache lines; and huge pages for it.",
		brief, "a denser table (names interned beside their hashes, stubs in one array)"}
}

// explainFacades10k explains a missed goal on the parent facades of 10,000 tools by their size.
func (r *Report) explainFacades10k() explanation {
	f := r.Facades10k
	return explanation{fmt.Sprintf("the first request offers the %d parent facades as %s bytes against %s bytes for the %s tools flat.",
		f.Domains, integer(f.BytesWith), integer(f.BytesWithout), integer(f.Facades*f.ToolsPerFacade)),
		"shorter facade descriptions, or fewer parents.", fmt.Sprintf("the %d parents take %s bytes", f.Domains, integer(f.BytesWith)), "shorter facade descriptions"}
}

// explainPeers explains a missed goal against eino by the two loops' p50 and throughput.
func (r *Report) explainPeers() explanation {
	p := r.Peers
	var tm, ei []float64
	var tt, et []float64
	for _, x := range p.Rounds {
		tm, ei = append(tm, x.Toolmesh.P50us), append(ei, x.Eino.P50us)
		tt, et = append(tt, x.Toolmesh.PerSecond), append(et, x.Eino.PerSecond)
	}
	brief := fmt.Sprintf("toolmesh's loop p50 %s and %s runs/s against eino's %s and %s runs/s", dur(median(tm)), count(median(tt)), dur(median(ei)), count(median(et)))
	return explanation{brief + ": the loop's own CPU per turn (the request it builds, the arguments it validates, the events it emits).",
		"profile bench/cmd/looppeer (-cpuprofile) and cut the work of a turn.", brief, "cut the loop's work per turn, guided by looppeer's profile"}
}

// explainFacades explains a missed facades goal by the size of the facades against the tools flat.
func (r *Report) explainFacades() explanation {
	f := r.Facades
	return explanation{fmt.Sprintf("the first request offers the %d facades as %s bytes against %s bytes for the %d tools flat: each facade's description and schema cost about %s bytes.",
		f.Facades, integer(f.BytesWith), integer(f.BytesWithout), f.Facades*f.ToolsPerFacade, integer(f.BytesWith/max(1, f.Facades))),
		"shorter facade descriptions, or nesting the facades one level deeper (one facade over the ten).",
		fmt.Sprintf("the %d facades take %s bytes, about %s each", f.Facades, integer(f.BytesWith), integer(f.BytesWith/max(1, f.Facades))),
		"shorter facade descriptions, or one more level of nesting"}
}

// measured returns the named variant's result; a variant that failed or is missing
// comes back empty, its figures NaN, so that the sentences built from it say "–".
func (r *Report) measured(name string) *VariantResult {
	if v := r.Variant(name); v.ok() {
		return v
	}
	nan := math.NaN()
	return &VariantResult{Name: name, P50us: nan, P99us: nan, PerSecond: nan, SelfCPUus: nan, PeerCPUus: nan}
}

// component is the measured time of a hop piece, NaN when it was not measured.
func (r *Report) component(id string) float64 {
	for _, c := range r.Components {
		if c.ID == id {
			return c.Us
		}
	}
	return math.NaN()
}

// profileDigest is a sentence or two from the profile taken for a goal's variant.
func (r *Report) profileDigest(variant string) string {
	for _, s := range r.Profiles {
		if s.Goal != variant || len(s.Buckets) == 0 {
			continue
		}
		var parts []string
		for _, b := range s.Buckets[:min(4, len(s.Buckets))] {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", b.Name, b.Percent))
		}
		out := fmt.Sprintf(" A CPU profile of this process running %s at concurrency 32 is dominated by %s", s.Variant, strings.Join(parts, ", "))
		// Below the entry points (the handler, the decorators, the router's call), which
		// hold everything: the paths that say where the time goes.
		// A wrapper has the cumulative time of what it wraps: of several paths with the
		// same share, only the first is named.
		var tm []string
		last := math.Inf(1)
		for _, f := range s.TopToolmesh {
			if len(tm) == 5 {
				break
			}
			if f.Percent < 0.7*s.TopToolmesh[0].Percent && f.Percent >= 3 && last-f.Percent > 0.3 {
				tm = append(tm, fmt.Sprintf("%s %.0f%%", f.Name, f.Percent))
				last = f.Percent
			}
		}
		if len(tm) > 0 {
			out += "; toolmesh's heaviest paths (cumulative): " + strings.Join(tm, ", ")
		}
		return out + "."
	}
	return ""
}
