package decorators

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Names of the built-in sinks.
const (
	SinkBlackboard = "blackboard"
	SinkAssets     = "assets"
)

// ErrNoProcess fails an assets sink used outside a run.
var ErrNoProcess = errors.New("no run is available to keep the asset")

// AssetsSink adds captures to the run's assets.
var AssetsSink Sink = SinkFunc(func(ctx context.Context, c Capture) error {
	p := process.FromContext(ctx)
	if p == nil {
		return ErrNoProcess
	}
	return p.AddAsset(process.Asset{Entry: c.Entry, Tool: c.Tool, CallID: c.CallID}, c.LoopID)
})

// TrackAssets wraps t so that the artifacts sel takes join the run's assets, which
// GetRun lists and the client hears of as events.
func TrackAssets(t tool.Tool, sel Selector) tool.Tool {
	return layer(SinkLayer(LayerAssets, func(tool.Tool) []Sinking { return []Sinking{{sel, AssetsSink, SinkAssets}} }))(t)
}
