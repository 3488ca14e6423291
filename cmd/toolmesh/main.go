// Command toolmesh is a small client of the orchestrator: run a prompt and watch its
// events, list tools, groups and workers, inspect or cancel a run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/otelsetup"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// command is one of the CLI's commands, as its usage describes it.
type command struct{ name, synopsis, what string }

// commands are the CLI's commands, in the order the usage lists them.
var commands = []command{
	{"run", "[-group g]... [-require g[:tool,...]]... [-tool t]... [-model provider/model] [-role r] [-context k=v]... [-max-iterations n] [-max-actions n] [-timeout d] [-system text] [-stream] [-detach] [-json] PROMPT", "run a prompt and print its events as they arrive"},
	{"watch", "[-after n] [-json] RUN_ID", "print a run's events from the journal, then as they happen, until it ends"},
	{"runs", "[-state s] [-limit n]", "list the runs the journal holds"},
	{"approve", "[-deny] [-reason text] [-loop id] RUN_ID CALL_ID", "approve (or deny) a call that waits for approval"},
	{"tools", "[-group g]...", "list registered tools"},
	{"groups", "", "list tool groups: where their tools come from, the tools, their workers"},
	{"workers", "", "list registered workers"},
	{"get", "RUN_ID", "show a run"},
	{"cancel", "RUN_ID", "cancel a run"},
	{"certs", "[-dir d] [-trust-domain td] [-workers g,...] [-clients name,...] [-hosts h,...] [-days n]", "write a development CA and certificates for mutual TLS and a key that signs bearer tokens, and print how to use them"},
	{"token", "-tenant t [-key file] [-ttl d] [-issuer i] [-audience a] [-subject s] [-tenant-claim c]", "print a development bearer token signed with the key toolmesh certs wrote"},
}

// flushTimeout bounds how long the CLI waits on the way out for its spans to be
// exported: an unreachable collector costs at most this, and a warning.
const flushTimeout = time.Second

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: toolmesh [-addr host:port] <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n    \t%s\n", strings.TrimSpace(c.name+" "+c.synopsis), c.what)
	}
	fmt.Fprint(w, `
flags:
  -addr host:port   orchestrator address (default $TOOLMESH_ADDR, else 127.0.0.1:7070)
  -tls-ca, -tls-cert, -tls-key, -server-id
                    mutual TLS: this client's certificate files and the orchestrator's
                    SPIFFE ID
  -token-file path  send the bearer token in this file with every call (default
                    $TOOLMESH_TOKEN_FILE); read once, at start; over TLS, or in the clear
                    to a loopback address only

'toolmesh <command> -h' shows a command's flags. Telemetry follows the standard OTEL_*
variables; OTEL_TRACES_EXPORTER=console writes spans to stderr, never among the output.
`)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "toolmesh:", err)
		os.Exit(1)
	}
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// run runs one command line: the command's output goes to stdout; usage mistakes,
// warnings and console telemetry go to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolmesh", flag.ContinueOnError)
	fs.Usage = func() { usage(fs.Output()) }
	addr := fs.String("addr", envOr("TOOLMESH_ADDR", "127.0.0.1:7070"), "orchestrator address")
	tlsFlags := cli.AddTLSFlags(fs, "server-id", "identity of the orchestrator")
	tokenFile := fs.String("token-file", os.Getenv("TOOLMESH_TOKEN_FILE"), "file of a bearer token sent with every call (read once, at start)")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command")
	}
	switch fs.Arg(0) {
	case "certs":
		return certsCmd(fs.Args()[1:], stdout, stderr)
	case "token":
		return tokenCmd(fs.Args()[1:], stdout, stderr)
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == cmd })
	c, closeAll, err := dial(ctx, *addr, tlsFlags, *tokenFile, stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	if i < 0 {
		fs.Usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
	sub := flag.NewFlagSet(cmd, flag.ContinueOnError)
	sub.Usage = func() {
		fmt.Fprintf(sub.Output(), "usage: toolmesh %s %s\n\n%s\n", cmd, commands[i].synopsis, commands[i].what)
		sub.PrintDefaults()
	}
	handlers := map[string]func(context.Context, *client.Client, *flag.FlagSet, []string, io.Writer, io.Writer) error{
		"watch": watchCmd, "approve": approveCmd, "runs": runsCmd, "tools": toolsCmd,
		"groups": groupsCmd, "workers": workersCmd, "get": getCmd, "cancel": cancelCmd,
	}
	if cmd == "run" {
		return runCmd(ctx, c, sub, rest, stdout, stderr)
	}
	return handlers[cmd](ctx, c, sub, rest, stdout, stderr)
}

// dial connects to the orchestrator as the flags say (mutual TLS, a bearer token), with
// the CLI's telemetry; closeAll closes the connection, flushes the telemetry and releases
// the certificates.
func dial(ctx context.Context, addr string, tlsFlags *cli.TLSFlags, tokenFile string, stderr io.Writer) (c *client.Client, closeAll func(), err error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	creds := insecure.NewCredentials()
	certs, servers, err := tlsFlags.Load(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return nil, nil, err
	}
	if certs != nil {
		closers = append(closers, certs.Close)
		creds = credentials.NewTLS(certs.ClientTLS(func(id spiffeid.ID) error {
			if !slices.Contains(servers, id) {
				return fmt.Errorf("not the orchestrator (-server-id %v)", servers)
			}
			return nil
		}))
	}
	// With OTEL_TRACES_EXPORTER set, the CLI's call starts the run's trace.
	sdk, err := otelsetup.FromEnv(ctx, otelsetup.Options{ServiceName: "toolmesh-cli", ServiceVersion: cli.Version(), Console: stderr})
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() {
		if ferr := cli.FlushTelemetry(sdk, flushTimeout); ferr != nil {
			fmt.Fprintf(stderr, "toolmesh: warning: telemetry not exported within %s: %v\n", flushTimeout, ferr)
		}
	})
	tel, err := telemetry.FromProviders(sdk.TracerProvider, sdk.MeterProvider, telemetry.Options{})
	if err != nil {
		return nil, nil, err
	}
	dialOpts := tel.DialOptions()
	if tokenFile != "" {
		tok, err := cli.ReadToken(tokenFile)
		if err != nil {
			return nil, nil, err
		}
		if err := cli.CheckTokenTransport(addr, certs != nil); err != nil {
			return nil, nil, fmt.Errorf("-token-file: %w", err)
		}
		dialOpts = append(dialOpts, client.Bearer(tok, certs == nil))
	}
	if c, err = client.Dial(addr, creds, dialOpts...); err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { _ = c.Close() })
	return c, cleanup, nil
}

// watchCmd prints the events of a run, live, from a sequence number on.
func watchCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	after := sub.Int64("after", 0, "print the events after this sequence number")
	asJSON := sub.Bool("json", false, "print events as JSON lines")
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	if sub.NArg() != 1 {
		return errors.New("watch needs exactly one RUN_ID")
	}
	p := &printer{out: stdout, terminal: isTerminal(stdout)}
	defer p.endLine()
	for ev, err := range c.Watch(ctx, sub.Arg(0), *after) {
		if err != nil {
			return err
		}
		p.emit(ev, *asJSON)
	}
	return nil
}

// approveCmd approves or denies a call waiting for a person.
func approveCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	deny := sub.Bool("deny", false, "deny the call instead: it does not run, and the model reads the reason")
	reason := sub.String("reason", "", "why (a denial's reason reaches the model)")
	loopID := sub.String("loop", "", "the call's loop, when calls of that id wait in several loops")
	answer := sub.String("answer", "", "the answer to a question the call's tool asked: a JSON object valid against its schema")
	inputID := sub.String("input", "", "the question answered, when the call waits on several")
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	if sub.NArg() != 2 {
		return errors.New("approve needs RUN_ID and CALL_ID")
	}
	if *deny && (*answer != "" || *inputID != "") {
		return errors.New("-answer and -input answer a question: not with -deny")
	}
	if *answer != "" || *inputID != "" {
		if err := c.AnswerToolInput(ctx, sub.Arg(0), sub.Arg(1), *inputID, *answer); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stdout, "answered")
		return err
	}
	if err := c.ApproveToolCall(ctx, sub.Arg(0), sub.Arg(1), *loopID, !*deny, *reason); err != nil {
		return err
	}
	verdict := "approved"
	if *deny {
		verdict = "denied"
	}
	_, err := fmt.Fprintln(stdout, verdict)
	return err
}

// runsCmd lists the runs of the journal.
func runsCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	state := sub.String("state", "", "only runs in this state: running, succeeded, failed, cancelled, terminated")
	limit := sub.Int("limit", 100, "list at most this many (1 to 1000)")
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	st := toolpb.RunState_RUN_STATE_UNSPECIFIED
	if *state != "" {
		v, ok := toolpb.RunState_value["RUN_STATE_"+strings.ToUpper(*state)]
		if !ok {
			return fmt.Errorf("-state %q: not a run state", *state)
		}
		st = toolpb.RunState(v)
	}
	runs, _, err := c.ListRuns(ctx, st, *limit, "")
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATE\tOWNER\tSTARTED\tRECORDS")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.GetRunId(), strings.TrimPrefix(r.GetState().String(), "RUN_STATE_"), r.GetOwner(),
			r.GetStarted().AsTime().Local().Format(time.DateTime), r.GetRecords())
	}
	return tw.Flush()
}

// toolsCmd lists the tools.
func toolsCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	var groups multi
	sub.Var(&groups, "group", "only tools of this group (repeatable)")
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	tools, err := c.ListTools(ctx, groups...)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tGROUP\tREPLICAS\tDESCRIPTION")
	for _, t := range tools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.GetDefinition().GetName(), t.GetGroup(), len(t.GetWorkerIds()), t.GetDefinition().GetDescription())
	}
	return tw.Flush()
}

// groupsCmd lists the tool groups.
func groupsCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	groups, err := c.ListToolGroups(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSOURCE\tTOOLS\tWORKERS\tDESCRIPTION")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.GetGroup().GetRole(), g.GetSource(), strings.Join(g.GetTools(), ","), strings.Join(g.GetWorkerIds(), ","), g.GetGroup().GetDescription())
	}
	return tw.Flush()
}

// workersCmd lists the workers.
func workersCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	ws, err := c.ListWorkers(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tADDRESS\tGROUPS\tSTATE\tIN-FLIGHT\tCALLS")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", w.GetWorkerId(), w.GetAddress(), strings.Join(w.GetGroups(), ","),
			strings.TrimPrefix(w.GetState().String(), "WORKER_STATE_"), w.GetInFlight(), w.GetCalls())
	}
	return tw.Flush()
}

// getCmd prints a run's record as JSON.
func getCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	if sub.NArg() != 1 {
		return errors.New("get needs exactly one RUN_ID")
	}
	r, err := c.GetRun(ctx, sub.Arg(0))
	if err != nil {
		return err
	}
	b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(r)
	_, err = fmt.Fprintln(stdout, string(b))
	return err
}

// cancelCmd cancels a run.
func cancelCmd(ctx context.Context, c *client.Client, sub *flag.FlagSet, rest []string, stdout, stderr io.Writer) error {
	if err := cli.Parse(sub, rest, stdout, stderr); err != nil {
		return err
	}
	if sub.NArg() != 1 {
		return errors.New("cancel needs exactly one RUN_ID")
	}
	st, err := c.CancelRun(ctx, sub.Arg(0), "cancelled from the toolmesh CLI")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, strings.TrimPrefix(st.String(), "RUN_STATE_"))
	return err
}

func runCmd(ctx context.Context, c *client.Client, fs *flag.FlagSet, args []string, out, stderr io.Writer) error {
	var groups, required, tools, kvs multi
	fs.Var(&groups, "group", "tool group to offer (repeatable); one nobody serves is left out with a warning")
	fs.Var(&required, "require", "tool group the run requires, with the tools it must have: role or role:tool,tool (repeatable)")
	fs.Var(&tools, "tool", "tool to offer (repeatable)")
	fs.Var(&kvs, "context", "ToolCallContext entry key=value (repeatable)")
	model := fs.String("model", "", "model as provider/model (openai/gpt-4o), or a model of the orchestrator's default provider (llm.model)")
	role := fs.String("role", "", "model role, such as smart, that the orchestrator's config maps to a model (llm.role; -model wins)")
	maxIter := fs.Int("max-iterations", 0, "iteration limit (0: the orchestrator's default)")
	timeout := fs.Duration("timeout", 0, "run deadline (0: the orchestrator's default)")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	stream := fs.Bool("stream", false, "print the model's text as it is written (stream_text)")
	maxActions := fs.Int("max-actions", 0, "tool-call budget of the run (0: none)")
	system := fs.String("system", "", "system prompt")
	detach := fs.Bool("detach", false, "keep the run going if the CLI goes away (watch it again with toolmesh watch)")
	if err := cli.Parse(fs, args, out, stderr); err != nil {
		return err
	}
	for name, v := range map[string]int{"-max-iterations": *maxIter, "-max-actions": *maxActions} {
		if v < math.MinInt32 || v > math.MaxInt32 {
			// The conversion to int32 would wrap it into another value; the orchestrator
			// checks the rest.
			return fmt.Errorf("%s %d: out of range", name, v)
		}
	}
	prompt := strings.Join(fs.Args(), " ")
	req := &toolpb.RunRequest{Prompt: prompt, SystemPrompt: *system, ToolGroups: groups, Tools: tools, StreamText: *stream, Detached: *detach,
		Limits: &toolpb.RunLimits{MaxIterations: int32(*maxIter), MaxActions: int32(*maxActions)}}
	for _, r := range required {
		role, names, _ := strings.Cut(r, ":")
		rq := &toolpb.ToolGroupRequirement{Role: role}
		if names != "" {
			rq.Tools = strings.Split(names, ",")
		}
		req.RequiredToolGroups = append(req.RequiredToolGroups, rq)
	}
	if *model != "" || *role != "" {
		req.Llm = &toolpb.LlmOptions{Model: *model, Role: *role}
	}
	if *timeout > 0 {
		req.Limits.Timeout = durationpb.New(*timeout)
	}
	if len(kvs) > 0 {
		req.Context = map[string]string{}
		for _, kv := range kvs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("-context %q: want key=value", kv)
			}
			req.Context[k] = v
		}
	}
	p := &printer{out: out, terminal: isTerminal(out)}
	_, err := c.RunAndWait(ctx, req, func(ev *toolpb.RunResponse) { p.emit(ev, *asJSON) })
	p.endLine()
	var re *client.ReplanError
	var te *client.TerminatedError
	if errors.As(err, &re) || errors.As(err, &te) {
		return nil // a tool ended the run on purpose; the last line says why
	}
	return err
}

// printer writes a run's events for a person: one line per event, except that progress
// is a status line that the next output replaces (on a terminal), and streamed text is
// written as it arrives.
type printer struct {
	out      io.Writer
	terminal bool
	// status is set while a transient status line is on the screen; streaming while
	// streamed text has been written without its newline.
	status, streaming bool
	// streamed is set once an iteration's text was streamed, so that the final line does
	// not repeat it; streamedIter is the iteration whose text was streamed last, whose
	// message event repeats it.
	streamed     bool
	streamedIter int32
}

// emit prints ev for a person, or as a JSON line.
func (p *printer) emit(ev *toolpb.RunResponse, asJSON bool) {
	if asJSON {
		b, _ := protojson.Marshal(ev)
		fmt.Fprintln(p.out, string(b))
		return
	}
	p.print(ev)
}

func (p *printer) print(ev *toolpb.RunResponse) {
	switch x := ev.GetEvent().(type) {
	case *toolpb.RunResponse_Progress:
		if p.terminal {
			p.clearStatus()
			p.endLine()
			fmt.Fprintf(p.out, "\r\x1b[K  ⏳ %s", x.Progress.GetStatus())
			p.status = true
			return
		}
	case *toolpb.RunResponse_TextDelta:
		p.clearStatus()
		if !p.streaming {
			fmt.Fprint(p.out, "  ✎ ")
			p.streaming = true
		}
		fmt.Fprint(p.out, x.TextDelta.GetText())
		p.streamed, p.streamedIter = true, x.TextDelta.GetIteration()
		return
	case *toolpb.RunResponse_Message:
		if p.streamed && x.Message.GetIteration() == p.streamedIter {
			p.endLine() // the text was printed as it arrived
			return
		}
	case *toolpb.RunResponse_FinalResult:
		p.clearStatus()
		p.endLine()
		if p.streamed {
			fmt.Fprintf(p.out, "■ final (%s)\n", plural(int64(x.FinalResult.GetIterations()), "iteration"))
			return
		}
	}
	p.clearStatus()
	p.endLine()
	fmt.Fprintln(p.out, Describe(ev))
}

// clearStatus erases the transient status line.
func (p *printer) clearStatus() {
	if p.status {
		fmt.Fprint(p.out, "\r\x1b[K")
		p.status = false
	}
}

// endLine ends streamed text with its newline.
func (p *printer) endLine() {
	if p.streaming {
		fmt.Fprintln(p.out)
		p.streaming = false
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Describe renders an event as one human-readable line; an event of a nested loop is
// indented two spaces per level of nesting.
func Describe(ev *toolpb.RunResponse) string {
	line := describe(ev)
	if d := ev.GetScope().GetDepth(); d > 0 {
		line = strings.Repeat("  ", int(d)) + line
	}
	return line
}

func describe(ev *toolpb.RunResponse) string {
	switch x := ev.GetEvent().(type) {
	case *toolpb.RunResponse_NestedLoopStarted:
		s, n := ev.GetScope(), x.NestedLoopStarted
		return fmt.Sprintf("▶ %s %s: loop %s in %s, model %s, tools [%s]", s.GetTool(), kindWord(s.GetKind()), s.GetLoopId(), s.GetParentLoopId(), n.GetModel(), strings.Join(n.GetTools(), ", "))
	case *toolpb.RunResponse_NestedLoopFinished:
		s, f := ev.GetScope(), x.NestedLoopFinished
		if f.GetError() != "" {
			return fmt.Sprintf("✖ %s failed after %s: %s", s.GetTool(), plural(int64(f.GetIterations()), "iteration"), f.GetError())
		}
		return fmt.Sprintf("■ %s done (%s, %s)", s.GetTool(), plural(int64(f.GetIterations()), "iteration"), plural(int64(f.GetToolCalls()), "tool call"))
	case *toolpb.RunResponse_Started:
		return fmt.Sprintf("▶ run %s started: model %s, tools [%s], loop %s", ev.GetRunId(), x.Started.GetModel(), strings.Join(x.Started.GetTools(), ", "), x.Started.GetLoopId())
	case *toolpb.RunResponse_ToolCallStarted:
		s := x.ToolCallStarted
		return fmt.Sprintf("  → [%d] %s(%s)  id=%s", s.GetIteration(), s.GetTool(), s.GetArgumentsJson(), s.GetCallId())
	case *toolpb.RunResponse_ToolCallFinished:
		f := x.ToolCallFinished
		where := "not dispatched"
		if f.GetWorkerId() != "" {
			where = "on " + f.GetWorkerId()
			if f.GetAttempts() > 1 {
				where += fmt.Sprintf(" after %d attempts", f.GetAttempts())
			}
		}
		return fmt.Sprintf("  ← %s = %q  [%s, %s, %s]", f.GetTool(), f.GetContent(), strings.TrimPrefix(f.GetOutcome().String(), "TOOL_CALL_OUTCOME_"), where, f.GetDuration().AsDuration().Round(10*time.Microsecond))
	case *toolpb.RunResponse_ToolsChanged:
		c := x.ToolsChanged
		return fmt.Sprintf("  ⇄ tools changed: +[%s] -[%s]", strings.Join(c.GetAdded(), ", "), strings.Join(c.GetRemoved(), ", "))
	case *toolpb.RunResponse_Message:
		return fmt.Sprintf("  💬 %s", x.Message.GetText())
	case *toolpb.RunResponse_Usage:
		return fmt.Sprintf("  · %s: %d input, %d output tokens", x.Usage.GetModel(), x.Usage.GetInputTokens(), x.Usage.GetOutputTokens())
	case *toolpb.RunResponse_FinalResult:
		return fmt.Sprintf("■ final (%s): %s", plural(int64(x.FinalResult.GetIterations()), "iteration"), x.FinalResult.GetText())
	case *toolpb.RunResponse_Error:
		return fmt.Sprintf("✖ error %s: %s", strings.TrimPrefix(x.Error.GetReason().String(), "ERROR_REASON_"), x.Error.GetMessage())
	case *toolpb.RunResponse_Progress:
		return fmt.Sprintf("  ⏳ %s: %s", x.Progress.GetTool(), x.Progress.GetStatus())
	case *toolpb.RunResponse_Warning:
		return fmt.Sprintf("  ⚠ %s: %s", x.Warning.GetField(), x.Warning.GetMessage())
	case *toolpb.RunResponse_MessageToUser:
		return fmt.Sprintf("  ✉ %s", x.MessageToUser.GetText())
	case *toolpb.RunResponse_TextDelta:
		return fmt.Sprintf("  ✎ %s", x.TextDelta.GetText())
	case *toolpb.RunResponse_BlackboardChanged:
		b := x.BlackboardChanged
		name := ""
		if n := b.GetObject().GetName(); n != "" {
			name = fmt.Sprintf(" as '%s'", n)
		}
		return fmt.Sprintf("  ▦ blackboard[%d] %s%s", b.GetIndex(), b.GetObject().GetTypeName(), name)
	case *toolpb.RunResponse_Artifact:
		a := x.Artifact
		return fmt.Sprintf("  ⇢ %s's %s to %s", a.GetTool(), a.GetObject().GetTypeName(), a.GetSink())
	case *toolpb.RunResponse_AssetAdded:
		a := x.AssetAdded.GetAsset()
		return fmt.Sprintf("  ★ asset %s from %s", a.GetObject().GetTypeName(), a.GetTool())
	case *toolpb.RunResponse_ReplanRequested:
		r := x.ReplanRequested
		return fmt.Sprintf("↻ replan requested by %s: %s (%s added)", r.GetTool(), r.GetReason(), plural(int64(len(r.GetAdded())), "object"))
	case *toolpb.RunResponse_ApprovalRequested:
		a := x.ApprovalRequested
		return fmt.Sprintf("  ⏸ %s(%s) waits for approval until %s: toolmesh approve %s %s", a.GetTool(), a.GetArgumentsJson(),
			a.GetDeadline().AsTime().Local().Format(time.TimeOnly), ev.GetRunId(), a.GetCallId())
	case *toolpb.RunResponse_ApprovalDecided:
		a := x.ApprovalDecided
		verdict := "approved"
		if !a.GetApproved() {
			verdict = "denied"
		}
		line := fmt.Sprintf("  ⏵ %s %s by %s", a.GetTool(), verdict, a.GetDecidedBy())
		if a.GetReason() != "" {
			line += ": " + a.GetReason()
		}
		return line
	case *toolpb.RunResponse_Terminated:
		r := x.Terminated
		return fmt.Sprintf("■ terminated (%s) by %s: %s", strings.ToLower(strings.TrimPrefix(r.GetScope().String(), "TERMINATE_SCOPE_")), r.GetTool(), r.GetReason())
	default:
		return fmt.Sprintf("? %v", ev)
	}
}

// kindWord names an agentic kind: "playbook", "state machine", "agent".
func kindWord(k toolpb.AgenticKind) string {
	switch k {
	case toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK:
		return "playbook"
	case toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE:
		return "state machine"
	}
	return "agent"
}

// plural is "1 iteration", "2 iterations", "0 iterations".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
