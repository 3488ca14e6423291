package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	meshmcp "github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Variant names, in the order each round runs them.
const (
	VLimit   = "limit"
	VLimitMD = "limit+4md"
	VHop     = "hop"
	VHopOTel = "hop+otel"
	// VHopMTLS is the hop with mutual TLS on both sides (SPIFFE identities, development
	// CA), on a long-lived connection.
	VHopMTLS  = "hop+mtls"
	VMCPHTTP  = "mcp-http"
	VMCPStdio = "mcp-stdio"
	VMCPGroup = "mcp-group"
	// VMCPEverything runs only when Bins.Everything is set.
	VMCPEverything = "mcp-everything"
	VInProcess     = "inproc"
	VLoopGRPC      = "loop-grpc"
	// VLoopNested is loop-grpc with the N calls made by one agentic tool's nested loop.
	VLoopNested = "loop-nested"
	VLoopInProc = "loop-inproc"
	// VLoopMemory, VLoopSQLite and VLoopPostgres are loop-grpc on an orchestrator core
	// that journals its runs: in memory (the orchestrator's default, journal.driver
	// memory), in SQLite (a file) and in a private PostgreSQL; the last runs only where
	// PostgreSQL is installed.
	VLoopMemory   = "loop-memory"
	VLoopSQLite   = "loop-sqlite"
	VLoopPostgres = "loop-postgres"
)

// variant is one way of calling add (or, for the loop variants, of running a loop).
type variant struct {
	name     string
	unit     string // "call" or "run"
	measures string // what exactly one call is, for the report
	call     callFunc
	// peer is the process on the other side of a call (0: none), whose CPU is counted.
	peer int
	// stats, for a variant whose runs are journaled in a SQL store, is what the store
	// counted so far: its commits and the writes' waits for them.
	stats func() runlog.Stats
}

// env is everything the variants need, started once for the whole run: peer processes,
// workers, the in-process orchestrator cores, the OTLP receiver, clients.
type env struct {
	cfg      Config
	cleanups []func()

	receiver *otlpReceiver
	tel      *telemetry.Telemetry
	// telShutdown flushes and stops the providers tel records through.
	telShutdown func(context.Context) error
	off, on     *core
	mtls        *core // the hop with mutual TLS (hop+mtls)
	// quiet is a client of the quiet tenant on mtls, floodArgs bench/cmd/flood's arguments
	// to flood mtls as the noisy tenant.
	quiet     *client.Client
	floodArgs []string
	variants  []*variant
	// workerOn is the toolworker of the traced hop, stopped before the spans are counted;
	// workerMTLS the mutual-TLS core's, which the tenants' floods must leave registered.
	workerOn, workerMTLS *proc
	// hopLocal is the hop to a pkg/worker hosting the math group inside this process: not
	// measured, profiled when a hop goal is missed, so that the profile shows both sides.
	hopLocal *variant
	// countEvents runs the loop-grpc run once and counts its events.
	countEvents func(context.Context) (int, error)

	expected string // the text every add call must return
	script   *scripted.Provider
	// diskSyncUs and diskSyncIdleUs are a synchronous write's time to the journals'
	// directory on the machine before the load (p50, µs), back to back and after the disk
	// was idle (probeSyncWrite).
	diskSyncUs, diskSyncIdleUs float64
}

func (e *env) defer_(f func()) { e.cleanups = append(e.cleanups, f) }

// close stops everything, last started first.
func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

func (e *env) progress(format string, args ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, format+"\n", args...)
	}
}

// setup starts everything. On error, what was started is stopped.
func setup(ctx context.Context, cfg Config) (_ *env, err error) {
	e := &env{cfg: cfg}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if e.expected, err = peer.Add([]byte(Arguments)); err != nil {
		return nil, err
	}
	if e.script, err = loopScript(cfg.LoopToolCalls); err != nil {
		return nil, err
	}
	// A few requests for measureModel; a thousand copies of the loops' histories would be
	// heap that the collector scans in every loop row.
	e.script.Keep(4 * (cfg.LoopToolCalls + 1))

	if err := e.startTelemetry(ctx); err != nil {
		return nil, err
	}
	var s setupPeers
	if err := e.startWorkers(ctx, cfg, &s); err != nil {
		return nil, err
	}
	if err := e.startLocalHop(ctx); err != nil {
		return nil, err
	}
	e.progress("setup: rawadd and mcpadd processes")
	if err := e.startRawAdd(ctx, cfg, &s); err != nil {
		return nil, err
	}
	if err := e.startMCPAdd(ctx, cfg, &s); err != nil {
		return nil, err
	}
	if err := e.setupVariants(ctx, cfg, &s); err != nil {
		return nil, err
	}
	return e, nil
}

// setupPeers are the processes and sessions setup starts for the variants to call; the
// processes' CPU is counted as their peers'.
type setupPeers struct {
	wOff, wOn, wTLS *proc // the toolworkers of the plain, traced and mutual-TLS cores
	raw, mh         *proc // rawadd, and mcpadd over streamable HTTP
	rawConn         *grpc.ClientConn
	url             string // mcpadd's streamable HTTP endpoint
	httpSession     *mcp.ClientSession
	stdioSession    *mcp.ClientSession
	stdioCmd        *exec.Cmd // mcpadd over stdio
	everythingPID   int       // server-everything, 0 when it does not run
}

// startTelemetry starts the OTLP receiver and the telemetry the traced hop records
// through.
func (e *env) startTelemetry(ctx context.Context) (err error) {
	e.progress("setup: OTLP receiver, telemetry")
	if e.receiver, err = startOTLPReceiver(); err != nil {
		return err
	}
	e.defer_(e.receiver.close)
	if e.tel, e.telShutdown, err = e.receiver.telemetry(ctx, "toolmesh-bench"); err != nil {
		return err
	}
	e.defer_(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.telShutdown(sctx)
	})
	return nil
}

// startWorkers starts the plain, traced and mutual-TLS cores, a toolworker process for
// each, and waits until each core has the worker's add.
func (e *env) startWorkers(ctx context.Context, cfg Config, s *setupPeers) (err error) {
	e.progress("setup: orchestrator cores and toolworker processes")
	if e.off, err = startCore(coreOptions{provider: e.script}); err != nil {
		return err
	}
	e.defer_(e.off.close)
	if e.on, err = startCore(coreOptions{provider: e.script, tel: e.tel}); err != nil {
		return err
	}
	e.defer_(e.on.close)
	workerArgs := func(id, orch string) []string {
		return []string{"--id", id, "--groups", examplegroups.MathRole, "--orchestrator", orch, "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn"}
	}
	wOff, err := startProc("toolworker(off)", cfg.Bins.Toolworker, childEnv("OTEL_SDK_DISABLED=true"), workerArgs("bench-off", e.off.addr)...)
	if err != nil {
		return err
	}
	e.defer_(func() { wOff.stop(5 * time.Second) })
	wOn, err := startProc("toolworker(otel)", cfg.Bins.Toolworker, childEnv(
		"OTEL_SERVICE_NAME=toolworker-bench",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+e.receiver.endpoint(),
		"OTEL_EXPORTER_OTLP_INSECURE=true",
	), workerArgs("bench-otel", e.on.addr)...)
	if err != nil {
		return err
	}
	e.defer_(func() { wOn.stop(5 * time.Second) })
	e.workerOn = wOn
	wTLS, err := e.startMTLS(cfg, workerArgs)
	if err != nil {
		return err
	}
	e.workerMTLS = wTLS
	s.wOff, s.wOn, s.wTLS = wOff, wOn, wTLS
	for _, x := range []struct {
		c *core
		p *proc
	}{{e.off, wOff}, {e.on, wOn}, {e.mtls, wTLS}} {
		if err := x.c.waitTool(ctx, peer.Name); err != nil {
			return fmt.Errorf("%w\n%s", err, x.p.tail())
		}
	}
	return nil
}

// startLocalHop starts a core with a pkg/worker in this process serving the math group,
// for the hop that is profiled with both its sides.
func (e *env) startLocalHop(ctx context.Context) error {
	local, err := startCore(coreOptions{provider: e.script})
	if err != nil {
		return err
	}
	e.defer_(local.close)
	lw, err := worker.New(worker.Options{ID: "bench-local", Orchestrator: local.addr, Listen: "127.0.0.1:0", Capacity: 64,
		Logger: slog.New(slog.DiscardHandler)}, examplegroups.Math())
	if err != nil {
		return err
	}
	lctx, stopLocal := context.WithCancel(context.Background())
	lwDone := make(chan struct{})
	go func() { defer close(lwDone); _ = lw.Run(lctx) }()
	e.defer_(func() { stopLocal(); <-lwDone })
	if err := local.waitTool(ctx, peer.Name); err != nil {
		return err
	}
	e.hopLocal = e.hopVariant(VHop+" (worker in this process)", local, runChain(nil))
	return nil
}

// startRawAdd starts bench/cmd/rawadd and connects to it.
func (e *env) startRawAdd(ctx context.Context, cfg Config, s *setupPeers) error {
	raw, err := startProc("rawadd", cfg.Bins.RawAdd, childEnv())
	if err != nil {
		return err
	}
	e.defer_(func() { raw.stop(5 * time.Second) })
	s.raw = raw
	rec, err := raw.waitJSON(ctx, "serving")
	if err != nil {
		return err
	}
	rawAddr, _ := rec["address"].(string)
	rawConn, err := grpc.NewClient(rawAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	e.defer_(func() { _ = rawConn.Close() })
	s.rawConn = rawConn
	return nil
}

// startMCPAdd starts bench/cmd/mcpadd over streamable HTTP and over stdio, with an MCP
// session to each.
func (e *env) startMCPAdd(ctx context.Context, cfg Config, s *setupPeers) error {
	mh, err := startProc("mcpadd(http)", cfg.Bins.MCPAdd, childEnv(), "-transport", "http")
	if err != nil {
		return err
	}
	e.defer_(func() { mh.stop(5 * time.Second) })
	s.mh = mh
	rec, err := mh.waitJSON(ctx, "serving")
	if err != nil {
		return err
	}
	url, _ := rec["url"].(string)
	s.url = url
	// One session, reused by every call. The HTTP client keeps up to 64 idle connections
	// to the server (net/http's default is 2), so that the concurrency-32 phase is not
	// held back by reconnecting: the setting most favourable to the MCP peer.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	httpSession, err := mcp.NewClient(&mcp.Implementation{Name: "toolmesh-bench", Version: "v1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		return fmt.Errorf("mcp streamable HTTP session: %w\n%s", err, mh.tail())
	}
	e.defer_(func() { _ = httpSession.Close(); tr.CloseIdleConnections() })
	s.httpSession = httpSession

	stdioCmd := exec.Command(cfg.Bins.MCPAdd, "-transport", "stdio")
	stdioCmd.Env = childEnv()
	stdioCmd.SysProcAttr = harness.ChildProcAttr(nil)
	stdioSession, err := mcp.NewClient(&mcp.Implementation{Name: "toolmesh-bench", Version: "v1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: stdioCmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		return fmt.Errorf("mcp stdio session: %w", err)
	}
	e.defer_(func() {
		_ = stdioSession.Close()
		if stdioCmd.ProcessState == nil && stdioCmd.Process != nil {
			_ = syscall.Kill(-stdioCmd.Process.Pid, syscall.SIGKILL)
		}
	})
	s.stdioCmd, s.stdioSession = stdioCmd, stdioSession
	return nil
}

// setupVariants makes the variants, in the order each round runs them, with the peer
// process of each, and keeps those cfg asks for.
func (e *env) setupVariants(ctx context.Context, cfg Config, s *setupPeers) error {
	orchClient, err := client.Dial(e.off.addr, insecure.NewCredentials())
	if err != nil {
		return err
	}
	e.defer_(func() { _ = orchClient.Close() })

	e.variants = []*variant{
		e.limitVariant(s.rawConn, false),
		e.limitVariant(s.rawConn, true),
		e.hopVariant(VHop, e.off, runChain(nil)),
		e.hopVariant(VHopOTel, e.on, runChain(e.tel)),
		e.hopVariant(VHopMTLS, e.mtls, runChain(nil)),
		e.mcpVariant(VMCPHTTP, s.httpSession),
		e.mcpVariant(VMCPStdio, s.stdioSession),
		e.mcpGroupVariant(ctx, s.url),
	}
	if cfg.Bins.Everything != "" {
		if err := e.startEverything(ctx, cfg, s); err != nil {
			return err
		}
	}
	e.variants = append(e.variants,
		e.inProcessVariant(),
		e.loopGRPCVariant(orchClient),
		e.loopNestedVariant(orchClient),
		e.loopInProcessVariant(),
	)
	if cfg.wants(VLoopMemory) || cfg.wants(VLoopSQLite) || cfg.wants(VLoopPostgres) {
		e.progress("setup: journaled orchestrator cores")
		journaled, err := e.journalVariants(ctx)
		if err != nil {
			return err
		}
		e.variants = append(e.variants, journaled...)
	}
	wOff := s.wOff
	peers := map[string]int{
		VMCPEverything: s.everythingPID,
		VLimit:         s.raw.pid(), VLimitMD: s.raw.pid(), VHop: wOff.pid(), VHopOTel: s.wOn.pid(), VHopMTLS: s.wTLS.pid(),
		VMCPHTTP: s.mh.pid(), VMCPStdio: s.stdioCmd.Process.Pid, VMCPGroup: s.mh.pid(), VLoopGRPC: wOff.pid(), VLoopNested: wOff.pid(),
		VLoopMemory: wOff.pid(), VLoopSQLite: wOff.pid(), VLoopPostgres: wOff.pid(),
	}
	for _, v := range e.variants {
		v.peer = peers[v.name]
	}
	for _, v := range e.variants {
		if v.call == nil {
			return fmt.Errorf("variant %s could not be set up", v.name)
		}
	}
	e.variants = slices.DeleteFunc(e.variants, func(v *variant) bool { return !cfg.wants(v.name) })
	return nil
}

// startEverything starts @modelcontextprotocol/server-everything and adds the
// mcp-everything variant.
func (e *env) startEverything(ctx context.Context, cfg Config, s *setupPeers) error {
	e.progress("setup: server-everything")
	addr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	ev, err := startProc("server-everything", cfg.Bins.Everything, childEnv("PORT="+port), "streamableHttp")
	if err != nil {
		return err
	}
	e.defer_(func() { ev.stop(5 * time.Second) })
	if _, err := ev.WaitLine(ctx, func(l string) bool { return strings.Contains(l, "listening on port") }); err != nil {
		return fmt.Errorf("server-everything did not start: %w\n%s", err, ev.tail())
	}
	s.everythingPID = ev.pid()
	e.variants = append(e.variants, e.mcpEverythingVariant(ctx, fmt.Sprintf("http://127.0.0.1:%s/mcp", port)))
	return nil
}

// check compares a call's result text with the expected sum.
func (e *env) check(got string) error {
	if got != e.expected {
		return fmt.Errorf("add returned %q, want %q", got, e.expected)
	}
	return nil
}

func (e *env) limitVariant(conn *grpc.ClientConn, withMetadata bool) *variant {
	c := toolpb.NewToolWorkerServiceClient(conn)
	v := &variant{name: VLimit, unit: "call",
		measures: "raw grpc-go unary call (default options, no interceptors or stats handlers) of ToolWorkerService.Invoke{tool, arguments_json} to bench/cmd/rawadd, a separate process whose hand-written handler decodes the JSON, adds and answers the text"}
	var kv []string
	if withMetadata {
		v.name = VLimitMD
		v.measures = "the limit call plus the same four ToolCallContext entries as metadata, encoded as toolmesh encodes them (tm-ctx-<base32>-bin); informative, not a goal"
		md, err := (ctxcodec.Codec{}).Encode(toolctx.MustOf(contextEntries...))
		if err != nil {
			return v
		}
		for k, vs := range md {
			for _, x := range vs {
				kv = append(kv, k, x)
			}
		}
	}
	v.call = func(ctx context.Context) error {
		if kv != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		}
		resp, err := c.Invoke(ctx, &toolpb.InvokeRequest{Tool: peer.Name, ArgumentsJson: Arguments})
		if err != nil {
			return err
		}
		return e.check(resp.GetText())
	}
	return v
}

func (e *env) hopVariant(name string, c *core, chain []decorators.Decorator) *variant {
	v := &variant{name: name, unit: "call",
		measures: "toolmesh hop, telemetry off: the remote tool from router.Tool(\"add\") wrapped in decorators.Default(), called as the loop calls a tool (tool.CallInfo, a ToolCallContext of 4 keys, a dispatch record in ctx) → router (replica pick, converter, metadata codec, deadline) → gRPC → bin/toolworker --groups math (worker SDK: context decode, schema validation, typed tool) and back. The difference from the limit beyond toolmesh's own work: the call carries a deadline (the tool's timeout), which both sides keep a timer for, and bin/toolworker runs as it ships, with its collector's heap target at 64 MiB while its live heap is smaller (-gc-min-heap-mib), where rawadd runs with Go's defaults (GOGC=100)"}
	if name == VHopMTLS {
		v.measures = "the same hop with mutual TLS on both sides, as cmd/orchestrator and bin/toolworker turn it on: TLS 1.3 with ECDSA P-256 certificates of a development CA carrying SPIFFE IDs; the router dials the worker expecting the identity it registered under, the worker takes Invoke only from the orchestrator's identity; one long-lived connection, so the handshake is not in the per-call cost. The arguments come validated, in canonical form, as the loop sends them (validated once at setup here), and the worker, having authenticated the orchestrator, skips validating them against the same definition"
	}
	if name == VHopOTel {
		v.measures = "the same hop with telemetry on as cmd/orchestrator turns it on: router.Options.Telemetry (the trace context in the call's metadata, replica and in-flight records) and decorators.Telemetry after decorators.Default() (the execute_tool span, the call's one span on this side, and tool-call metrics); the worker's one span is its execute_tool span, a child of ours; traces and metrics go through batching OTLP/gRPC exporters to an in-benchmark receiver, sampler parentbased_always_on; the worker process gets OTEL_* variables pointing at the same receiver"
	}
	t, err := c.router.Tool(peer.Name)
	if err != nil {
		return v
	}
	t = decorators.Apply(t, chain...)
	bag := toolctx.MustOf(contextEntries...)
	info := tool.CallInfo{RunID: "run_bench", LoopID: "loop_bench", CallID: "call_1"}
	args, validated := Arguments, false
	if name == VHopMTLS {
		// As the loop does: the arguments validated once against the tool's definition,
		// in their canonical form, so that the worker, which authenticated the
		// orchestrator, need not validate them again.
		canonical, err := t.Definition().InputSchema.Validate(Arguments)
		if err != nil {
			return v
		}
		args, validated = canonical, true
	}
	v.call = func(ctx context.Context) error {
		ctx = toolcall.WithCallInfo(ctx, info)
		ctx = toolctx.NewContext(ctx, bag)
		if validated {
			ctx = toolinternal.WithValidated(ctx, args)
		}
		ctx, _ = toolinternal.WithDispatch(ctx)
		res, err := t.Call(ctx, args)
		if err != nil {
			return err
		}
		if res.IsError() {
			return fmt.Errorf("add failed: %s (the core's workers: %s)", res.Content, workerStates(c))
		}
		return e.check(res.Content)
	}
	return v
}

// workerStates says which workers c has and in what state, for an error.
func workerStates(c *core) string {
	var b strings.Builder
	for _, w := range c.router.ListWorkers() {
		fmt.Fprintf(&b, "%s %s, ", w.GetWorkerId(), w.GetState())
	}
	if b.Len() == 0 {
		return "none"
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func (e *env) mcpVariant(name string, s *mcp.ClientSession) *variant {
	v := &variant{name: name, unit: "call", measures: "tools/call of add through the official Go MCP SDK client, one session reused by every call, to bench/cmd/mcpadd (the SDK's server with default options, typed tool with inferred and validated input schema) over streamable HTTP on loopback"}
	if name == VMCPStdio {
		v.measures = "the same tools/call over stdio: bench/cmd/mcpadd started by the SDK's CommandTransport, JSON-RPC over its stdin/stdout"
	}
	args := json.RawMessage(Arguments)
	v.call = func(ctx context.Context) error {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: peer.Name, Arguments: args})
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("add failed: %+v", res.Content)
		}
		text, ok := res.Content[0].(*mcp.TextContent)
		if !ok {
			return fmt.Errorf("add returned %T, want text", res.Content[0])
		}
		return e.check(text.Text)
	}
	return v
}

// mcpGroupVariant is the orchestrator's own MCP hop: mcpadd's add as an MCP group
// (internal/mcp), in the run's decorator chain, called as the loop calls a tool.
func (e *env) mcpGroupVariant(ctx context.Context, url string) *variant {
	v := &variant{name: VMCPGroup, unit: "call", measures: "toolmesh's MCP hop: add of bench/cmd/mcpadd offered as an MCP group (internal/mcp: one session, the ToolCallContext of 4 keys as _meta through the pass-through converter, a progress token, the call's deadline) in the run's decorator chain, called as the loop calls a tool, over streamable HTTP on loopback"}
	g, err := meshmcp.New(meshmcp.Options{Server: meshmcp.Server{Name: "mcpadd", URL: url}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return v
	}
	e.defer_(func() { _ = g.Close() })
	t, err := g.RequiredToolByName(ctx, peer.Name)
	if err != nil {
		return v
	}
	t = decorators.Apply(t, runChain(nil)...)
	bag := toolctx.MustOf(contextEntries...)
	info := tool.CallInfo{RunID: "run_bench", LoopID: "loop_bench", CallID: "call_1"}
	v.call = func(ctx context.Context) error {
		ctx = toolcall.WithCallInfo(ctx, info)
		ctx = toolctx.NewContext(ctx, bag)
		res, err := t.Call(ctx, Arguments)
		if err != nil {
			return err
		}
		if res.IsError() {
			return fmt.Errorf("add failed: %s", res.Content)
		}
		return e.check(res.Content)
	}
	return v
}

// EverythingMessage is what the mcp-everything variant echoes.
const EverythingMessage = "toolmesh-bench"

// mcpEverythingVariant is the same MCP hop as mcp-group, to the echo tool of the MCP
// project's reference server (Node.js) instead of the Go SDK's.
func (e *env) mcpEverythingVariant(ctx context.Context, url string) *variant {
	v := &variant{name: VMCPEverything, unit: "call", measures: "toolmesh's MCP hop as in mcp-group, to the echo tool of @modelcontextprotocol/server-everything (the MCP project's reference server, Node.js) over streamable HTTP on loopback"}
	g, err := meshmcp.New(meshmcp.Options{Server: meshmcp.Server{Name: "everything", URL: url}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return v
	}
	e.defer_(func() { _ = g.Close() })
	t, err := g.RequiredToolByName(ctx, "echo")
	if err != nil {
		return v
	}
	t = decorators.Apply(t, runChain(nil)...)
	bag := toolctx.MustOf(contextEntries...)
	info := tool.CallInfo{RunID: "run_bench", LoopID: "loop_bench", CallID: "call_1"}
	args := `{"message":"` + EverythingMessage + `"}`
	want := "Echo: " + EverythingMessage
	v.call = func(ctx context.Context) error {
		ctx = toolcall.WithCallInfo(ctx, info)
		ctx = toolctx.NewContext(ctx, bag)
		res, err := t.Call(ctx, args)
		if err != nil {
			return err
		}
		if res.IsError() || res.Content != want {
			return fmt.Errorf("echo returned %q, want %q", res.Content, want)
		}
		return nil
	}
	return v
}

func (e *env) inProcessVariant() *variant {
	return &variant{name: VInProcess, unit: "call",
		measures: "a direct Go call in this process: decode the JSON arguments into a struct, add, encode the result as JSON",
		call: func(context.Context) error {
			sum, err := peer.Add([]byte(Arguments))
			if err != nil {
				return err
			}
			out, err := json.Marshal(struct {
				Text string `json:"text"`
			}{sum})
			if err != nil {
				return err
			}
			if len(out) == 0 {
				return errors.New("empty result")
			}
			return e.check(sum)
		}}
}

// loopScript is the scripted model of the loop variants: n turns of one add call, then
// a final answer; no delay.
func loopScript(n int) (*scripted.Provider, error) {
	s := scripted.Script{Name: "bench-loop"}
	for k := 1; k <= n; k++ {
		s.Rules = append(s.Rules, scripted.Rule{
			Name:  fmt.Sprintf("call-%d", k),
			When:  scripted.When{Turn: k},
			Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: peer.Name, ArgumentsRaw: Arguments}}},
		})
	}
	// The outer loop of loop-nested: it calls the agentic tool, whose nested loop (its
	// user message the arguments, "{}") follows the rules above, then answers.
	s.Rules = slices.Insert(s.Rules, 0,
		scripted.Rule{Name: "nest", When: scripted.When{User: "^" + nestedPrompt + "$", Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: nestedTool, ArgumentsRaw: `{}`}}}},
		scripted.Rule{Name: "nest-answer", When: scripted.When{User: "^" + nestedPrompt + "$"}, Reply: scripted.Reply{Text: "done"}})
	s.Rules = append(s.Rules, scripted.Rule{Name: "answer", Reply: scripted.Reply{Text: "done"}})
	return scripted.New(s)
}

func (e *env) loopGRPCVariant(c *client.Client) *variant {
	n := e.cfg.LoopToolCalls
	req := &toolpb.RunRequest{
		Prompt:  "Add the two numbers, again and again.",
		Tools:   []string{peer.Name},
		Context: toolctx.MustOf(contextEntries...).Map(),
	}
	e.countEvents = func(ctx context.Context) (int, error) {
		n := 0
		_, err := c.RunAndWait(ctx, req, func(*toolpb.RunResponse) { n++ })
		return n, err
	}
	return &variant{name: VLoopGRPC, unit: "run",
		measures: fmt.Sprintf("a whole Run over gRPC (pkg/client → OrchestratorService of the in-process core, the tool add offered by name, 4-key context): the scripted model (zero latency) asks for add %d times, one call per turn, then answers; every event streamed to the client", n),
		call: func(ctx context.Context) error {
			final, err := c.RunAndWait(ctx, req, nil)
			if err != nil {
				return err
			}
			if final.GetText() != "done" || int(final.GetIterations()) != n+1 {
				return fmt.Errorf("run ended with %q after %d iterations, want \"done\" after %d", final.GetText(), final.GetIterations(), n+1)
			}
			return nil
		}}
}

// journalVariants are loop-grpc on cores that journal their runs: in memory, SQLite in a
// temporary file, and PostgreSQL (a private server) where it is installed. The cores
// share loop-grpc's router, so that the runs reach the same worker.
func (e *env) journalVariants(ctx context.Context) ([]*variant, error) {
	dir, err := os.MkdirTemp("", "toolmesh-bench-journal-")
	if err != nil {
		return nil, err
	}
	e.defer_(func() { _ = os.RemoveAll(dir) })
	if e.cfg.wants(VLoopSQLite) {
		if us, idle, err := probeSyncWrite(dir); err == nil {
			e.diskSyncUs, e.diskSyncIdleUs = us, idle
		} else {
			e.progress("setup: the journal directory's synchronous write could not be timed: %v", err)
		}
	}
	type journalStore struct {
		name, what string
		open       func() (runlog.Store, error)
	}
	stores := []journalStore{{VLoopMemory, "memory, as an orchestrator without journal.data_dir or journal.dsn keeps its runs (nothing survives the process; no durability to compare)", func() (runlog.Store, error) {
		return runlog.OpenMemory(ctx, runlog.MemoryLimits{})
	}}, {VLoopSQLite, "SQLite, a file in the temporary directory, at the orchestrator's settings: every commit is on disk before it is acknowledged (a group of writes is one entry of the commit log, written with O_DSYNC and, where the file system allows it, O_DIRECT, asynchronously (io_submit) where the kernel allows it; the database is copied from the log in WAL mode with synchronous=NORMAL, the log emptied only once a checkpoint has synced the database)", func() (runlog.Store, error) {
		return runlog.OpenSQLite(ctx, filepath.Join(dir, "journal.db"))
	}}}
	if _, err := harness.PostgresBin(); err == nil {
		stores = append(stores, journalStore{VLoopPostgres, "a private PostgreSQL on loopback with its defaults (fsync on, synchronous_commit on, full_page_writes on: every commit on disk before it is acknowledged; shared_buffers 128 MB), through pgx", func() (runlog.Store, error) {
			pg, err := harness.StartPostgresWith(ctx, harness.PostgresOptions{Durable: true})
			if err != nil {
				return nil, err
			}
			e.defer_(pg.Stop)
			return runlog.OpenPostgres(ctx, pg.DSN)
		}})
	}
	var out []*variant
	for _, st := range stores {
		if !e.cfg.wants(st.name) {
			continue
		}
		store, err := st.open()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		e.defer_(func() { _ = store.Close() })
		c, err := startCoreWith(e.off.router, e.script, store)
		if err != nil {
			return nil, err
		}
		e.defer_(c.close)
		cl, err := client.Dial(c.addr, insecure.NewCredentials())
		if err != nil {
			return nil, err
		}
		e.defer_(func() { _ = cl.Close() })
		count := e.countEvents // loop-grpc's, which the report counts with
		v := e.loopGRPCVariant(cl)
		e.countEvents = count
		v.name = st.name
		v.measures = "loop-grpc on an orchestrator core that journals every run in " + st.what + ": the request, each model response, tool dispatch and outcome, every event before the client sees it; a dispatch is committed before its call leaves"
		if sr, ok := store.(runlog.StatsReporter); ok {
			v.stats = sr.Stats
		}
		out = append(out, v)
	}
	return out, nil
}

// The agentic tool of loop-nested, and the prompt that calls it.
const (
	nestedTool   = "add_again"
	nestedPrompt = "Nest the additions"
)

func (e *env) loopNestedVariant(c *client.Client) *variant {
	n := e.cfg.LoopToolCalls
	req := &toolpb.RunRequest{
		Prompt:  nestedPrompt,
		Tools:   []string{nestedTool},
		Context: toolctx.MustOf(contextEntries...).Map(),
		AgenticTools: []*toolpb.AgenticToolSpec{{
			Name: nestedTool, Description: "Add the two numbers, again and again.", Tools: []string{peer.Name},
		}},
	}
	return &variant{name: VLoopNested, unit: "run",
		measures: fmt.Sprintf("loop-grpc with one level of nesting: the run's model calls the agentic tool %s (declared in the request), whose nested loop asks for add %d times, one call per turn, then answers; then the run's model answers. Against loop-grpc: one nested loop (its setup, its events in the run's stream, its ids and records) and one more model call", nestedTool, n),
		call: func(ctx context.Context) error {
			final, err := c.RunAndWait(ctx, req, nil)
			if err != nil {
				return err
			}
			if final.GetText() != "done" || final.GetIterations() != 2 {
				return fmt.Errorf("run ended with %q after %d iterations, want \"done\" after 2", final.GetText(), final.GetIterations())
			}
			return nil
		}}
}

func (e *env) loopInProcessVariant() *variant {
	n := e.cfg.LoopToolCalls
	var schema schema.Schema
	if add, err := builtinAdd(); err == nil {
		schema = add.Definition().InputSchema
	}
	noop := tool.New(peer.Name, peer.Description, schema, func(context.Context, string) (tool.Result, error) {
		return tool.Text("0"), nil
	})
	bag := toolctx.MustOf(contextEntries...)
	log := slog.New(slog.DiscardHandler)
	return &variant{name: VLoopInProc, unit: "run",
		measures: fmt.Sprintf("loop.Run in this process with the same scripted model and %d turns, the add tool a local no-op with the same schema (arguments still validated): the loop's own cost, no gRPC", n),
		call: func(ctx context.Context) error {
			res, err := loop.Run(ctx, loop.Options{
				Provider: e.script, Context: bag, RunID: "run_bench", LoopID: "loop_bench", Logger: log,
			}, loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "Add the two numbers, again and again."}}, Tools: []tool.Tool{noop}})
			if err != nil {
				return err
			}
			if res.Text != "done" || res.Iterations != n+1 || res.ToolCalls != n {
				return fmt.Errorf("loop ended with %q after %d iterations and %d tool calls, want \"done\", %d, %d", res.Text, res.Iterations, res.ToolCalls, n+1, n)
			}
			return nil
		}}
}

// runChain is the decorator chain the orchestrator puts around every tool of a run, as
// configured by default (no sinks, assets or replanning), so that the hop is measured
// with what a run pays for it. A nil tel records nothing.
func runChain(tel *telemetry.Telemetry) []decorators.Decorator {
	c := &decorators.Chain{Bounds: decorators.Bounds{MaxTextBytes: 32 << 10, MaxArtifactBytes: 1 << 20}, Telemetry: tel}
	return []decorators.Decorator{c.Decorate}
}

// startMTLS starts the mutual-TLS core and its toolworker: a development CA in a
// temporary directory, the orchestrator's certificate and a worker identity granted the
// math group.
func (e *env) startMTLS(cfg Config, workerArgs func(id, orch string) []string) (*proc, error) {
	dir, err := os.MkdirTemp("", "toolmesh-bench-mtls-")
	if err != nil {
		return nil, err
	}
	e.defer_(func() { _ = os.RemoveAll(dir) })
	ca, err := devca.NewCA("bench.test", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	issue := func(name, path string) (trust.Files, error) {
		leaf, err := ca.Issue(path, time.Now().Add(-time.Minute), 24*time.Hour, "127.0.0.1")
		if err != nil {
			return trust.Files{}, err
		}
		return ca.Write(dir, name, leaf)
	}
	of, err := issue("orchestrator", "/orchestrator")
	if err != nil {
		return nil, err
	}
	wf, err := issue("worker", "/worker/math")
	if err != nil {
		return nil, err
	}
	qf, err := issue("quiet", "/client/quiet")
	if err != nil {
		return nil, err
	}
	nf, err := issue("noisy", "/client/noisy")
	if err != nil {
		return nil, err
	}
	certs, err := trust.Load(of, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	e.defer_(certs.Close)
	c := config.Default()
	c.TLS = config.TLS{CAFile: of.CA, CertFile: of.Cert, KeyFile: of.Key}
	c.Trust.Workers = []config.WorkerGrant{{ID: "spiffe://bench.test/worker/math", Groups: []string{examplegroups.MathRole}}}
	noisy := noisyLimits
	noisy.Groups, noisy.Clients = []string{examplegroups.MathRole}, []string{"spiffe://bench.test/client/noisy"}
	c.Tenants = map[string]config.Tenant{
		tenantQuiet: {Groups: []string{examplegroups.MathRole}, Clients: []string{"spiffe://bench.test/client/quiet"}},
		tenantNoisy: noisy,
	}
	if e.mtls, err = startCore(coreOptions{provider: e.script, certs: certs, cfg: &c}); err != nil {
		return nil, err
	}
	e.defer_(e.mtls.close)
	qs, err := trust.Load(qf, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	e.defer_(qs.Close)
	if e.quiet, err = client.Dial(e.mtls.addr, qs.ClientCredentials(certs.ID())); err != nil {
		return nil, err
	}
	e.defer_(func() { _ = e.quiet.Close() })
	e.floodArgs = []string{"-addr", e.mtls.addr, "-server-id", certs.ID().String(), "-tls-ca", nf.CA, "-tls-cert", nf.Cert, "-tls-key", nf.Key,
		"-runs", fmt.Sprint(floodRuns), "-big-bytes", fmt.Sprint(floodBig), "-history", fmt.Sprint(floodHistory), "-tool", peer.Name}
	args := append(workerArgs("bench-mtls", e.mtls.addr), "--tls-ca", wf.CA, "--tls-cert", wf.Cert, "--tls-key", wf.Key,
		"--orchestrator-id", "spiffe://bench.test/orchestrator")
	w, err := startProc("toolworker(mtls)", cfg.Bins.Toolworker, childEnv("OTEL_SDK_DISABLED=true"), args...)
	if err != nil {
		return nil, err
	}
	e.defer_(func() { w.stop(5 * time.Second) })
	return w, nil
}
