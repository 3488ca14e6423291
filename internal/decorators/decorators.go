// Package decorators holds the layers of a tool call that the orchestrator's config
// drives (toolcall.Layer): telemetry, events, one-shot, asset tracking, artifact sinks,
// replanning and the output bound. Chain (chain.go) compiles them from the config, in
// their order; the run service puts them in its pipeline. Each layer is also a
// Decorator of one tool (Telemetry, EventPublishing, TrackAssets, SinkArtifacts,
// ConditionalReplan, OutputBound), for programs that wrap tools of their own.
//
// It depends on internal/toolcall, pkg/tool, pkg/toolctx, internal/toolinternal, internal/telemetry and
// internal/process (the run state that the assets sink writes to); CEL
// (cel.dev/cel-go) evaluates the configured filters and transforms.
package decorators

import (
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Decorator wraps a tool.
type Decorator func(tool.Tool) tool.Tool

// Apply wraps t in ds, the first decorator innermost.
func Apply(t tool.Tool, ds ...Decorator) tool.Tool {
	for _, d := range ds {
		t = d(t)
	}
	return t
}

// layer is the decorator that runs a tool through l alone.
func layer(l toolcall.Layer) Decorator {
	p := toolcall.Pipeline{l}
	return p.Wrap
}

// ErrorMapping wraps t so that its returned errors reach the model as error results
// (control-flow signals pass), and a panic becomes one: the end of every pipeline
// (toolcall.Terminal), alone.
func ErrorMapping(t tool.Tool) tool.Tool { return toolcall.Pipeline{}.Wrap(t) }
