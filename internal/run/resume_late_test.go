package run

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// lateCodec turns any journaled request into a prompt with an agentic tool whose
// sub-tool, "late", a worker serves; its events are their Go types, so that a test
// reads which event a record holds.
type lateCodec struct{}

func (lateCodec) AppendEvent(dst []byte, ev Event) ([]byte, bool) {
	if sq, ok := ev.(Sequenced); ok {
		ev = sq.Event
	}
	return append(dst, fmt.Sprintf("%T", ev)...), true
}

func (lateCodec) Request(json.RawMessage) (Request, error) {
	return Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}},
		Agentic: []agentic.Spec{{Key: "agentic_tools[0]", Name: "helper", Description: "Helps.", Kind: agentic.KindSimple, Tools: []string{"late"}}}}, nil
}

// A run taken over waits, up to journal.resume_grace, for the tools its agentic tools
// name, as for the groups it asks for: after an orchestrator's restart its workers
// register anew. Before, a sub-tool no worker served yet read as an invalid request and
// the run failed at once. A run that still cannot go on when the grace ends fails with
// an event saying so, the last a client watching it reads, as GetRun says; before, its
// events ended with no end.
func TestResumeWaitsForAnAgenticToolsWorker(t *testing.T) {
	late := tool.New("late", "Registers late.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("ok"), nil })
	w, err := worker.New(worker.Options{Orchestrator: "unused:1"}, worker.Group{Role: "slow", Description: "Slow to register.", Tools: []tool.Tool{late}})
	if err != nil {
		t.Fatal(err)
	}
	for _, registers := range []bool{true, false} {
		t.Run(fmt.Sprintf("registers=%v", registers), func(t *testing.T) {
			store := openStore(t, "memory")
			cfg := config.Default()
			cfg.Journal.ResumeGrace = config.Duration(2 * time.Second)
			// The worker is never called: its address is not probed.
			rt := router.New(router.Options{GracePeriod: time.Second, Probe: func(context.Context, *grpc.ClientConn) error { return nil }})
			t.Cleanup(rt.Close)
			s, err := New(Options{Router: rt, Providers: map[string]llm.Provider{"rv": &rvModel{}}, DefaultProvider: "rv", Config: cfg,
				Journal: store, Codec: lateCodec{}, Owner: "me"})
			if err != nil {
				t.Fatal(err)
			}
			orphan(t, store, "r-late", "me") // this orchestrator restarted
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := s.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if registers {
				time.Sleep(300 * time.Millisecond)
				reg := w.Registration()
				reg.WorkerId, reg.Address = "w1", "127.0.0.1:1"
				if _, _, err := s.router.Register(reg); err != nil {
					t.Fatal(err)
				}
			}
			var r runlog.Run
			for r, _ = store.Get(ctx, "r-late"); !r.State.Terminal() && ctx.Err() == nil; r, _ = store.Get(ctx, "r-late") {
				time.Sleep(20 * time.Millisecond)
			}
			events, err := store.Read(ctx, "r-late", 0, 0, runlog.KindEvent)
			if err != nil {
				t.Fatal(err)
			}
			last := ""
			if len(events) > 0 {
				_, wire, _, _ := decodeEvent(events[len(events)-1].Data)
				last = string(wire)
			}
			switch {
			case registers && r.State != runlog.StateSucceeded:
				t.Errorf("a run whose agentic tool's worker registered within the grace: %s, last event %s; want succeeded", r.State, last)
			case !registers && (r.State != runlog.StateFailed || !strings.HasSuffix(last, "run.Ended")):
				t.Errorf("a run whose agentic tool's worker never registered: %s, last event %q; want failed, its end last", r.State, last)
			}
			s.Shutdown(context.Background())
		})
	}
}
