package decorators

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Bounds limit what a tool call returns.
type Bounds struct {
	// MaxTextBytes bounds the text the model reads; a longer text is cut at a character
	// boundary and ends with a note saying how long it was. Zero: no bound.
	MaxTextBytes int
	// MaxArtifactBytes bounds an artifact; a larger one makes the result an error the
	// model reads, so that nothing downstream holds it. Zero: no bound.
	MaxArtifactBytes int
}

// BoundLayer keeps every result within b.
func BoundLayer(b Bounds) toolcall.Layer {
	return toolcall.Layer{Name: LayerBound, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		if b.MaxTextBytes <= 0 && b.MaxArtifactBytes <= 0 {
			return nil
		}
		name := t.Definition().Name
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				res, err := next(ctx, c)
				if err != nil {
					return res, err
				}
				return bound(b, name, res), nil
			}
		}
	}}
}

// OutputBound wraps t so that its results stay within b (BoundLayer).
func OutputBound(b Bounds) Decorator { return layer(BoundLayer(b)) }

// bound is res within b.
func bound(b Bounds, name string, res tool.Result) tool.Result {
	if a := res.Artifact; a != nil && b.MaxArtifactBytes > 0 {
		if a.JSON == nil && a.Data == nil && a.Value != nil {
			// Measured as it will travel; the layers above read the JSON made here.
			j, err := json.Marshal(a.Value)
			if err != nil {
				return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' returned an artifact of type %q that cannot be encoded as JSON: %v", name, a.TypeName, err))
			}
			cp := *a
			cp.JSON = j
			res.Artifact = &cp
			a = &cp
		}
		if n := len(a.JSON) + len(a.Data); n > b.MaxArtifactBytes {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf(
				"tool '%s' returned an artifact of %d bytes, over the %d bytes an artifact may have; it was dropped. Call it again in a way that returns less.",
				name, n, b.MaxArtifactBytes))
		}
	}
	if b.MaxTextBytes > 0 {
		res.Content = toolinternal.Truncate(res.Content, b.MaxTextBytes)
	}
	return res
}
