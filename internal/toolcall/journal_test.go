package toolcall_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// partsResult is a result as an MCP server's content makes it: its text for a model
// that reads text alone, its parts, and its first image as its artifact.
func partsResult() tool.Result {
	png := []byte("\x89PNG\r\n\x1a\n not really an image")
	parts := []tool.Part{
		{Kind: tool.PartText, Text: "the chart:"},
		{Kind: tool.PartImage, Data: png, MediaType: "image/png"},
		{Kind: tool.PartAudio, Data: []byte("RIFF"), MediaType: "audio/wav"},
		{Kind: tool.PartResource, URI: "test://notes", MediaType: "text/plain", Text: "a note"},
		{Kind: tool.PartResource, URI: "test://empty", MediaType: "application/octet-stream", Data: []byte{}},
		{Kind: tool.PartResourceLink, URI: "test://more", Name: "more"},
	}
	p := &tool.Parts{Items: parts}
	return tool.Result{Kind: tool.KindArtifact, Content: p.Text(), Parts: p,
		Artifact: &tool.Artifact{TypeName: "mcp.chart", Data: png, MediaType: "image/png"}}
}

// TestResultPartsReplay: a result's parts (an MCP server's images, audio, resources) are
// in its journaled outcome, so that a resumed run replays them as they came — the model
// gets the same images in the same request as without the crash.
func TestResultPartsReplay(t *testing.T) {
	sends := 0
	d := toolcall.Dispatcher{Worker: "mcp:charts", Send: func(context.Context) (tool.Result, []byte) {
		sends++
		return partsResult(), nil
	}}
	ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, &journal{})
	first, _ := toolcall.Journaled(ctx, "chart", true, d)
	replayed, _ := toolcall.Journaled(ctx, "chart", true, d)
	if sends != 1 {
		t.Fatalf("%d sends, want 1 (the second call replays)", sends)
	}
	if diff := cmp.Diff(first, replayed); diff != "" {
		t.Errorf("the replayed result differs from the first (-first +replayed):\n%s", diff)
	}
	if data := replayed.Parts.List()[4].Data; data == nil {
		t.Error("an empty blob replays as no blob")
	}

	// A content text of its own (not the parts' text) and an artifact that is none of
	// the parts are kept as they are: its JSON byte for byte, compact, indented or not
	// JSON at all (it was compacted, and dropped when not JSON).
	for _, art := range []string{`{"points":3}`, "{\n  \"points\": 3\n}", `{"points":`} {
		res := partsResult()
		res.Content = "something else"
		res.Artifact = &tool.Artifact{TypeName: "mcp.chart", JSON: []byte(art)}
		got, err := toolcall.DecodeResult(toolcall.EncodeResult(res))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res, got); diff != "" {
			t.Errorf("round trip of an artifact %q (-want +got):\n%s", art, diff)
		}
	}
}

// TestLargestResultFitsARecord: the largest result an MCP server may answer (4 MiB of
// parts) is one journal record, whether it is text or an image that is also its
// artifact: the parts' text and the artifact's bytes are not recorded twice.
func TestLargestResultFitsARecord(t *testing.T) {
	const most = 4 << 20 // what an MCP call may answer
	text := &tool.Parts{Items: []tool.Part{{Kind: tool.PartText, Text: strings.Repeat("a", most/2)}, {Kind: tool.PartText, Text: strings.Repeat("b", most/2-1)}}}
	img := make([]byte, most)
	image := &tool.Parts{Items: []tool.Part{{Kind: tool.PartImage, Data: img, MediaType: "image/png"}}}
	for name, res := range map[string]tool.Result{
		"text":  {Content: text.Text(), Parts: text},
		"image": {Kind: tool.KindArtifact, Content: image.Text(), Parts: image, Artifact: &tool.Artifact{TypeName: "mcp.x", Data: img, MediaType: "image/png"}},
	} {
		b := toolcall.EncodeResult(res)
		if len(b) > runlog.MaxSealedRecordBytes {
			t.Errorf("%s: the record is %d bytes, over the %d of an encrypted journal's record", name, len(b), runlog.MaxSealedRecordBytes)
		}
		got, err := toolcall.DecodeResult(b)
		if err != nil || got.Content != res.Content || len(got.Parts.List()) != len(res.Parts.List()) {
			t.Errorf("%s: round trip lost its content or parts (%v)", name, err)
		}
	}
}
