package openai

import (
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// accumulator assembles the chunks of a streamed chat completion into an answer.
type accumulator struct {
	events int
	text   strings.Builder
	calls  []*llm.ToolCall
	// slots maps the index a server gives a tool call to its position in calls.
	slots  map[int64]int
	reason string // the finish reason
	model  string // as the server names it, else as requested
	usage  llm.Usage
}

func newAccumulator(model string) *accumulator {
	return &accumulator{slots: make(map[int64]int), model: model}
}

// add takes one chunk and returns the deltas to yield for it.
func (a *accumulator) add(c openai.ChatCompletionChunk) []llm.Chunk {
	a.events++
	if c.Model != "" {
		a.model = c.Model
	}
	if c.JSON.Usage.Valid() {
		a.usage = llm.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	var out []llm.Chunk
	for _, choice := range c.Choices {
		if choice.Index != 0 {
			continue // only one answer is asked for
		}
		d := choice.Delta
		for _, s := range []string{d.Content, d.Refusal} {
			if s != "" {
				a.text.WriteString(s)
				out = append(out, llm.Chunk{TextDelta: s})
			}
		}
		for _, tc := range d.ToolCalls {
			if delta := a.addCall(tc); delta != nil {
				out = append(out, llm.Chunk{ToolCallDelta: delta})
			}
		}
		if choice.FinishReason != "" {
			a.reason = choice.FinishReason
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
	if !ok || tc.ID != "" && a.calls[pos].ID != "" && a.calls[pos].ID != tc.ID {
		pos = len(a.calls)
		a.calls = append(a.calls, &llm.ToolCall{})
		a.slots[tc.Index] = pos
	}
	call := a.calls[pos]
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

// finish returns the assembled answer, or the failure of a stream that ended without one.
func (a *accumulator) finish() (*llm.Response, *llm.Failure) {
	if a.events == 0 {
		return nil, malformedFailure(0, "the answer held no stream events", nil)
	}
	if a.reason == "" {
		f := networkFailure(nil)
		f.Err.Message = "the answer stream ended before the answer was complete"
		return nil, f
	}
	resp := &llm.Response{
		Text:         a.text.String(),
		Usage:        a.usage,
		FinishReason: a.reason,
		Model:        Name + "/" + a.model,
	}
	for i, c := range a.calls {
		call := *c
		if call.ID == "" {
			call.ID = "call_" + strconv.Itoa(i)
		}
		resp.ToolCalls = append(resp.ToolCalls, call)
	}
	return resp, nil
}
