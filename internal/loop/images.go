package loop

import (
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Bounds of the images one tool result gives the model (an MCP server's image content):
// past them an image reaches the model as its placeholder text alone.
const (
	MaxResultImages     = 16
	MaxResultImageBytes = 4 << 20
)

// imagesOf are the images of o's result the model gets beside its text, within the
// bounds: none for an error.
func imagesOf(o outcome) []llm.Image {
	if o.isError || o.tool == nil {
		return nil
	}
	var out []llm.Image
	size := 0
	for _, p := range o.result.Parts.List() {
		if p.Kind != tool.PartImage || len(p.Data) == 0 {
			continue
		}
		if len(out) == MaxResultImages || size+len(p.Data) > MaxResultImageBytes {
			break
		}
		size += len(p.Data)
		out = append(out, llm.Image{MediaType: p.MediaType, Data: p.Data})
	}
	return out
}
