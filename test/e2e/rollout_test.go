package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

type shoutIn struct {
	Text string `json:"text" jsonschema:"what to shout"`
}

// TestRollingUpdateKeepsRunsOnTheirDefinition: a rolling update of a tool group whose new
// version describes its tool differently. While a run that started with version 1 is
// between two calls, a version 2 replica registers beside the version 1 one (a Deployment
// surging a new pod). The run's second call still goes to version 1, whose definition the
// model was shown; a run started afterwards is shown version 2 and calls only it; once
// version 1's replica drains away, version 2 serves everything.
func TestRollingUpdateKeepsRunsOnTheirDefinition(t *testing.T) {
	m := startMesh(t, "rollout.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// start runs a worker of version and waits until it is registered; it may run on a
	// tool's goroutine, so it reports instead of failing the test.
	start := func(id, version, desc string, onCall func()) (stop func(), err error) {
		shout := tool.MustFunc("shout", desc, func(_ context.Context, in shoutIn) (string, error) {
			if onCall != nil {
				onCall()
			}
			return version + ":" + strings.ToUpper(in.Text), nil
		}, tool.Idempotent())
		w, err := worker.New(worker.Options{ID: id, Orchestrator: m.orch.Addr, Listen: "127.0.0.1:0", MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			DrainTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)},
			worker.Group{Role: "loud", Description: "Loud tools: use to shout", Provider: "acme", Version: version, Tools: []tool.Tool{shout}})
		if err != nil {
			return nil, err
		}
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		for {
			if ok, rej := w.Registered(); ok {
				break
			} else if len(rej) > 0 {
				wcancel()
				<-done
				return nil, fmt.Errorf("%s refused: %v", id, rej)
			}
			select {
			case <-ctx.Done():
				wcancel()
				<-done
				return nil, fmt.Errorf("%s never registered", id)
			case <-time.After(20 * time.Millisecond):
			}
		}
		var once sync.Once
		stop = func() { once.Do(func() { wcancel(); <-done }) }
		t.Cleanup(stop)
		return stop, nil
	}

	// Version 2 surges in while the first run's first call is running on version 1.
	var surge sync.Once
	var surgeErr error
	stopV1, err := start("loud-v1", "1", "Shout the text in capitals (version 1).", func() {
		surge.Do(func() { _, surgeErr = start("loud-v2", "2", "Shout the text in capital letters, version 2.", nil) })
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.run(ctx, &toolpb.RunRequest{Prompt: "shout", ToolGroups: []string{"loud"}}, nil)
	if err != nil {
		m.dump()
		t.Fatalf("the first run: %v", err)
	}
	if surgeErr != nil {
		t.Fatalf("version 2 during the rollout: %v", surgeErr)
	}
	if got := contents(finished(first, 0)); len(got) != 2 || got[0] != "1:FIRST" || got[1] != "1:SECOND" {
		t.Errorf("the run that started with version 1 got %q, want both calls answered by version 1", got)
	}

	// A new run is shown version 2 and calls only it.
	second, err := m.run(ctx, &toolpb.RunRequest{Prompt: "shout", ToolGroups: []string{"loud"}}, nil)
	if err != nil {
		t.Fatalf("the second run: %v", err)
	}
	if got := contents(finished(second, 0)); len(got) != 2 || got[0] != "2:FIRST" || got[1] != "2:SECOND" {
		t.Errorf("a run started during the rollout got %q, want version 2's answers", got)
	}
	tools, err := m.c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if ti.GetDefinition().GetName() == "shout" && !strings.Contains(ti.GetDefinition().GetDescription(), "version 2") {
			t.Errorf("ListTools shows %q during the rollout, want version 2's", ti.GetDefinition().GetDescription())
		}
	}

	// The old replica drains away; version 2 serves on.
	stopV1()
	third, err := m.run(ctx, &toolpb.RunRequest{Prompt: "shout", ToolGroups: []string{"loud"}}, nil)
	if err != nil {
		t.Fatalf("the third run: %v", err)
	}
	if got := contents(finished(third, 0)); len(got) != 2 || got[0] != "2:FIRST" {
		t.Errorf("after version 1 left: %q", got)
	}
}

func contents(fs []*toolpb.ToolCallFinished) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.GetContent())
	}
	return out
}
