package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// scaleGroup is the role of the generated tools of the scaling rows.
const scaleGroup = "scale"

// builtinAdd is the built-in math group's add tool.
func builtinAdd() (tool.Tool, error) {
	for _, t := range examplegroups.MathOperations() {
		if t.Definition().Name == peer.Name {
			return t, nil
		}
	}
	return nil, fmt.Errorf("the built-in math operations have no %s tool", peer.Name)
}

// scaleTools are n tools shaped like add (name, one-line description, two documented
// number parameters): the size of a typical small tool.
func scaleTools(n int) ([]tool.Tool, error) {
	add, err := builtinAdd()
	if err != nil {
		return nil, err
	}
	schema := add.Definition().InputSchema
	out := make([]tool.Tool, n)
	for i := range out {
		out[i] = tool.New(fmt.Sprintf("tool_%05d", i), fmt.Sprintf("Add two numbers: a + b (tool %d of the scaling set)", i), schema,
			func(context.Context, string) (tool.Result, error) { return tool.Text("0"), nil }, tool.Idempotent())
	}
	return out, nil
}

// registration is what a worker serving g sends first on its registration stream, built
// by pkg/worker itself.
func registration(id, address string, g worker.Group) (*toolpb.Registration, error) {
	w, err := worker.New(worker.Options{ID: id, Orchestrator: "unused:1", Capacity: 64, Version: "bench"}, g)
	if err != nil {
		return nil, err
	}
	reg := w.Registration()
	reg.Address = address
	return reg, nil
}

// routingTable is a router holding n registered tools (one fake worker that is never
// called: the router dials lazily, so no connection is made).
type routingTable struct {
	size   int
	router *router.Router
	names  []string // in a fixed random order
}

func newRoutingTable(n int) (*routingTable, error) {
	tools, err := scaleTools(n)
	if err != nil {
		return nil, err
	}
	// The workers are never called, so their addresses are not probed. A group holds at
	// most wire.MaxGroupTools tools: a larger table takes several workers.
	noProbe := func(context.Context, *grpc.ClientConn) error { return nil }
	rt := router.New(router.Options{Logger: slog.New(slog.DiscardHandler), Probe: noProbe, Limits: router.Limits{MaxTools: max(n, 10000)}})
	for i, start := 0, 0; start < n; i, start = i+1, start+wire.MaxGroupTools {
		role := scaleGroup
		if i > 0 {
			role = fmt.Sprintf("%s_%d", scaleGroup, i)
		}
		reg, err := registration(fmt.Sprintf("scale-worker-%d", i), fmt.Sprintf("127.0.0.%d:9", i+1),
			worker.Group{Role: role, Description: "Generated tools of the scaling rows", Tools: tools[start:min(n, start+wire.MaxGroupTools)]})
		if err != nil {
			rt.Close()
			return nil, err
		}
		if _, _, err := rt.Register(reg); err != nil {
			rt.Close()
			return nil, err
		}
	}
	names := make([]string, n)
	for i, t := range tools {
		names[i] = t.Definition().Name
	}
	r := rand.New(rand.NewPCG(uint64(n), 7))
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return &routingTable{size: n, router: rt, names: names}, nil
}

// lookupRound is the cost of router.Tool(name) in one round.
type lookupRound struct {
	Lookups     int     `json:"lookups"`
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	// HotNsPerOp looks the same name up again and again: the table's algorithm without
	// the cache misses of a large table.
	HotNsPerOp float64 `json:"hot_ns_per_op"`
}

// measureLookup calls router.Tool in batches of 256 for about d, alternating a batch of
// the table's names in random order with a batch of one name again and again, and
// reports the median batch of each: a lookup takes tens of nanoseconds, so a batch that a
// preemption or a GC cycle hit says nothing about the table, and alternating exposes both
// kinds of batch to the same conditions.
func (t *routingTable) measureLookup(d time.Duration) (lookupRound, error) {
	const batch = 256
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var random, hot []float64
	hotName := t.names[0]
	start := time.Now()
	k := 0
	for len(random) == 0 || time.Since(start) < d {
		t0 := time.Now()
		for range batch {
			x, err := t.router.Tool(t.names[k])
			if err != nil {
				return lookupRound{}, err
			}
			runtime.KeepAlive(x)
			if k++; k == len(t.names) {
				k = 0
			}
		}
		t1 := time.Now()
		for range batch {
			x, err := t.router.Tool(hotName)
			if err != nil {
				return lookupRound{}, err
			}
			runtime.KeepAlive(x)
		}
		random = append(random, float64(t1.Sub(t0).Nanoseconds())/batch)
		hot = append(hot, float64(time.Since(t1).Nanoseconds())/batch)
	}
	runtime.ReadMemStats(&after)
	n := 2 * len(random) * batch
	return lookupRound{Lookups: n, NsPerOp: median(random), HotNsPerOp: median(hot), AllocsPerOp: float64(after.Mallocs-before.Mallocs) / float64(n)}, nil
}

// toolDefRow is the size of the tool definitions a run's first model request carries.
type toolDefRow struct {
	Tools          int     `json:"tools"`
	Bytes          int     `json:"bytes"`
	TokensEstimate int     `json:"tokens_estimate"` // bytes / 4
	BytesPerTool   float64 `json:"bytes_per_tool"`
	RunMs          float64 `json:"run_ms"` // median wall time of a one-turn run offering them
}

// measureToolDefs offers the table's whole group to a run through the real server (an
// in-process core: OrchestratorService over loopback, a scripted model answering at
// once) and measures the tool specs of the first model request as specsJSON writes
// them. It also times the run: resolving, decorating and offering n tools.
func measureToolDefs(ctx context.Context, t *routingTable) (toolDefRow, error) {
	prov, err := answersOK("answer")
	if err != nil {
		return toolDefRow{}, err
	}
	// A core over the table's router: startCore makes its own router, so wire this one.
	c, err := startCoreWith(t.router, prov, nil)
	if err != nil {
		return toolDefRow{}, err
	}
	defer c.close()
	cl, err := client.Dial(c.addr, insecure.NewCredentials(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return toolDefRow{}, err
	}
	defer func() { _ = cl.Close() }()
	var walls []float64
	for range 3 {
		t0 := time.Now()
		if _, err := cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "Hello.", ToolGroups: []string{scaleGroup}}, nil); err != nil {
			return toolDefRow{}, fmt.Errorf("run offering %d tools: %w", t.size, err)
		}
		walls = append(walls, float64(time.Since(t0).Microseconds())/1000)
	}
	reqs := prov.Requests()
	if len(reqs) == 0 {
		return toolDefRow{}, fmt.Errorf("the model saw no request")
	}
	if n := len(reqs[0].Tools); n != t.size {
		return toolDefRow{}, fmt.Errorf("the first request carried %d tools, want %d", n, t.size)
	}
	b, err := specsJSON(reqs[0].Tools)
	if err != nil {
		return toolDefRow{}, err
	}
	return toolDefRow{Tools: t.size, Bytes: len(b), TokensEstimate: len(b) / 4, BytesPerTool: float64(len(b)) / float64(t.size), RunMs: median(walls)}, nil
}

// answersOK returns a scripted model that answers every request "ok" at once.
func answersOK(name string) (*scripted.Provider, error) {
	return scripted.New(scripted.Script{Name: name, Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
}

// specsJSON writes a request's tool definitions as [{"name","description","parameters"}],
// the provider-neutral part every provider sends.
func specsJSON(tools []llm.ToolSpec) ([]byte, error) {
	type spec struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	specs := make([]spec, len(tools))
	for i, s := range tools {
		specs[i] = spec{s.Name, s.Description, s.Parameters}
	}
	return json.Marshal(specs)
}

// registrationRound is the time for many workers to register at once.
type registrationRound struct {
	Workers  int     `json:"workers"`
	TotalMs  float64 `json:"total_ms"` // from the start of all to the last acknowledgement
	P50Ms    float64 `json:"p50_ms"`   // per worker: dial, open the stream, register, ack
	MaxMs    float64 `json:"max_ms"`
	Accepted int     `json:"accepted"`
}

// measureRegistration starts a fresh core and has n fake workers, each on its own
// connection, register the built-in math group (one facade over ten operations) through
// the registry stream at the same moment.
func measureRegistration(ctx context.Context, n int) (registrationRound, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	prov, err := answersOK("idle")
	if err != nil {
		return registrationRound{}, err
	}
	c, err := startCore(coreOptions{provider: prov})
	if err != nil {
		return registrationRound{}, err
	}
	defer c.close()
	// The orchestrator probes each worker's address before it accepts the registration:
	// the fake workers share one address whose health service says it serves
	// ToolWorkerService, so the probe is measured with the rest.
	healthAddr, stopHealth, err := serveWorkerHealth()
	if err != nil {
		return registrationRound{}, err
	}
	defer stopHealth()
	math := examplegroups.Math()
	regs := make([]*toolpb.Registration, n)
	conns := make([]*grpc.ClientConn, n)
	for i := range n {
		if regs[i], err = registration(fmt.Sprintf("fake-%03d", i), healthAddr, math); err != nil {
			return registrationRound{}, err
		}
		if conns[i], err = grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return registrationRound{}, err
		}
	}
	defer func() {
		for _, cc := range conns {
			if cc != nil {
				_ = cc.Close()
			}
		}
	}()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		durs    []time.Duration
		last    time.Time
		failure error
	)
	streamCtx, endStreams := context.WithCancel(ctx)
	defer endStreams()
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			t0 := time.Now()
			err := func() error {
				stream, err := toolpb.NewToolRegistryServiceClient(conns[i]).Connect(streamCtx)
				if err != nil {
					return err
				}
				if err := stream.Send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: regs[i]}}); err != nil {
					return err
				}
				resp, err := stream.Recv()
				if err != nil {
					return err
				}
				if !resp.GetAck().GetAccepted() {
					return fmt.Errorf("registration of %s refused: %v", regs[i].GetWorkerId(), resp.GetAck().GetRejections())
				}
				return nil
			}()
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if failure == nil {
					failure = err
				}
				return
			}
			durs = append(durs, now.Sub(t0))
			if now.After(last) {
				last = now
			}
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	if failure != nil {
		return registrationRound{}, failure
	}
	slices.Sort(durs)
	return registrationRound{
		Workers: n, Accepted: len(durs),
		TotalMs: float64(last.Sub(start).Microseconds()) / 1000,
		P50Ms:   float64(percentile(durs, 0.5).Microseconds()) / 1000,
		MaxMs:   float64(durs[len(durs)-1].Microseconds()) / 1000,
	}, nil
}

// serveWorkerHealth serves grpc.health.v1 on loopback, reporting ToolWorkerService as
// SERVING, and returns its address.
func serveWorkerHealth() (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := health.NewServer()
	hs.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(lis) }()
	return lis.Addr().String(), g.Stop, nil
}
