// Command goworker is the conformance worker of the Go SDK (pkg/worker): the group conf
// that test/conformance/README.md specifies, served until SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}

func run() error {
	orch := flag.String("orchestrator", "", "orchestrator host:port")
	id := flag.String("id", "", "worker id")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	role := flag.String("group", "conf", "the group's role")
	flag.Parse()
	if *orch == "" || *id == "" {
		return errors.New("--orchestrator and --id are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	w, err := worker.New(worker.Options{ID: *id, Orchestrator: *orch, Listen: *listen, Logger: log, Version: "1.0.0",
		Ledger: worker.NewMemoryLedger(0), MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}, group(*role))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	go announce(ctx, w)
	return <-done
}

// announce writes "ready <address>" each time the worker becomes registered.
func announce(ctx context.Context, w *worker.Worker) {
	addr, err := w.Addr(ctx)
	if err != nil {
		return
	}
	was := false
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ok, _ := w.Registered()
		if ok && !was {
			fmt.Printf("ready %s\n", addr)
		}
		was = ok
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type text struct {
	Text string `json:"text"`
}

type pair struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type none struct{}

// charges counts the effects of charge, by account.
var charges = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func group(role string) worker.Group {
	add := tool.MustFunc("add", "Add two numbers", func(_ context.Context, in pair) (string, error) { return num(in.A + in.B), nil }, tool.Idempotent())
	mul := tool.MustFunc("mul", "Multiply two numbers", func(_ context.Context, in pair) (string, error) { return num(in.A * in.B), nil }, tool.Idempotent())
	count := tool.MustFunc("count", "Count calls in this cart", func(ctx context.Context, _ none) (string, error) {
		st := tool.StateFrom(ctx)
		var c struct {
			N int `json:"n"`
		}
		if b := st.Bytes(); len(b) > 0 {
			if err := json.Unmarshal(b, &c); err != nil {
				return "", fmt.Errorf("the state %q is not a counter", b)
			}
		}
		c.N++
		b, _ := json.Marshal(c)
		st.Set(b)
		return fmt.Sprintf("count %d", c.N), nil
	})
	open := tool.Selectable("open", "Open a counter", schema.Params(schema.String("name", "")), []tool.Tool{count},
		tool.SelectorFunc(func(ctx context.Context, _ string) ([]tool.Tool, error) {
			st := tool.StateFrom(ctx)
			if st == nil {
				return nil, errors.New("open must be called through the orchestrator")
			}
			st.Set([]byte(`{"n":0}`))
			return []tool.Tool{count}, nil
		}))
	calc := tool.Of("calc", "Calculator", []tool.Tool{add, mul})
	return worker.Group{
		Role: role, Description: "Conformance tools", Provider: "toolmesh-conformance", Version: "1.0.0",
		Tools:   append(plainTools(), add, mul),
		Facades: []tool.Facade{open, calc},
	}
}

func plainTools() []tool.Tool {
	return []tool.Tool{
		tool.MustFunc("echo", "Echo the text back", func(_ context.Context, in text) (string, error) { return "echo: " + in.Text, nil }, tool.Idempotent()),
		tool.MustFunc("whoami", "Show the call's context", whoami),
		tool.MustFunc("note", "Put a note on the blackboard", func(ctx context.Context, in text) (string, error) {
			e, err := tool.NewEntry("Note", in)
			if err != nil {
				return "", err
			}
			if b := tool.BlackboardFrom(ctx); b != nil {
				if err := b.Bind("last", e); err != nil {
					return "", err
				}
			}
			return "noted", nil
		}),
		tool.MustFunc("read_note", "Read the newest note", func(ctx context.Context, _ none) (string, error) {
			if b := tool.BlackboardFrom(ctx); b != nil {
				if e, ok := b.Last("Note"); ok {
					var n text
					if json.Unmarshal(e.JSON, &n) == nil {
						return n.Text, nil
					}
				}
			}
			return "", errors.New("no note")
		}, tool.NeedsBlackboard("Note")),
		tool.MustFunc("steps", "Report progress", func(ctx context.Context, in struct {
			N int `json:"n"`
		}) (string, error) {
			for i := 1; i <= in.N; i++ {
				tool.Progress(ctx, fmt.Sprintf("step %d of %d", i, in.N))
			}
			return fmt.Sprintf("did %d steps", in.N), nil
		}, tool.ReportsProgress()),
		tool.MustFunc("slow", "Wait, then answer", func(ctx context.Context, in struct {
			MS int `json:"ms"`
		}) (string, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return fmt.Sprintf("waited %d", in.MS), nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, tool.Idempotent()),
		tool.MustFunc("big", "Answer many bytes", func(_ context.Context, in struct {
			Bytes int `json:"bytes"`
		}) (string, error) {
			return strings.Repeat("x", max(in.Bytes, 0)), nil
		}),
		tool.MustFunc("charge", "Charge an account once", func(_ context.Context, in struct {
			Account string `json:"account"`
			Cents   int    `json:"cents"`
		}) (string, error) {
			charges.Lock()
			defer charges.Unlock()
			charges.n[in.Account]++
			return fmt.Sprintf("charged %d to %s (%d charges)", in.Cents, in.Account, charges.n[in.Account]), nil
		}, tool.Idempotent()),
		tool.MustFunc("charges", "Count charges", func(_ context.Context, in struct {
			Account string `json:"account"`
		}) (string, error) {
			charges.Lock()
			defer charges.Unlock()
			return strconv.Itoa(charges.n[in.Account]), nil
		}),
		tool.New("fail", "Fail with a message", schema.Params(schema.String("message", "")), func(_ context.Context, input string) (tool.Result, error) {
			var in struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal([]byte(input), &in)
			return tool.ErrorWithCode(tool.CodeFailed, in.Message), nil
		}),
		tool.MustFunc("stop", "Stop the agent", func(_ context.Context, in struct {
			Reason string `json:"reason"`
		}) (string, error) {
			return "", tool.Terminate{Scope: tool.TerminateAgent, Reason: in.Reason}
		}),
		tool.MustFunc("replan", "Ask to plan again", func(_ context.Context, in struct {
			Reason string `json:"reason"`
		}) (string, error) {
			return "", tool.ReplanRequested{Reason: in.Reason}
		}),
	}
}

// whoami answers the call's context entries, its tenant and its idempotency key.
func whoami(ctx context.Context, _ none) (string, error) {
	out := map[string]string{}
	cc := toolctx.FromContext(ctx)
	for _, k := range cc.Keys() {
		if strings.HasPrefix(k, "toolmesh.") {
			continue
		}
		out[k], _ = cc.Get(k)
	}
	out["tenant"], _ = cc.Get(toolctx.TenantKey)
	info, _ := tool.CallInfoFrom(ctx)
	out["idempotency_key"] = info.IdempotencyKey()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(out[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String(), nil
}

// num is f in the shortest form that reads back as the same float64.
func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
