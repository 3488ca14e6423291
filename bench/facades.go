package progressive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// FirstRequestTools measures what facades save: it builds facades × toolsPerFacade
// tools of a typical size (a description of about a line, two parameters), runs a loop
// over them once flat and once grouped into facades (tool.Of), and returns the JSON of
// the tool definitions of the model's first request in each case, as a provider would
// send them ([{"name":..,"description":..,"parameters":..},..]). The bench harness
// reports the ratio of the two lengths.
func FirstRequestTools(ctx context.Context, facades, toolsPerFacade int) (withFacades, withoutFacades []byte, err error) {
	if facades <= 0 || toolsPerFacade <= 0 {
		return nil, nil, errors.New("progressive: FirstRequestTools needs at least one facade and one tool per facade")
	}
	var flat, folded []tool.Tool
	for f := range facades {
		children := make([]tool.Tool, 0, toolsPerFacade)
		for m := range toolsPerFacade {
			children = append(children, sampleTool(f, m))
		}
		flat = append(flat, children...)
		folded = append(folded, tool.Of(
			fmt.Sprintf("service_%02d", f),
			fmt.Sprintf("Operations on the records of service %d (%d tools). Call this tool to see them.", f, toolsPerFacade),
			children,
			tool.UsageNotes("Look a record up before you change it."),
		))
	}
	if withFacades, err = firstRequestTools(ctx, folded); err != nil {
		return nil, nil, err
	}
	if withoutFacades, err = firstRequestTools(ctx, flat); err != nil {
		return nil, nil, err
	}
	return withFacades, withoutFacades, nil
}

func sampleTool(f, m int) tool.Tool {
	return tool.New(
		fmt.Sprintf("service_%02d_operation_%03d", f, m),
		fmt.Sprintf("Runs operation %d of service %d on one record and returns the record as JSON.", m, f),
		schema.Params(
			schema.String("record_id", "Identifier of the record to work on"),
			schema.Integer("limit", "Maximum number of entries to return").AsOptional(),
		),
		func(context.Context, string) (tool.Result, error) { return tool.Text("{}"), nil },
	)
}

// firstRequestTools runs a loop whose model answers at once and returns the tools of
// its only request.
func firstRequestTools(ctx context.Context, tools []tool.Tool) ([]byte, error) {
	p := &firstRequest{}
	if _, err := loop.Run(ctx, loop.Options{Provider: p, MaxIterations: 1, Strategies: []loop.Strategy{New()}},
		loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}, Tools: tools}); err != nil {
		return nil, err
	}
	type spec struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	specs := make([]spec, len(p.tools))
	for i, t := range p.tools {
		specs[i] = spec{t.Name, t.Description, t.Parameters}
	}
	return json.Marshal(specs)
}

// firstRequest is a model that records the tools of the request it gets and answers "ok".
type firstRequest struct {
	mu    sync.Mutex
	tools []llm.ToolSpec
}

func (p *firstRequest) Name() string { return "measure" }

func (p *firstRequest) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		p.mu.Lock()
		p.tools = append([]llm.ToolSpec(nil), req.Tools...)
		p.mu.Unlock()
		yield(llm.Chunk{Done: &llm.Response{Text: "ok", FinishReason: "stop"}}, nil)
	}
}
