package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/wire"
)

// Run runs the benchmark cfg describes and returns its report. Variants run in
// round-robin rounds (A, B, C, … then again) so that drift of the machine affects all of
// them alike; every metric is the median over the rounds.
//
// A variant that fails stops being measured and is listed in Report.Failures; Run then
// returns the report and an error. A missed goal is not an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	rep := newReport(cfg, started)
	e, err := setup(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: setup: %w", err)
	}
	defer e.close()
	rep.Machine.DiskSyncWriteUs, rep.Machine.DiskSyncWriteIdleUs = e.diskSyncUs, e.diskSyncIdleUs

	r := &runner{cfg: cfg, e: e, rep: rep}
	e.progress("setup: routing tables of %v tools", cfg.ScaleSizes)
	defer r.closeTables()
	if err := r.routingTables(ctx); err != nil {
		return nil, err
	}
	r.measureFacades(ctx)
	if err := r.prepareRounds(); err != nil {
		return nil, err
	}

	for round := 1; round <= cfg.Rounds; round++ {
		if err := ctx.Err(); err != nil {
			return nil, err // interrupted: no report rather than a partial one
		}
		r.round(ctx, round)
	}

	r.aggregate(ctx)
	r.profileMisses(ctx)
	rep.explainMisses()

	// Spans: stop the traced worker (it flushes on exit, if it traces) and flush ours.
	e.progress("telemetry: flushing spans")
	rep.Telemetry = e.flushTelemetry(r.calls[VHopOTel])

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Machine.LoadAtEnd = loadAvg()
	rep.DurationSeconds = time.Since(started).Seconds()
	if len(rep.Failures) > 0 {
		return rep, errors.New("bench: " + rep.Failures[0])
	}
	return rep, nil
}

// runner is a benchmark run under way: its environment, the report it fills in, and
// what the rounds gather before they are aggregated into the report.
type runner struct {
	cfg Config
	e   *env
	rep *Report

	tables     []*routingTable
	comps      []component
	compRounds [][]float64 // by component, one figure a round
	failed     map[string]bool
	calls      map[string]int64 // calls made, by variant
	results    map[string]*VariantResult
	routing    map[int]*RoutingRow // by table size
}

// closeTables closes the routing tables' routers.
func (r *runner) closeTables() {
	for _, t := range r.tables {
		t.router.Close()
	}
}

// routingTables builds a routing table for each of the sizes cfg asks for and measures
// the tool definitions a run's first request carries from each, up to a group's bound.
func (r *runner) routingTables(ctx context.Context) error {
	cfg, rep := r.cfg, r.rep
	r.tables = make([]*routingTable, 0, len(cfg.ScaleSizes))
	for _, n := range cfg.ScaleSizes {
		if !cfg.wants("routing") {
			break
		}
		t, err := newRoutingTable(n)
		if err != nil {
			return fmt.Errorf("bench: routing table of %d tools: %w", n, err)
		}
		r.tables = append(r.tables, t)
		if n > wire.MaxGroupTools {
			continue // one run is offered one group: the definitions are measured up to a group's bound
		}
		row, err := measureToolDefs(ctx, t)
		if err != nil {
			rep.fail("tool definitions", err)
			continue
		}
		rep.ToolDefs = append(rep.ToolDefs, row)
	}
	return nil
}

// measureFacades measures the first request of a loop offered 1,000 tools as facades, and
// 10,000 under parent facades and side by side, each against the same tools flat.
func (r *runner) measureFacades(ctx context.Context) {
	cfg, rep := r.cfg, r.rep
	for _, f := range []struct {
		dst                     *FacadeResult
		facades, tools, domains int
	}{{&rep.Facades, 10, 100, 0}, {&rep.Facades10k, 100, 100, 10}, {&rep.Facades10kFlat, 100, 100, 0}} {
		if !cfg.wants("facades") {
			break
		}
		with, without, err := firstRequestTools(ctx, f.facades, f.tools, f.domains)
		if err != nil {
			rep.fail("facades", err)
			continue
		}
		*f.dst = FacadeResult{Facades: f.facades, ToolsPerFacade: f.tools, Domains: f.domains, BytesWith: len(with), BytesWithout: len(without),
			TokensWith: len(with) / 4, TokensWithout: len(without) / 4, Ratio: float64(len(without)) / float64(len(with))}
	}
}

// prepareRounds sets up what the rounds gather: the hop's components, a result per
// variant and a row per routing table.
func (r *runner) prepareRounds() error {
	comps, err := hopComponents()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !r.cfg.wants("components") {
		comps = nil
	}
	r.comps = comps
	r.compRounds = make([][]float64, len(comps))

	r.failed = map[string]bool{}
	r.calls = map[string]int64{}
	r.results = map[string]*VariantResult{}
	for _, v := range r.e.variants {
		r.results[v.name] = &VariantResult{Name: v.name, Unit: v.unit, Measures: v.measures}
	}
	r.routing = map[int]*RoutingRow{}
	for _, t := range r.tables {
		r.routing[t.size] = &RoutingRow{Tools: t.size}
	}
	return nil
}

// round runs one round: the variants, then every other measurement cfg asks for.
func (r *runner) round(ctx context.Context, round int) {
	r.roundVariants(ctx, round)
	r.roundComponents(ctx)
	r.roundLookups(round)
	r.roundRegistration(ctx, round)
	r.roundTenants(ctx, round)
	r.roundPeers(ctx, round)
	r.roundMemory(ctx, round)
	r.roundResume(ctx, round)
}

// roundVariants measures every variant not yet failed and adds its figures to its result.
func (r *runner) roundVariants(ctx context.Context, round int) {
	cfg, e := r.cfg, r.e
	roundResults := runRound(ctx, e.variants, cfg, r.failed, r.calls, func(v *variant, err error) {
		r.failed[v.name] = true
		r.results[v.name].Error = err.Error()
		r.rep.fail("variant "+v.name, err)
		e.progress("round %d/%d  %-12s FAILED: %v", round, cfg.Rounds, v.name, err)
	})
	for _, v := range e.variants {
		rr, ok := roundResults[v.name]
		if !ok {
			continue
		}
		r.results[v.name].Rounds = append(r.results[v.name].Rounds, rr)
		e.progress("round %d/%d  %-12s p50 %9s  p99 %9s  %8.0f %s/s at c%d  CPU/%s %7s + %7s  %6.1f allocs",
			round, cfg.Rounds, v.name, fmtUs(rr.Latency.P50us), fmtUs(rr.Latency.P99us), rr.Throughput.PerSecond, v.unit,
			cfg.Concurrency, v.unit, fmtUs(rr.Throughput.SelfCPUus), fmtUs(rr.Throughput.PeerCPUus), rr.Latency.AllocsPerOp)
	}
}

// roundComponents times each piece of a hop alone, and the scripted model.
func (r *runner) roundComponents(ctx context.Context) {
	cfg, rep := r.cfg, r.rep
	for i, c := range r.comps {
		x, err := measureComponent(c, cfg.LookupTime/2)
		if err != nil {
			rep.fail("component", err)
			continue
		}
		r.compRounds[i] = append(r.compRounds[i], x)
	}
	// The scripted model's own cost, to tell it from the loop's.
	if !cfg.wants(VLoopGRPC) {
		// No loop row to explain.
	} else if m, err := measureModel(ctx, r.e, cfg); err == nil {
		rep.Loop.ModelRounds = append(rep.Loop.ModelRounds, m)
	}
}

// roundLookups times lookups in each routing table.
func (r *runner) roundLookups(round int) {
	for _, t := range r.tables {
		lr, err := t.measureLookup(r.cfg.LookupTime)
		if err != nil {
			r.rep.fail(fmt.Sprintf("routing lookup, %d tools", t.size), err)
			continue
		}
		r.routing[t.size].Rounds = append(r.routing[t.size].Rounds, lr)
	}
	r.e.progress("round %d/%d  routing lookup %s", round, r.cfg.Rounds, fmtLookups(r.routing, r.tables))
}

// roundRegistration times fake workers registering at once: many of them in the first
// round, when asked for, then the usual number.
func (r *runner) roundRegistration(ctx context.Context, round int) {
	cfg, e, rep := r.cfg, r.e, r.rep
	if !cfg.wants("registration") {
		// Not asked for.
	} else if round == 1 && cfg.RegisterWorkersLarge > 0 {
		if reg, err := measureRegistration(ctx, cfg.RegisterWorkersLarge); err != nil {
			rep.fail("registration of many", err)
		} else {
			rep.RegistrationLarge = reg
			e.progress("round %d/%d  registration of %d workers: %.1f ms", round, cfg.Rounds, reg.Workers, reg.TotalMs)
		}
	}
	if !cfg.wants("registration") {
		// Not asked for.
	} else if reg, err := measureRegistration(ctx, cfg.RegisterWorkers); err != nil {
		rep.fail("registration", err)
	} else {
		rep.Registration.Rounds = append(rep.Registration.Rounds, reg)
		e.progress("round %d/%d  registration of %d workers: %.1f ms", round, cfg.Rounds, reg.Workers, reg.TotalMs)
	}
}

// roundTenants measures the quiet tenant's latency alone and while the noisy tenant
// floods.
func (r *runner) roundTenants(ctx context.Context, round int) {
	cfg, rep := r.cfg, r.rep
	if !cfg.wants("tenants") {
		// Not asked for.
	} else if tr, err := r.e.measureTenants(ctx); err != nil {
		rep.fail("tenant isolation", err)
	} else {
		rep.Tenants.Rounds = append(rep.Tenants.Rounds, tr)
		r.e.progress("round %d/%d  quiet tenant p99 %s alone, %s while the noisy tenant floods: %.2f× (flood: %d runs admitted, %d refused, %d oversized and %d long requests refused)",
			round, cfg.Rounds, fmtUs(tr.Alone.P99us), fmtUs(tr.Flooded.P99us), tr.Ratio, tr.Flood.Admitted, tr.Flood.Refused, tr.Flood.BigRefused, tr.Flood.HistoryRefused)
	}
}

// roundPeers measures toolmesh's loop against eino's, when both peers are built.
func (r *runner) roundPeers(ctx context.Context, round int) {
	cfg, rep := r.cfg, r.rep
	if cfg.Bins.LoopPeer != "" && cfg.Bins.Eino != "" && cfg.wants("peers") {
		if pr, err := measurePeers(ctx, cfg, round); err != nil {
			rep.fail("loop peers", err)
		} else {
			rep.Peers.Rounds = append(rep.Peers.Rounds, pr)
			r.e.progress("round %d/%d  loop peers: toolmesh p50 %s, %.0f run/s; eino p50 %s, %.0f run/s at c%d: %.2f× the p50, %.2f× the throughput",
				round, cfg.Rounds, fmtUs(pr.Toolmesh.P50us), pr.Toolmesh.PerSecond, fmtUs(pr.Eino.P50us), pr.Eino.PerSecond, peerConcurrency, pr.P50Ratio, pr.ThroughputRatio)
		}
	}
}

// roundMemory measures the orchestrator's memory per open run and a bare grpc-go
// server's per open stream, in the first RSSRounds rounds.
func (r *runner) roundMemory(ctx context.Context, round int) {
	cfg, e, rep := r.cfg, r.e, r.rep
	if round <= cfg.RSSRounds && cfg.wants("memory") {
		m, err := measureMemory(ctx, cfg, cfg.OpenRuns)
		if err != nil {
			rep.fail("orchestrator memory", err)
		} else {
			rep.Memory.Rounds = append(rep.Memory.Rounds, m)
			e.progress("round %d/%d  orchestrator RSS %d → %d KiB with %d open runs: %.1f KiB/run", round, cfg.Rounds, m.BeforeKiB, m.AfterKiB, m.Runs, m.KiBPerRun)
		}
		if f, err := measureMemoryFloor(ctx, cfg, cfg.OpenRuns); err != nil {
			rep.fail("memory floor", err)
		} else {
			rep.Memory.FloorRounds = append(rep.Memory.FloorRounds, f)
			e.progress("round %d/%d  bare grpc-go server RSS %d → %d KiB with %d open streams: %.1f KiB/stream", round, cfg.Rounds, f.BeforeKiB, f.AfterKiB, f.Runs, f.KiBPerRun)
		}
	}
}

// roundResume measures the resume after a crash, in the first ResumeRounds rounds.
func (r *runner) roundResume(ctx context.Context, round int) {
	cfg, rep := r.cfg, r.rep
	if round <= cfg.ResumeRounds && cfg.wants("resume") {
		for _, rr := range measureResumes(ctx, cfg, rep) {
			rep.Resume.Rounds = append(rep.Resume.Rounds, rr)
			r.e.progress("round %d/%d  resume on %s: %d runs (%.0f events each) opened in %.1f s; after SIGKILL, serving in %.2f s, all resumed and ended in %.2f s",
				round, cfg.Rounds, rr.Store, rr.Runs, rr.EventsPerRun, rr.OpenSeconds, rr.ServingSeconds, rr.ResumedSeconds)
		}
	}
}

// aggregate turns what the rounds gathered into the report's figures, ratios and
// verdicts.
func (r *runner) aggregate(ctx context.Context) {
	cfg, e, rep := r.cfg, r.e, r.rep
	for _, v := range e.variants {
		res := r.results[v.name]
		res.aggregate()
		res.Calls = r.calls[v.name]
		rep.Variants = append(rep.Variants, *res)
	}
	for _, t := range r.tables {
		row := r.routing[t.size]
		row.aggregate()
		rep.Routing = append(rep.Routing, *row)
	}
	for i, c := range r.comps {
		rep.Components = append(rep.Components, ComponentResult{ID: c.ID, Name: c.Name, Where: c.Where, Us: median(r.compRounds[i]), Rounds: r.compRounds[i]})
	}
	if e.hopLocal != nil && cfg.wants(VHop) {
		// The worker side's allocations: the hop with the worker in this process, less
		// the orchestrator side's.
		if l, err := measureLatency(ctx, e.hopLocal.call, cfg.LatencyCalls, cfg.LatencyTime); err == nil {
			rep.HopBothSides = l
		}
	}
	rep.Registration.aggregate()
	rep.Memory.aggregate()
	rep.Resume.aggregate()
	rep.Tenants.aggregate()
	rep.Peers.aggregate()
	rep.computeLoop(cfg)
	if e.countEvents != nil {
		if n, err := e.countEvents(ctx); err == nil {
			rep.Loop.EventsPerRun = n
		}
	}
	rep.computeRatios()
	rep.evaluateGoals()
}

// profileMisses profiles the variant behind each missed toolmesh goal, to say what
// dominates.
func (r *runner) profileMisses(ctx context.Context) {
	cfg, e, rep := r.cfg, r.e, r.rep
	if cfg.ProfileTime > 0 && cfg.wants("profiles") {
		for _, name := range rep.profileTargets() {
			v := e.variant(name)
			if v == nil || r.failed[name] {
				continue
			}
			if name == VHop && e.hopLocal != nil {
				// Both sides of the hop in one profile: the worker SDK runs in this process.
				v = e.hopLocal
			}
			e.progress("profile: %s for %s (a goal was missed)", v.name, cfg.ProfileTime)
			s, err := profileVariant(ctx, v, cfg, cfg.ProfileTime)
			if err != nil {
				rep.fail("profile of "+v.name, err)
				continue
			}
			s.Goal = name
			rep.Profiles = append(rep.Profiles, *s)
			r.calls[v.name] += s.Calls
		}
	}
}

// runRound measures every variant not yet failed once: warm-up, then the latency
// phase in slices that alternate between the variants, then each variant's throughput
// phase. A variant that fails is reported through fail and left out of the result.
func runRound(ctx context.Context, vs []*variant, cfg Config, failed map[string]bool, calls map[string]int64, fail func(*variant, error)) map[string]RoundResult {
	live := make([]*variant, 0, len(vs))
	for _, v := range vs {
		if !failed[v.name] {
			live = append(live, v)
		}
	}
	drop := func(v *variant, err error) {
		fail(v, err)
		live = slices.DeleteFunc(live, func(x *variant) bool { return x == v })
	}
	for _, v := range slices.Clone(live) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second+cfg.LatencyTime)
		warm, err := measureLatency(wctx, v.call, cfg.Warmup, cfg.LatencyTime)
		cancel()
		calls[v.name] += int64(warm.Calls)
		if err != nil {
			drop(v, fmt.Errorf("warm-up: %w", err))
		}
	}

	runtime.GC()
	accs := map[string]*latencyAcc{}
	perSlice := max(1, cfg.LatencyCalls/cfg.LatencySlices)
	sliceTime := cfg.LatencyTime / time.Duration(cfg.LatencySlices)
	for range cfg.LatencySlices {
		for _, v := range slices.Clone(live) {
			if accs[v.name] == nil {
				accs[v.name] = &latencyAcc{}
			}
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second+sliceTime)
			err := accs[v.name].run(lctx, v.call, perSlice, sliceTime)
			cancel()
			if err != nil {
				drop(v, fmt.Errorf("latency: %w", err))
			}
		}
	}

	out := map[string]RoundResult{}
	for _, v := range slices.Clone(live) {
		rr := RoundResult{Latency: accs[v.name].result()}
		calls[v.name] += int64(rr.Latency.Calls)
		runtime.GC()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second+cfg.ThroughputTime)
		self0, _ := cpuTime(os.Getpid())
		var peer0 time.Duration
		if v.peer != 0 {
			peer0, _ = cpuTime(v.peer)
		}
		var stats0 runlog.Stats
		if v.stats != nil {
			stats0 = v.stats()
		}
		th, err := measureThroughput(tctx, v.call, cfg.Concurrency, cfg.ThroughputTime, cfg.ThroughputCalls)
		cancel()
		if err != nil {
			drop(v, fmt.Errorf("throughput: %w", err))
			continue
		}
		if v.stats != nil {
			th.Journal = newJournalRound(stats0, v.stats())
		}
		n := float64(th.Calls)
		if self1, err := cpuTime(os.Getpid()); err == nil && self0 > 0 {
			th.SelfCPUus = us(self1-self0) / n
		}
		if v.peer != 0 {
			if peer1, err := cpuTime(v.peer); err == nil && peer0 > 0 {
				th.PeerCPUus = us(peer1-peer0) / n
			}
		}
		calls[v.name] += th.Calls
		rr.Throughput = th
		out[v.name] = rr
	}
	return out
}

// measureModel times the scripted model alone on a request from the middle of a loop
// variant's run: the part of a loop iteration that a real model's client would replace.
func measureModel(ctx context.Context, e *env, cfg Config) (float64, error) {
	reqs := e.script.Requests()
	var req *llm.Request
	for i := range reqs {
		if len(reqs[i].Messages) >= cfg.LoopToolCalls { // about half-way: user + N/2 (call, result) pairs
			req = &reqs[i]
			break
		}
	}
	if req == nil {
		return 0, errors.New("no loop request recorded")
	}
	fn := func(ctx context.Context) error {
		_, err := llm.Collect(e.script.Stream(ctx, req))
		return err
	}
	l, err := measureLatency(ctx, fn, 500, 50*time.Millisecond)
	if err != nil {
		return 0, err
	}
	return l.P50us, nil
}

func (e *env) variant(name string) *variant {
	for _, v := range e.variants {
		if v.name == name {
			return v
		}
	}
	return nil
}

// flushTelemetry stops the traced worker and flushes the benchmark's own exporters, then
// reads what the receiver got.
func (e *env) flushTelemetry(tracedCalls int64) TelemetryResult {
	if e.workerOn != nil {
		e.workerOn.stop(10 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.telShutdown(ctx)
	t := TelemetryResult{TracedCalls: tracedCalls, Services: e.receiver.counts()}
	for _, s := range t.Services {
		switch s.Service {
		case "toolworker-bench":
			t.WorkerSpans = s.Spans
		case "toolmesh-bench":
			t.BenchSpans = s.Spans
		}
	}
	return t
}

func fmtUs(x float64) string {
	if x >= 1000 {
		return fmt.Sprintf("%.2fms", x/1000)
	}
	return fmt.Sprintf("%.1fµs", x)
}

func fmtLookups(rows map[int]*RoutingRow, tables []*routingTable) string {
	s := ""
	for _, t := range tables {
		rs := rows[t.size].Rounds
		if len(rs) == 0 {
			continue
		}
		s += fmt.Sprintf(" %d: %.0f ns", t.size, rs[len(rs)-1].NsPerOp)
	}
	return s
}
