package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestOncePerLoopAcrossWorkerProcesses: read_handbook, which the handbook group's
// worker processes register as once per loop, runs once in each run's loop although two
// replicas serve it and the one that served the first call is killed: the orchestrator
// answers the repeated calls itself (no worker) with the ALREADY LOADED text and the
// tool's advice, in the same batch as another call and in a later turn; the next run
// reads it again.
func TestOncePerLoopAcrossWorkerProcesses(t *testing.T) {
	var m *mesh
	first := make(chan string, 2) // the replica that served each run's first read
	const prompt1, prompt2 = "How do we release?", "How do we review?"
	read := [2]string{examplegroups.HandbookTool, `{}`}
	model := &promptModel{scripts: map[string]*turnModel{
		prompt1: {turns: []modelTurn{
			{calls: [][2]string{read}},
			{calls: [][2]string{read, {examplegroups.HandbookSectionTool, `{"title":"releases"}`}}, before: func() {
				select {
				case w := <-first:
					_ = m.workers[w].Kill() // the repeats must not need it
				case <-time.After(20 * time.Second):
				}
			}},
			{calls: [][2]string{read}},
			{text: "On Tuesdays and Thursdays."},
		}},
		prompt2: {turns: []modelTurn{
			{calls: [][2]string{read}},
			{calls: [][2]string{read}},
			{text: "One review, two for the journal."},
		}},
	}}
	useModel(t, model)
	m = startMesh(t, "", "provider: {name: openai}")
	m.startWorker("handbook-1", "handbook")
	m.startWorker("handbook-2", "handbook")
	m.waitWorkers("handbook-1", "handbook-2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type call struct{ Tool, Content, Worker string }
	again := toolctx.AlreadyLoaded(examplegroups.HandbookTool, examplegroups.HandbookAdvice)
	var killed string
	for i, prompt := range []string{prompt1, prompt2} {
		sent := false
		evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"handbook"}}, func(ev *toolpb.RunResponse) {
			if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == examplegroups.HandbookTool && !sent && i == 0 {
				sent = true
				first <- f.GetWorkerId()
			}
		})
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		var got []call
		for _, f := range finished(evs, 0) {
			if f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
				t.Errorf("run %d: %s: %s %q", i+1, f.GetTool(), f.GetOutcome(), f.GetContent())
			}
			got = append(got, call{f.GetTool(), f.GetContent(), f.GetWorkerId()})
		}
		if len(got) == 0 || got[0].Worker == "" {
			t.Fatalf("run %d: the first read reached no worker: %v", i+1, got)
		}
		var want []call
		if i == 0 {
			killed = got[0].Worker
			other := "handbook-1"
			if killed == other {
				other = "handbook-2"
			}
			want = []call{{examplegroups.HandbookTool, examplegroups.HandbookText(), killed}, {examplegroups.HandbookTool, again, ""},
				{examplegroups.HandbookSectionTool, "Releases: Release on Tuesdays and Thursdays, never on Fridays.", other}, {examplegroups.HandbookTool, again, ""}}
		} else {
			want = []call{{examplegroups.HandbookTool, examplegroups.HandbookText(), got[0].Worker}, {examplegroups.HandbookTool, again, ""}}
			if got[0].Worker == killed {
				t.Errorf("run 2's read reached %s, which was killed", killed)
			}
		}
		// The calls of one batch may finish in either order.
		byCall := cmpopts.SortSlices(func(a, b call) bool { return a.Tool+a.Content < b.Tool+b.Content })
		if diff := cmp.Diff(want, got, byCall); diff != "" {
			t.Errorf("run %d calls (-want +got):\n%s", i+1, diff)
		}
	}
	delete(m.workers, killed) // killed on purpose
}
