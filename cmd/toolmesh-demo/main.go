// Command toolmesh-demo is what `make demo` runs: it starts one orchestrator and three
// toolworkers (two replicas of math, one of text) as separate processes on loopback,
// runs a prompt through them with the toolmesh CLI, prints the events, and shuts
// everything down with SIGTERM, checking that each process exits cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/client"
)

func main() {
	fs := flag.NewFlagSet("toolmesh-demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: toolmesh-demo

Starts one orchestrator and three toolworkers (two replicas of math, one of text) as
processes on loopback, runs a prompt through them with the toolmesh CLI, and stops them
all with SIGTERM. The binaries come from $TOOLMESH_BIN, else from bin/ of the current
directory or a parent (make build). Without model credentials the orchestrator uses the
scripted provider; OPENAI_API_KEY, OPENAI_BASE_URL or ANTHROPIC_API_KEY select a real
model.
`)
	}
	err := cli.Parse(fs, os.Args[1:], os.Stdout, os.Stderr)
	if err == nil && fs.NArg() > 0 {
		fs.Usage()
		err = fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if cli.IsHelp(err) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolmesh-demo:", err)
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	fmt.Println("toolmesh demo: one orchestrator, two math workers, one text worker, all on loopback.")

	var procs []*harness.Proc
	stopAll := func() error {
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].Stop(30 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", procs[i].Name, err))
			}
		}
		procs = nil
		return errors.Join(errs...)
	}
	dump := func() {
		for _, p := range procs {
			fmt.Fprintf(os.Stderr, "---- %s output ----\n%s\n", p.Name, p.Output())
		}
	}
	defer func() { _ = stopAll() }()

	// The run journal is SQLite in a directory of its own: runs survive a restart.
	dataDir, err := os.MkdirTemp("", "toolmesh-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dataDir) }()
	orch, err := harness.StartOrchestrator(ctx, "orchestrator", "127.0.0.1:0", nil, "--data-dir", dataDir)
	if err != nil {
		return err
	}
	procs = append(procs, orch.Proc)
	switch orch.Provider {
	case "scripted":
		fmt.Printf("Model: %s — the scripted provider, a deterministic file-driven model: no model credentials are set\n(set OPENAI_API_KEY, OPENAI_BASE_URL or ANTHROPIC_API_KEY to use a real model).\n\n", orch.Model)
	default:
		fmt.Printf("Model: %s — the %s provider, from your environment's credentials.\n\n", orch.Model, orch.Provider)
	}
	fmt.Printf("Transport: plaintext on loopback, mutual TLS off (a development setup; 'make certs' and the README's\n\"Mutual TLS and identities\" turn it on).\n\n")
	fmt.Printf("orchestrator  pid %-7d serving on %s, journaling runs in %s\n", orch.PID(), orch.Addr, filepath.Join(dataDir, "journal.db"))
	for _, w := range []struct{ id, groups string }{{"math-1", "math"}, {"math-2", "math"}, {"text-1", "text"}} {
		p, err := harness.StartWorker(w.id, w.id, w.groups, orch.Addr, nil)
		if err != nil {
			dump()
			return err
		}
		procs = append(procs, p)
		fmt.Printf("%-13s pid %-7d groups %s\n", w.id, p.PID(), w.groups)
	}
	c, err := client.Dial(orch.Addr, insecure.NewCredentials())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := harness.WaitWorkers(wctx, c, "math-1", "math-2", "text-1"); err != nil {
		dump()
		return err
	}

	cli, err := harness.Bin("toolmesh")
	if err != nil {
		return err
	}
	step := func(title string, args ...string) error {
		fmt.Printf("\n$ toolmesh %s\n", title)
		cmd := exec.CommandContext(ctx, cli, append([]string{"-addr", orch.Addr}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			dump()
			return fmt.Errorf("toolmesh %s: %w", title, err)
		}
		return nil
	}
	if err := step("groups", "groups"); err != nil {
		return err
	}
	prompt := scripted.DemoPrompt
	if err := step(fmt.Sprintf("run -group math -group text %q", prompt), "run", "-group", "math", "-group", "text", prompt); err != nil {
		return err
	}
	if err := step("workers   # calls spread over both math replicas", "workers"); err != nil {
		return err
	}
	if err := step("runs      # the run, from the journal (toolmesh watch RUN_ID replays its events)", "runs"); err != nil {
		return err
	}

	fmt.Println("\nShutting down: SIGTERM to every process (workers drain, the orchestrator stops gracefully).")
	if err := stopAll(); err != nil {
		return err
	}
	fmt.Println("All processes exited cleanly.")
	return nil
}
