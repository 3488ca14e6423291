package decorators

import (
	"context"
	"encoding/json"
	"fmt"

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

// bounded applies Bounds to every result.
type bounded struct {
	base
	b Bounds
}

// OutputBound wraps t so that its results stay within b.
func OutputBound(b Bounds) Decorator {
	return func(t tool.Tool) tool.Tool { return bounded{base{t}, b} }
}

func (o bounded) Call(ctx context.Context, input string) (tool.Result, error) {
	res, err := o.d.Call(ctx, input)
	if err != nil {
		return res, err
	}
	if a := res.Artifact; a != nil && o.b.MaxArtifactBytes > 0 {
		if a.JSON == nil && a.Data == nil && a.Value != nil {
			// Measured as it will travel; the layers above read the JSON made here.
			b, err := json.Marshal(a.Value)
			if err != nil {
				return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' returned an artifact of type %q that cannot be encoded as JSON: %v", o.d.Definition().Name, a.TypeName, err)), nil
			}
			cp := *a
			cp.JSON = b
			res.Artifact = &cp
			a = &cp
		}
		if n := len(a.JSON) + len(a.Data); n > o.b.MaxArtifactBytes {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf(
				"tool '%s' returned an artifact of %d bytes, over the %d bytes an artifact may have; it was dropped. Call it again in a way that returns less.",
				o.d.Definition().Name, n, o.b.MaxArtifactBytes)), nil
		}
	}
	if o.b.MaxTextBytes > 0 {
		res.Content = toolinternal.Truncate(res.Content, o.b.MaxTextBytes)
	}
	return res, nil
}
