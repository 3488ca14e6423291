package loop_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestResultImagesReachTheModel: the images among a result's parts go with its tool
// message, up to MaxResultImages and MaxResultImageBytes (the rest are their
// placeholders in the text alone); other parts and an error's parts do not.
func TestResultImagesReachTheModel(t *testing.T) {
	img := func(n int) tool.Part {
		return tool.Part{Kind: tool.PartImage, MediaType: "image/png", Data: bytes.Repeat([]byte{1}, n)}
	}
	many := []tool.Part{{Kind: tool.PartText, Text: "chart"}, {Kind: tool.PartAudio, MediaType: "audio/wav", Data: []byte("RIFF")}}
	for range loop.MaxResultImages + 2 {
		many = append(many, img(10))
	}
	withParts := func(parts []tool.Part, isErr bool) tool.Result {
		res := tool.Text("chart")
		if isErr {
			res = tool.Error("failed")
		}
		res.Parts = &tool.Parts{Items: parts}
		return res
	}
	r := &recorder{}
	ts := []tool.Tool{
		r.fn("many", schema.Empty(), func(context.Context, string) (tool.Result, error) { return withParts(many, false), nil }),
		r.fn("big", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			return withParts([]tool.Part{img(loop.MaxResultImageBytes - 5), img(10)}, false), nil
		}),
		r.fn("broken", schema.Empty(), func(context.Context, string) (tool.Result, error) { return withParts([]tool.Part{img(10)}, true), nil }),
	}
	p := newScript(t, onTurn(1, calls(raw("many", `{}`), raw("big", `{}`), raw("broken", `{}`))), onTurn(2, text("ok")))
	res, err := loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("go")}, Tools: ts})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]int{2: loop.MaxResultImages, 3: 1, 4: 0} {
		if got := len(res.History[i].Images); got != want {
			t.Errorf("%s: %d images reach the model, want %d", res.History[i].ToolName, got, want)
		}
	}
}
