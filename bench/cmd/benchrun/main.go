// Command benchrun runs toolmesh's benchmark harness (package bench) and writes its
// report, latest.md and latest.json, into -out. It builds nothing: the binaries come
// from $TOOLMESH_BIN or bin/ (make bench builds them).
//
//	go run ./bench/cmd/benchrun [-quick] [-out bench/results] [-only hop,limit,memory] [-cpuprofile FILE]
//
// It exits non-zero only when a variant fails to run, never because a goal was missed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/toolmesh/toolmesh/bench"
	"github.com/toolmesh/toolmesh/internal/cli"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "the quick configuration (under a minute) instead of the full one (a few minutes)")
	out := fs.String("out", "bench/results", "directory of latest.md and latest.json")
	only := fs.String("only", "", "comma-separated variants (hop, limit, …) and measurements (routing, facades, components, registration, tenants, peers, memory, resume, profiles) to run, leaving out the rest; default all")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (turns the automatic profiles of missed goals off)")
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	bins, err := bench.FindBins()
	if err != nil {
		return err
	}
	cfg.Bins = bins
	cfg.Progress = os.Stdout
	cfg.ProfileDir = *out
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
		cfg.ProfileTime = 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Printf("toolmesh benchmark, %s configuration: %d rounds\n", cfg.Mode, cfg.Rounds)
	rep, runErr := bench.Run(ctx, cfg)
	if rep != nil {
		if err := rep.WriteFiles(*out); err != nil {
			return err
		}
		fmt.Printf("\nwrote %s/latest.md and %s/latest.json\n\n", *out, *out)
		for _, g := range rep.Goals {
			fmt.Printf("  %-14s %-12s %-9s %s\n", g.ID, g.Measured, g.Target, g.Verdict)
		}
	}
	return runErr
}
