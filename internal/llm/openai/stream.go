package openai

import (
	"errors"
	"strconv"

	"github.com/openai/openai-go/v3"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// accumulator assembles the chunks of a streamed chat completion into an answer.
type accumulator struct {
	llm.Draft
	// slots maps the index a server gives a tool call to its position in Calls.
	slots map[int64]int
}

func newAccumulator(model string) *accumulator {
	return &accumulator{Draft: llm.Draft{Model: model}, slots: make(map[int64]int)}
}

// Add takes one chunk and returns the deltas to yield for it.
func (a *accumulator) Add(c openai.ChatCompletionChunk) []llm.Chunk {
	if c.Model != "" {
		a.Model = c.Model
	}
	if c.JSON.Usage.Valid() {
		a.Usage = llm.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	var out []llm.Chunk
	for _, choice := range c.Choices {
		if choice.Index != 0 {
			continue // only one answer is asked for
		}
		d := choice.Delta
		for _, s := range []string{d.Content, d.Refusal} {
			if s != "" {
				a.Text.WriteString(s)
				out = append(out, llm.Chunk{TextDelta: s})
			}
		}
		for _, tc := range d.ToolCalls {
			if delta := a.addCall(tc); delta != nil {
				out = append(out, llm.Chunk{ToolCallDelta: delta})
			}
		}
		if choice.FinishReason != "" {
			a.FinishReason = choice.FinishReason
		}
	}
	return out
}

// addCall adds a tool-call fragment and returns the delta to yield, if any. Fragments are
// joined by the index the server gives; a fragment with another ID than the call at its
// index starts a new call, for servers that give every call index 0. The ID and name are
// taken from the first fragment that has them, and yielded once.
func (a *accumulator) addCall(tc openai.ChatCompletionChunkChoiceDeltaToolCall) *llm.ToolCallDelta {
	pos, ok := a.slots[tc.Index]
	if !ok || tc.ID != "" && a.Calls[pos].ID != "" && a.Calls[pos].ID != tc.ID {
		pos = len(a.Calls)
		a.Calls = append(a.Calls, &llm.ToolCall{})
		a.slots[tc.Index] = pos
	}
	call := a.Calls[pos]
	delta := &llm.ToolCallDelta{Index: pos, Arguments: tc.Function.Arguments}
	if tc.ID != "" && call.ID == "" {
		call.ID, delta.ID = tc.ID, tc.ID
	}
	if name := tc.Function.Name; name != "" && call.Name == "" {
		call.Name, delta.Name = name, name
	}
	call.Arguments += tc.Function.Arguments
	if delta.ID == "" && delta.Name == "" && delta.Arguments == "" {
		return nil
	}
	return delta
}

// errNoFinishReason ends an answer whose stream stopped before a finish reason.
var errNoFinishReason = errors.New("the answer stream ended before the answer was complete")

// Finish returns the assembled answer; a call without an ID is given one by its position.
func (a *accumulator) Finish() (*llm.Response, error) {
	if a.FinishReason == "" {
		return nil, errNoFinishReason
	}
	for i, c := range a.Calls {
		if c.ID == "" {
			c.ID = "call_" + strconv.Itoa(i)
		}
	}
	return a.Response(Name), nil
}
