package server

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// chartPNG is what the charts worker renders: a PNG's signature and some bytes that are
// not UTF-8, so that nothing on the way may treat them as text.
var chartPNG = append([]byte("\x89PNG\r\n\x1a\n"), 0xff, 0xfe, 0x00, 0x01, 0x80)

// chartsGroup serves render_chart, which returns chartPNG as a blob of type chart.Png,
// render_poster, which returns a blob of size bytes, and gate, which waits for release.
// calls counts render_chart's calls.
func chartsGroup(posterBytes int, release <-chan struct{}, calls *atomic.Int32) worker.Group {
	chart := tool.New("render_chart", "Renders a chart.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		if calls != nil {
			calls.Add(1)
		}
		return tool.ArtifactResult("Rendered the chart", tool.Artifact{TypeName: "chart.Png", Data: chartPNG, MediaType: "image/png"}), nil
	})
	poster := tool.New("render_poster", "Renders a poster.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.ArtifactResult("Rendered the poster", tool.Artifact{TypeName: "poster.Pdf", Data: bytes.Repeat([]byte{0xa5}, posterBytes), MediaType: "application/pdf"}), nil
	})
	gate := tool.New("gate", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		select {
		case <-release:
			return tool.Text("open"), nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}, tool.Idempotent())
	return worker.Group{Role: "charts", Tools: []tool.Tool{chart, poster, gate}}
}

func blobObject(typeName, mediaType string, data []byte) *toolpb.BlackboardObject {
	return &toolpb.BlackboardObject{TypeName: typeName, Data: data, MediaType: mediaType, Size: int64(len(data))}
}

// TestBlobArtifactReachesSinksAndAssets: a worker's PNG crosses the wire and reaches
// the config's rules like a JSON artifact: the blackboard sink (the blackboard tools show
// its type, media type and size), a program's sink, the run's assets (the asset_added
// event and GetRun carry its bytes); a rule with a CEL predicate takes no blob.
func TestBlobArtifactReachesSinksAndAssets(t *testing.T) {
	archive, celArchive := &decorators.ListSink{}, &decorators.ListSink{}
	script := scripted.Script{Name: "charts", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("render_chart", `{}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("blackboard", `{}`)},
		{When: scripted.When{Turn: 3}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{
			{Name: "blackboard_list", ArgumentsRaw: `{}`}, {Name: "blackboard_last", ArgumentsRaw: `{"typeName":"Png"}`}}}},
		{Reply: scripted.Reply{Text: "Here is your chart."}},
	}}
	e := newEnv(t, envOptions{script: script, sinks: map[string]decorators.Sink{"archive": archive, "cel_archive": celArchive}, configure: func(c *config.Config) {
		c.Groups = map[string]config.Group{"charts": {
			Artifacts: []config.ArtifactSink{
				{ArtifactFilter: config.ArtifactFilter{Type: "Png"}, Sinks: []string{"blackboard", "archive"}},
				{ArtifactFilter: config.ArtifactFilter{When: "true"}, Sinks: []string{"cel_archive"}},
			},
			Assets: []config.ArtifactFilter{{Type: "chart.Png"}},
		}}
	}})
	e.startWorker("w1", chartsGroup(0, nil, nil))
	ctx := testContext(t)
	var assetEvents []*toolpb.Asset
	var captured, changed []*toolpb.BlackboardObject
	content := map[string]string{}
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "chart-1", Prompt: "chart", ToolGroups: []string{"charts", "blackboard"}}, func(ev *toolpb.RunResponse) {
		if a := ev.GetAssetAdded(); a != nil {
			assetEvents = append(assetEvents, a.GetAsset())
		}
		if a := ev.GetArtifact(); a != nil {
			captured = append(captured, a.GetObject())
		}
		if c := ev.GetBlackboardChanged(); c != nil {
			changed = append(changed, c.GetObject())
		}
		if f := ev.GetToolCallFinished(); f != nil {
			content[f.GetTool()] = f.GetContent()
		}
	}); err != nil {
		t.Fatal(err)
	}
	n := len(chartPNG)
	if got, want := content["blackboard_list"], fmt.Sprintf("Blackboard contains 1 object(s):\n[0] Png (image/png, %d bytes)", n); got != want {
		t.Errorf("blackboard_list = %q, want %q", got, want)
	}
	if got, want := content["blackboard_last"], fmt.Sprintf("Last Png:\nchart.Png (image/png, %d bytes)", n); got != want {
		t.Errorf("blackboard_last = %q, want %q", got, want)
	}
	want := blobObject("chart.Png", "image/png", chartPNG)
	wantAsset := &toolpb.Asset{Object: want, Tool: "render_chart"}
	for _, a := range assetEvents {
		a.CallId = "" // checked below
	}
	if diff := cmp.Diff([]*toolpb.Asset{wantAsset}, assetEvents, protocmp.Transform()); diff != "" {
		t.Errorf("asset_added events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{want, want}, captured, protocmp.Transform()); diff != "" {
		t.Errorf("artifact events: the asset and the blackboard+archive rule, not the CEL rule (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{want}, changed, protocmp.Transform()); diff != "" {
		t.Errorf("blackboard_changed events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]tool.Entry{{TypeName: "chart.Png", Data: chartPNG, MediaType: "image/png"}}, archive.Items()); diff != "" {
		t.Errorf("the program's sink (-want +got):\n%s", diff)
	}
	if got := celArchive.Items(); len(got) != 0 {
		t.Errorf("a rule with a CEL predicate took a blob: %+v", got)
	}

	r, err := e.cl.GetRun(ctx, "chart-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{want}, r.GetBlackboard(), protocmp.Transform()); diff != "" {
		t.Errorf("GetRun blackboard (-want +got):\n%s", diff)
	}
	if len(r.GetAssets()) != 1 || r.GetAssets()[0].GetCallId() == "" {
		t.Fatalf("GetRun assets %v", r.GetAssets())
	}
	wantAsset.CallId = r.GetAssets()[0].GetCallId()
	if diff := cmp.Diff([]*toolpb.Asset{wantAsset}, r.GetAssets(), protocmp.Transform()); diff != "" {
		t.Errorf("GetRun assets (-want +got):\n%s", diff)
	}
}

// TestBlobOverTheEventBound: a blob over wire.MaxEventBlobBytes reaches the client's
// events without its bytes, its type name, media type and size saying what it is; GetRun
// carries the bytes.
func TestBlobOverTheEventBound(t *testing.T) {
	size := wire.MaxEventBlobBytes + 1
	script := scripted.Script{Name: "poster", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("render_poster", `{}`)},
		{Reply: scripted.Reply{Text: "Printed."}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Loop.MaxArtifactBytes = 2 << 20
		c.Tools = map[string]config.Tool{"render_poster": {
			Artifacts: []config.ArtifactSink{{Sinks: []string{"blackboard"}}},
			Assets:    []config.ArtifactFilter{{Type: "Pdf"}},
		}}
	}})
	e.startWorker("w1", chartsGroup(size, nil, nil))
	ctx := testContext(t)
	var objects []*toolpb.BlackboardObject
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "poster-1", Prompt: "poster", ToolGroups: []string{"charts"}}, func(ev *toolpb.RunResponse) {
		if a := ev.GetAssetAdded(); a != nil {
			objects = append(objects, a.GetAsset().GetObject())
		}
		if c := ev.GetBlackboardChanged(); c != nil {
			objects = append(objects, c.GetObject())
		}
		if a := ev.GetArtifact(); a != nil {
			objects = append(objects, a.GetObject())
		}
	}); err != nil {
		t.Fatal(err)
	}
	bare := &toolpb.BlackboardObject{TypeName: "poster.Pdf", MediaType: "application/pdf", Size: int64(size)}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{bare, bare, bare, bare}, objects, protocmp.Transform()); diff != "" {
		t.Errorf("events: asset_added, artifact, blackboard_changed, artifact (-want +got):\n%s", diff)
	}
	r, err := e.cl.GetRun(ctx, "poster-1")
	if err != nil {
		t.Fatal(err)
	}
	poster := bytes.Repeat([]byte{0xa5}, size)
	if a := r.GetAssets(); len(a) != 1 || !bytes.Equal(a[0].GetObject().GetData(), poster) || a[0].GetObject().GetSize() != int64(size) {
		for _, x := range a {
			t.Errorf("GetRun's asset %s has %d bytes of data, size %d", x.GetObject().GetTypeName(), len(x.GetObject().GetData()), x.GetObject().GetSize())
		}
		t.Errorf("GetRun has %d assets, want 1 with the poster's %d bytes", len(a), size)
	}
	if b := r.GetBlackboard(); len(b) != 1 || !bytes.Equal(b[0].GetData(), poster) {
		t.Errorf("GetRun's blackboard: %d objects", len(b))
	}
}

// TestAgenticToolCapturesABlob: a simple agentic tool whose sub-tool, on a worker,
// returns a PNG returns that PNG as its own artifact, which the agentic tool's own asset
// rule keeps.
func TestAgenticToolCapturesABlob(t *testing.T) {
	script := scripted.Script{Name: "report", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "report", Turn: 1}, Reply: scriptedCall("report", `{}`)},
		{When: scripted.When{HasTool: "report"}, Reply: scripted.Reply{Text: "The report is ready."}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("render_chart", `{}`)},
		{Reply: scripted.Reply{Text: "Charted."}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Tools = map[string]config.Tool{"report": {Assets: []config.ArtifactFilter{{Type: "Png"}}}}
	}})
	e.startWorker("w1", chartsGroup(0, nil, nil))
	ctx := testContext(t)
	req := &toolpb.RunRequest{RunId: "report-1", Prompt: "report", Tools: []string{"report"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "report", Description: "Makes a report.", Kind: toolpb.AgenticKind_AGENTIC_KIND_SIMPLE, Tools: []string{"render_chart"},
	}}}
	var outer *toolpb.Artifact
	if _, err := e.cl.RunAndWait(ctx, req, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "report" && ev.GetScope() == nil {
			outer = f.GetArtifact()
		}
	}); err != nil {
		t.Fatal(err)
	}
	want := &toolpb.Artifact{TypeName: "chart.Png", Payload: &toolpb.Artifact_Data{Data: chartPNG}, MediaType: "image/png"}
	if diff := cmp.Diff(want, outer, protocmp.Transform()); diff != "" {
		t.Errorf("the agentic tool's artifact (-want +got):\n%s", diff)
	}
	r, err := e.cl.GetRun(ctx, "report-1")
	if err != nil {
		t.Fatal(err)
	}
	if a := r.GetAssets(); len(a) != 1 || a[0].GetTool() != "report" || !bytes.Equal(a[0].GetObject().GetData(), chartPNG) || a[0].GetObject().GetMediaType() != "image/png" {
		t.Errorf("GetRun assets %v", a)
	}
}

// TestBlobSurvivesAResume: a run whose worker returned a PNG, stopped by a shutdown and
// resumed on a second orchestrator, replays the call from its journal (the worker is
// not called again) and has the PNG, byte for byte, on its blackboard and in its assets.
func TestBlobSurvivesAResume(t *testing.T) {
	ctx := testContext(t)
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	script := scripted.Script{Name: "resume", Rules: []scripted.Rule{
		{When: scripted.When{Tool: "gate"}, Reply: scripted.Reply{Text: "done"}},
		{When: scripted.When{Tool: "render_chart"}, Reply: scriptedCall("gate", `{}`)},
		{Reply: scriptedCall("render_chart", `{}`)},
	}}
	configure := func(c *config.Config) {
		c.Groups = map[string]config.Group{"charts": {
			Artifacts: []config.ArtifactSink{{ArtifactFilter: config.ArtifactFilter{Type: "Png"}, Sinks: []string{"blackboard"}}},
			Assets:    []config.ArtifactFilter{{Type: "Png"}},
		}}
	}
	var firstCalls, secondCalls atomic.Int32
	e1 := newEnv(t, envOptions{journal: j, script: script, configure: configure})
	e1.startWorker("w-1", chartsGroup(0, make(chan struct{}), &firstCalls))
	first, stop := context.WithCancel(ctx)
	for ev, err := range e1.cl.Run(first, &toolpb.RunRequest{RunId: "chart-r", Prompt: "go", ToolGroups: []string{"charts"}, Detached: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "gate" {
			break
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx)
	cancel()

	release := make(chan struct{})
	close(release)
	e2 := newEnv(t, envOptions{journal: j, script: script, configure: configure})
	e2.startWorker("w-2", chartsGroup(0, release, &secondCalls))
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	var assetEvents []*toolpb.BlackboardObject
	var final string
	for ev, err := range e2.cl.Watch(ctx, "chart-r", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetAssetAdded(); a != nil {
			assetEvents = append(assetEvents, a.GetAsset().GetObject())
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if final != "done" || firstCalls.Load() != 1 || secondCalls.Load() != 0 {
		t.Errorf("final %q; render_chart ran %d time(s) before the resume and %d after, want 1 and 0", final, firstCalls.Load(), secondCalls.Load())
	}
	want := blobObject("chart.Png", "image/png", chartPNG)
	if diff := cmp.Diff([]*toolpb.BlackboardObject{want}, assetEvents, protocmp.Transform()); diff != "" {
		t.Errorf("asset_added events the watch shows (-want +got):\n%s", diff)
	}
	r, err := e2.cl.GetRun(ctx, "chart-r")
	if err != nil {
		t.Fatal(err)
	}
	if r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("state %v", r.GetState())
	}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{want}, r.GetBlackboard(), protocmp.Transform()); diff != "" {
		t.Errorf("GetRun blackboard after the resume (-want +got):\n%s", diff)
	}
	if a := r.GetAssets(); len(a) != 1 || a[0].GetTool() != "render_chart" || !cmp.Equal(want, a[0].GetObject(), protocmp.Transform()) {
		t.Errorf("GetRun assets after the resume: %v", a)
	}
}

// TestWorkerPutsABlobOnTheBlackboard: a worker tool adds a blob to the run's blackboard
// itself (tool.BlackboardFrom(ctx).Add), across the wire; GetRun lists it with its bytes.
func TestWorkerPutsABlobOnTheBlackboard(t *testing.T) {
	pin := tool.New("pin_chart", "Pins a chart.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "chart.Png", Data: chartPNG, MediaType: "image/png"}); err != nil {
			return tool.Result{}, err
		}
		return tool.Text("pinned"), nil
	})
	script := scripted.Script{Name: "pin", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("pin_chart", `{}`)},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", worker.Group{Role: "pins", Tools: []tool.Tool{pin}})
	ctx := testContext(t)
	var content string
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "pin-1", Prompt: "pin", ToolGroups: []string{"pins"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil {
			content = f.GetContent()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if content != "pinned" {
		t.Fatalf("pin_chart answered %q", content)
	}
	r, err := e.cl.GetRun(ctx, "pin-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*toolpb.BlackboardObject{blobObject("chart.Png", "image/png", chartPNG)}, r.GetBlackboard(), protocmp.Transform()); diff != "" {
		t.Errorf("GetRun blackboard (-want +got):\n%s", diff)
	}
}
