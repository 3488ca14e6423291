// Command support-orchestrator is an orchestrator of one's own, built on
// pkg/orchestrator: everything cmd/orchestrator does, plus what only Go can say.
//
//   - a layer of the call pipeline ("audit") that writes every tool call to a JSON-lines
//     file and refuses the tools an operator switched off (-deny);
//   - a context converter written as a function: every group's workers receive the
//     call's context with the time of the request added (requestedAt);
//   - an artifact sink ("archive") that appends what a rule sends it to a file;
//   - a blackboard formatter that shows a note as a sentence;
//   - a tool-injection strategy, beside unfolding: once the model has remembered a note,
//     it is offered "forget";
//   - an in-process tool group ("notes": remember, recall), which runs in this process
//     and is journaled as a worker's group is.
//
// Run it as the orchestrator binary is run; workers register with it as with any
// orchestrator:
//
//	support-orchestrator -config examples/support-orchestrator/orchestrator.yaml \
//	    -audit /tmp/audit.jsonl -archive /tmp/archive.jsonl -deny multiply
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toolmesh/toolmesh/pkg/orchestrator"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "support-orchestrator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("support-orchestrator", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (default: built-in defaults)")
	listen := fs.String("listen", "", "address to serve on (overrides the config's listen)")
	logFormat := fs.String("log-format", "", "json or text (overrides log.format)")
	script := fs.String("script", "", "script file of the scripted provider (overrides provider.script)")
	auditPath := fs.String("audit", "", "file every tool call is appended to, as a JSON line (default: none)")
	archivePath := fs.String("archive", "", "file the archive sink appends artifacts to, as JSON lines (default: none)")
	deny := fs.String("deny", "", "comma-separated tools this orchestrator refuses to call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := orchestrator.DefaultConfig()
	if *cfgPath != "" {
		var err error
		if cfg, err = orchestrator.LoadConfig(*cfgPath); err != nil {
			return err
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	if *script != "" {
		cfg.Provider.Script = *script
	}
	audit, err := openLog(*auditPath)
	if err != nil {
		return err
	}
	defer audit.Close()
	archive, err := openLog(*archivePath)
	if err != nil {
		return err
	}
	defer archive.Close()
	var denied []string
	if *deny != "" {
		denied = strings.Split(*deny, ",")
	}
	notes := newNotebook()
	o, err := orchestrator.New(orchestrator.Options{
		Config:     cfg,
		Layers:     []orchestrator.Layer{auditLayer(audit, denied)},
		Converters: map[string]orchestrator.Converter{"": requestedAt()},
		Sinks:      map[string]orchestrator.Sink{"archive": archiveSink(archive)},
		Formatter:  formatNote,
		Strategies: []orchestrator.Strategy{offerForget(notes.forget())},
		Groups:     map[string]orchestrator.Group{"notes": notes.group()},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return o.Run(ctx)
}
