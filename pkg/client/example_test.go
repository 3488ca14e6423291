package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/meshtest"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// A client runs a prompt and reads the run's events as they happen: the tools offered,
// each tool call and the worker that served it, the answer. Errors the orchestrator
// reports match the package's sentinels. Here the orchestrator and a worker run in this
// process, on memory, with a scripted model.
func ExampleClient_Run() {
	mesh, stop := startMesh()
	defer stop()
	c, err := client.Dial(mesh.Addr(), insecure.NewCredentials(), mesh.Dialer()) // TLS: credentials.NewTLS(...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	req := &toolpb.RunRequest{Prompt: "Shout hello", ToolGroups: []string{"text"}}
	for ev, err := range c.Run(ctx, req) {
		if err != nil {
			fmt.Println("run failed:", err)
			return
		}
		switch x := ev.GetEvent().(type) {
		case *toolpb.RunResponse_Started:
			fmt.Println("tools:", x.Started.GetTools())
		case *toolpb.RunResponse_ToolCallStarted:
			fmt.Println("call:", x.ToolCallStarted.GetTool(), x.ToolCallStarted.GetArgumentsJson())
		case *toolpb.RunResponse_ToolCallFinished:
			fmt.Println("result:", x.ToolCallFinished.GetContent(), "from", x.ToolCallFinished.GetWorkerId())
		case *toolpb.RunResponse_FinalResult:
			fmt.Println("answer:", x.FinalResult.GetText())
		}
	}

	_, err = c.GetRun(ctx, "no-such-run")
	fmt.Println("unknown run:", errors.Is(err, client.ErrRunNotFound))
	// Output:
	// tools: [shout]
	// call: shout {"text":"hello"}
	// result: HELLO from text-1
	// answer: It says HELLO.
	// unknown run: true
}

// startMesh starts an orchestrator whose model calls shout once and quotes it, and a
// worker serving shout, in this process.
func startMesh() (*meshtest.Mesh, func()) {
	script, err := scripted.Parse([]byte(`{name: shout, rules: [
		{when: {turn: 1}, reply: {tool_calls: [{name: shout, arguments: {text: hello}}]}},
		{when: {tool: shout}, reply: {text: 'It says {{ result "shout" }}.'}}]}`))
	if err != nil {
		panic(err)
	}
	mesh, err := meshtest.Start(script, nil)
	if err != nil {
		panic(err)
	}
	type text struct {
		Text string `json:"text"`
	}
	shout := tool.MustFunc("shout", "Upper-case a text", func(_ context.Context, in text) (string, error) {
		return strings.ToUpper(in.Text), nil
	})
	// The worker says when an orchestrator accepted its registration: its log is how
	// startMesh knows the mesh is ready.
	registered := make(chan struct{})
	log := slog.New(onMessage{msg: "registered with orchestrator", once: new(sync.Once), ch: registered})
	w, err := worker.New(worker.Options{ID: "text-1", Orchestrator: mesh.Addr(), DialOptions: []grpc.DialOption{mesh.Dialer()},
		Listener: mesh.WorkerListener("text-1:7000"), Advertise: "text-1:7000", Logger: log},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{shout}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-registered:
	case err := <-done:
		panic(fmt.Sprintf("the worker stopped before it registered: %v", err))
	case <-time.After(10 * time.Second):
		panic("the worker did not register")
	}
	return mesh, func() {
		cancel()
		<-done
		_ = mesh.Close()
	}
}

// onMessage is a log handler that closes ch the first time msg is logged, and discards
// every record.
type onMessage struct {
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }

func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}

func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }
