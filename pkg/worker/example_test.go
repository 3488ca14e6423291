package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/meshtest"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Lookup is the input of the example's tool.
type Lookup struct {
	SKU string `json:"sku" jsonschema:"the product's stock-keeping unit"`
}

// A worker serves a tool group and stays registered with an orchestrator until its
// context ends; the orchestrator offers the group's tools to the model of every run that
// asks for the group. Here the orchestrator runs in this process, on memory, with a
// scripted model that calls the tool once and quotes it.
func Example() {
	mesh := startScriptedMesh(`{name: stock, rules: [
		{when: {turn: 1}, reply: {tool_calls: [{name: stock_level, arguments: {sku: SKU-1}}]}},
		{when: {tool: stock_level}, reply: {text: 'The inventory says: {{ result "stock_level" }}'}}]}`)
	defer func() { _ = mesh.Close() }()

	stock := tool.MustFunc("stock_level", "Units in stock for a SKU",
		func(ctx context.Context, in Lookup) (string, error) {
			tenant, _ := toolctx.FromContext(ctx).Get("tenantId") // never shown to the model
			return fmt.Sprintf("7 units of %s in stock for %s", in.SKU, tenant), nil
		}, tool.Idempotent())
	registered := make(chan struct{}) // closed once the orchestrator accepts the worker
	w, err := worker.New(worker.Options{
		ID:           "inventory-1",
		Orchestrator: mesh.Addr(), // "orchestrator:7070" in a deployment
		DialOptions:  []grpc.DialOption{mesh.Dialer()},
		Listener:     mesh.WorkerListener("inventory-1:7000"), // or Listen: ":7000"
		Advertise:    "inventory-1:7000",
		Logger:       slog.New(&registrationLog{registered: registered}),
	}, worker.Group{Role: "inventory", Description: "Inventory tools", Tools: []tool.Tool{stock}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // serves, stays registered, drains when ctx ends
	select {
	case <-registered: // a run may ask for the worker's group from now on
	case err := <-done:
		fmt.Println(err)
		return
	}

	c, err := client.Dial(mesh.Addr(), insecure.NewCredentials(), mesh.Dialer())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	final, err := c.RunAndWait(ctx, &toolpb.RunRequest{
		Prompt: "How many SKU-1?", ToolGroups: []string{"inventory"}, Context: map[string]string{"tenantId": "acme"},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(final.GetText())
	stop()
	fmt.Println("drained:", <-done)
	// Output:
	// The inventory says: 7 units of SKU-1 in stock for acme
	// drained: <nil>
}

// registrationLog discards a worker's log, but for the record that says an orchestrator
// accepted the worker (what Registered reports): it closes registered then.
type registrationLog struct {
	once       sync.Once
	registered chan struct{}
}

func (h *registrationLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *registrationLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *registrationLog) WithGroup(string) slog.Handler            { return h }
func (h *registrationLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "registered with orchestrator" {
		h.once.Do(func() { close(h.registered) })
	}
	return nil
}

// startScriptedMesh starts an orchestrator in this process whose model follows the
// script (YAML).
func startScriptedMesh(script string) *meshtest.Mesh {
	s, err := scripted.Parse([]byte(script))
	if err != nil {
		panic(err)
	}
	m, err := meshtest.Start(s, nil)
	if err != nil {
		panic(err)
	}
	return m
}
