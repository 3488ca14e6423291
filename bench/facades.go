package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// firstRequestTools measures what facades save: it builds facades × toolsPerFacade
// tools of a typical size (a description of about a line, two parameters), runs a loop
// with the unfolding strategy over them once flat and once grouped into facades
// (tool.Of), and returns the tool definitions of the model's first request in each case
// as specsJSON writes them. The report gives the ratio of the two lengths.
//
// With domains > 0 the facades are themselves grouped, domains of them under each of
// facades/domains parent facades (a two-level tree, as a catalogue of thousands of tools
// is organised): the first request then carries the parents alone.
func firstRequestTools(ctx context.Context, facades, toolsPerFacade, domains int) (withFacades, withoutFacades []byte, err error) {
	if facades <= 0 || toolsPerFacade <= 0 || domains < 0 || (domains > 0 && facades%domains != 0) {
		return nil, nil, errors.New("bench: firstRequestTools needs at least one facade, one tool per facade, and domains that divide the facades")
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
	if domains > 0 {
		per := facades / domains
		var parents []tool.Tool
		for d := range domains {
			parents = append(parents, tool.Of(
				fmt.Sprintf("domain_%02d", d),
				fmt.Sprintf("The services of domain %d (%d services of %d tools each). Call this tool to see them.", d, per, toolsPerFacade),
				folded[d*per:(d+1)*per],
			))
		}
		folded = parents
	}
	if withFacades, err = offeredFirst(ctx, folded); err != nil {
		return nil, nil, err
	}
	if withoutFacades, err = offeredFirst(ctx, flat); err != nil {
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

// offeredFirst runs a loop whose model answers at once and returns the tool definitions
// of its only request.
func offeredFirst(ctx context.Context, tools []tool.Tool) ([]byte, error) {
	prov, err := answersOK("first-request")
	if err != nil {
		return nil, err
	}
	if _, err := loop.Run(ctx, loop.Options{Provider: prov, MaxIterations: 1, Strategies: []loop.Strategy{progressive.New()}},
		loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}, Tools: tools}); err != nil {
		return nil, err
	}
	reqs := prov.Requests()
	if len(reqs) != 1 {
		return nil, fmt.Errorf("the model saw %d requests, want 1", len(reqs))
	}
	return specsJSON(reqs[0].Tools)
}
