package scripted_test

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
)

func Example() {
	s, err := scripted.Parse([]byte(`
name: adder
rules:
  - when: {turn: 1, has_tool: add}
    reply:
      tool_calls:
        - name: add
          arguments: {a: 2, b: 3}
  - when: {tool: add}
    reply:
      text: 'The sum is {{ result "add" }}.'
`))
	if err != nil {
		panic(err)
	}
	p, err := scripted.New(s)
	if err != nil {
		panic(err)
	}
	req := &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "What is 2 + 3?"}},
		Tools:    []llm.ToolSpec{{Name: "add"}},
	}
	first, _ := llm.Collect(p.Stream(context.Background(), req))
	fmt.Println(first.FinishReason, first.ToolCalls[0].Name, first.ToolCalls[0].Arguments)

	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, ToolCalls: first.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: first.ToolCalls[0].ID, ToolName: "add", Text: "5"})
	final, _ := llm.Collect(p.Stream(context.Background(), req))
	fmt.Println(final.FinishReason, final.Model, final.Text)
	// Output:
	// tool_calls add {"a":2,"b":3}
	// stop scripted/adder The sum is 5.
}
