package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

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
			{calls: [][2]string{read, {examplegroups.HandbookSectionTool, `{"title":"Releases"}`}}, before: func() {
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

// TestBlobFromAWorkerProcess: handbook_poster, in a worker process, returns a PNG as its
// artifact; its bytes cross the wire unchanged and reach the run's assets (the
// asset_added event and GetRun) and, through the config's sink, the blackboard, whose
// tools describe it by type, media type and size.
func TestBlobFromAWorkerProcess(t *testing.T) {
	const prompt = "Make the poster."
	model := &promptModel{scripts: map[string]*turnModel{prompt: {turns: []modelTurn{
		{calls: [][2]string{{examplegroups.HandbookPosterTool, `{}`}}},
		{calls: [][2]string{{"blackboard_list", `{}`}}},
		{text: "Here is the poster."},
	}}}}
	useModel(t, model)
	m := startMesh(t, "", `
provider: {name: openai}
groups:
  handbook:
    assets: [{type: Poster}]
    artifacts: [{type: Poster, sinks: [blackboard]}]
  blackboard:
    offer: flat
`)
	m.startWorker("handbook-1", "handbook")
	m.waitWorkers("handbook-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	png, err := examplegroups.HandbookPoster()
	if err != nil {
		t.Fatal(err)
	}
	var assets []*toolpb.Asset
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "poster-1", Prompt: prompt, ToolGroups: []string{"handbook", "blackboard"}}, func(ev *toolpb.RunResponse) {
		if a := ev.GetAssetAdded(); a != nil {
			assets = append(assets, a.GetAsset())
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	content := map[string]string{}
	for _, f := range finished(evs, 0) {
		content[f.GetTool()] = f.GetContent()
	}
	if got, want := content["blackboard_list"], fmt.Sprintf("Blackboard contains 1 object(s):\n[0] Poster (image/png, %d bytes)", len(png)); got != want {
		t.Errorf("blackboard_list = %q, want %q", got, want)
	}
	want := &toolpb.BlackboardObject{TypeName: examplegroups.HandbookPosterType, Data: png, MediaType: "image/png", Size: int64(len(png))}
	if len(assets) != 1 || !proto.Equal(assets[0].GetObject(), want) || assets[0].GetTool() != examplegroups.HandbookPosterTool {
		t.Errorf("asset_added events %v, want one of %v", assets, want)
	}
	r, err := m.c.GetRun(ctx, "poster-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetAssets()) != 1 || !proto.Equal(r.GetAssets()[0].GetObject(), want) {
		t.Errorf("GetRun assets %v", r.GetAssets())
	}
	if len(r.GetBlackboard()) != 1 || !proto.Equal(r.GetBlackboard()[0], want) {
		t.Errorf("GetRun blackboard %v", r.GetBlackboard())
	}
}
