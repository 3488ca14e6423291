package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// component is a piece of a hop's work timed alone in this process: what the router or
// the worker SDK does per call besides moving bytes. It explains the CPU-per-call rows.
type component struct {
	ID    string
	Name  string
	Where string
	fn    func() error
}

// ComponentResult is a component's mean CPU time per call, median over rounds.
type ComponentResult struct {
	ID     string    `json:"id"`
	Name   string    `json:"name"`
	Where  string    `json:"where"`
	Us     float64   `json:"us"`
	Rounds []float64 `json:"rounds_us"`
}

func hopComponents() ([]component, error) {
	add, err := builtinAdd()
	if err != nil {
		return nil, err
	}
	schema := add.Definition().InputSchema
	bag := toolctx.MustOf(contextEntries...)
	codec := ctxcodec.Codec{}
	md, err := codec.Encode(bag)
	if err != nil {
		return nil, err
	}
	canonical, err := schema.Validate(Arguments)
	if err != nil {
		return nil, err
	}
	// The worker hands its tool the arguments it validated, marked as such.
	ctx := toolinternal.WithValidated(context.Background(), canonical)
	return []component{
		{ID: "validate", Name: "validate the arguments against the schema (schema.Schema.Validate)", Where: "the loop before dispatch; pkg/worker before the tool",
			fn: func() error { _, err := schema.Validate(Arguments); return err }},
		{ID: "typed-add", Name: "call the built-in typed add as the worker does (arguments already validated: decode; add; format)", Where: "the worker's tool",
			fn: func() error {
				res, err := add.Call(ctx, canonical)
				if err == nil && res.IsError() {
					err = fmt.Errorf("add: %s", res.Content)
				}
				return err
			}},
		{ID: "ctx-encode", Name: "encode the 4-key ToolCallContext as metadata pairs (ctxcodec.Codec.AppendPairs)", Where: "the router",
			fn: func() error { _, err := codec.AppendPairs(nil, bag); return err }},
		{ID: "ctx-decode", Name: "decode it from metadata (ctxcodec.Codec.Decode)", Where: "pkg/worker",
			fn: func() error { _, err := codec.Decode(md); return err }},
		{ID: "json-add", Name: "decode the arguments with encoding/json and add (what rawadd does)", Where: "the limit's handler",
			fn: func() error { _, err := peer.Add([]byte(Arguments)); return err }},
	}, nil
}

// measureComponent is the mean time per call over about d.
func measureComponent(c component, d time.Duration) (float64, error) {
	const batch = 64
	n := 0
	start := time.Now()
	for n == 0 || time.Since(start) < d {
		for range batch {
			if err := c.fn(); err != nil {
				return 0, fmt.Errorf("%s: %w", c.Name, err)
			}
		}
		n += batch
	}
	return us(time.Since(start)) / float64(n), nil
}
