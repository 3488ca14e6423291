package tool_test

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Shade is a color of paint: its values hold wherever a Shade appears in an input.
type Shade string

func (Shade) EnumValues() []any { return []any{"white", "ochre", "slate"} }

type PaintOrder struct {
	Shade Shade   `json:"shade"`
	Size  string  `json:"size" jsonschema:"Can size" enum:"small,large"`
	Trims []Shade `json:"trims,omitempty"`
}

func ExampleEnum() {
	buy, err := tool.Func("buy_paint", "Order a can of paint", func(_ context.Context, in PaintOrder) (string, error) {
		return fmt.Sprintf("ordered a %s can of %s, trims %v", in.Size, in.Shade, in.Trims), nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(buy.Definition().InputSchema)
	res, _ := buy.Call(context.Background(), `{"shade":"ochre","size":"large","trims":["white"]}`)
	fmt.Println(res.Render())
	res, _ = buy.Call(context.Background(), `{"shade":"pink","size":"large"}`)
	fmt.Println(res.Render())
	// Output:
	// {"type":"object","properties":{"shade":{"type":"string","enum":["white","ochre","slate"]},"size":{"type":"string","description":"Can size","enum":["small","large"]},"trims":{"type":["null","array"],"items":{"type":"string","enum":["white","ochre","slate"]}}},"required":["shade","size"],"additionalProperties":false}
	// ordered a large can of ochre, trims [white]
	// Error: invalid arguments: property "shade": "pink" is not one of "white", "ochre", "slate"
}
