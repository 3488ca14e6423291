// Command helloworker is the smallest worker a worker author writes: one typed tool,
// served by pkg/worker. The architecture test lists what it links.
package main

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Greeting is the tool's input.
type Greeting struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

func main() {
	hello := tool.MustFunc("hello", "Greets someone", func(_ context.Context, in Greeting) (string, error) {
		return "hello, " + in.Name, nil
	})
	w, err := worker.New(worker.Options{Orchestrator: "127.0.0.1:7070"},
		worker.Group{Role: "hello", Description: "Greetings", Tools: []tool.Tool{hello}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
