package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Bin returns the path of a toolmesh binary: $TOOLMESH_BIN/name, else bin/name in dir or
// one of its parents (the repository root).
func Bin(name string) (string, error) {
	if d := os.Getenv("TOOLMESH_BIN"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TOOLMESH_BIN: %w", err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("binary %s not found: run make build, or set TOOLMESH_BIN", name)
		}
		dir = parent
	}
}

// Orchestrator is a running orchestrator process.
type Orchestrator struct {
	*Proc
	// Addr is the address it serves on.
	Addr string
	// Provider and Model are the default model provider and model it logged.
	Provider, Model string
}

// StartOrchestrator starts an orchestrator on listen (use "127.0.0.1:0" for any port)
// with extra flags, and waits until it serves.
func StartOrchestrator(ctx context.Context, name, listen string, echo io.Writer, extra ...string) (*Orchestrator, error) {
	return StartOrchestratorBin(ctx, "orchestrator", name, listen, echo, extra...)
}

// StartOrchestratorBin is StartOrchestrator with another binary of bin/: a program built
// on pkg/orchestrator that takes the orchestrator's --listen and --log-format flags.
func StartOrchestratorBin(ctx context.Context, binary, name, listen string, echo io.Writer, extra ...string) (*Orchestrator, error) {
	bin, err := Bin(binary)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--listen", listen, "--log-format", "json"}, extra...)
	p, err := Start(name, bin, echo, args...)
	if err != nil {
		return nil, err
	}
	rec, err := p.WaitLog(ctx, "orchestrator serving")
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("%w\n%s", err, p.Output())
	}
	addr, _ := rec["address"].(string)
	if addr == "" {
		_ = p.Kill()
		return nil, ErrNoAddress
	}
	provider, _ := rec["provider"].(string)
	model, _ := rec["model"].(string)
	return &Orchestrator{Proc: p, Addr: addr, Provider: provider, Model: model}, nil
}

// StartWorker starts a toolworker serving groups (comma-separated) under id, registering
// with the orchestrator at orch.
func StartWorker(name, id, groups, orch string, echo io.Writer, extra ...string) (*Proc, error) {
	bin, err := Bin("toolworker")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--id", id, "--groups", groups, "--orchestrator", orch, "--listen", "127.0.0.1:0", "--log-format", "json"}, extra...)
	return Start(name, bin, echo, args...)
}

// WaitWorkers polls the orchestrator until exactly the given worker ids are registered
// and READY.
func WaitWorkers(ctx context.Context, c *client.Client, ids ...string) error {
	want := slices.Clone(ids)
	slices.Sort(want)
	var last []string
	for {
		ws, err := c.ListWorkers(ctx)
		if err == nil {
			last = last[:0]
			for _, w := range ws {
				if w.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
					last = append(last, w.GetWorkerId())
				}
			}
			if slices.Equal(last, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for workers %v (ready: %v): %w", want, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago, for a
// process that must listen on a known address, possibly again after a restart: the
// port is one that no other process is given meanwhile by listening on port 0 or by
// dialling out (see freeLoopbackPort).
func FreeAddr() (string, error) {
	p, err := freeLoopbackPort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}
