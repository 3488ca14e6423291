package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// accumulator assembles the events of a streamed message into an answer.
type accumulator struct {
	events int
	text   strings.Builder
	calls  []*llm.ToolCall
	// blocks maps the index of a tool_use content block to its position in calls.
	blocks map[int64]int
	// startInput is the input a tool_use block started with, by position in calls.
	startInput map[int]string
	stop       string // the stop reason
	stopped    bool   // message_stop arrived
	model      string // as the API names it, else as requested
	usage      llm.Usage
}

func newAccumulator(model string) *accumulator {
	return &accumulator{blocks: make(map[int64]int), startInput: make(map[int]string), model: model}
}

func inputTokens(in, cacheCreation, cacheRead int64) int64 { return in + cacheCreation + cacheRead }

// add takes one event and returns the deltas to yield for it.
func (a *accumulator) add(e anthropic.MessageStreamEventUnion) []llm.Chunk {
	a.events++
	switch e.Type {
	case "message_start":
		m := e.Message
		if m.Model != "" {
			a.model = string(m.Model)
		}
		u := m.Usage
		a.usage = llm.Usage{InputTokens: inputTokens(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens), OutputTokens: u.OutputTokens}
	case "content_block_start":
		cb := e.ContentBlock
		switch cb.Type {
		case "tool_use":
			pos := len(a.calls)
			a.calls = append(a.calls, &llm.ToolCall{ID: cb.ID, Name: cb.Name})
			a.blocks[e.Index] = pos
			a.startInput[pos] = cb.JSON.Input.Raw()
			return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, ID: cb.ID, Name: cb.Name}}}
		case "text":
			if cb.Text != "" {
				a.text.WriteString(cb.Text)
				return []llm.Chunk{{TextDelta: cb.Text}}
			}
		}
	case "content_block_delta":
		d := e.Delta
		switch d.Type {
		case "text_delta":
			if d.Text != "" {
				a.text.WriteString(d.Text)
				return []llm.Chunk{{TextDelta: d.Text}}
			}
		case "input_json_delta":
			pos, ok := a.blocks[e.Index]
			if !ok || d.PartialJSON == "" {
				return nil
			}
			a.calls[pos].Arguments += d.PartialJSON
			return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, Arguments: d.PartialJSON}}}
		}
	case "content_block_stop":
		pos, ok := a.blocks[e.Index]
		if !ok || a.calls[pos].Arguments != "" {
			return nil
		}
		// No input arrived in pieces: the input is the one the block started with, or none.
		args := "{}"
		if raw := strings.TrimSpace(a.startInput[pos]); raw != "" && raw != "null" && raw != "{}" {
			var b bytes.Buffer
			if json.Compact(&b, []byte(raw)) == nil {
				args = b.String()
			}
		}
		a.calls[pos].Arguments = args
		return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, Arguments: args}}}
	case "message_delta":
		if e.Delta.StopReason != "" {
			a.stop = string(e.Delta.StopReason)
		}
		u := e.Usage
		if u.JSON.OutputTokens.Valid() {
			a.usage.OutputTokens = u.OutputTokens
		}
		if in := inputTokens(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens); in > 0 {
			a.usage.InputTokens = in // the counts of message_delta are cumulative
		}
	case "message_stop":
		a.stopped = true
	}
	return nil
}

// finish returns the assembled answer, or the failure of a stream that ended without one.
func (a *accumulator) finish() (*llm.Response, *llm.Failure) {
	if a.events == 0 {
		return nil, malformedFailure(0, "the answer held no stream events", nil)
	}
	if !a.stopped {
		f := networkFailure(nil)
		f.Err.Message = "the answer stream ended before message_stop"
		return nil, f
	}
	resp := &llm.Response{
		Text:         a.text.String(),
		Usage:        a.usage,
		FinishReason: a.stop,
		Model:        Name + "/" + a.model,
	}
	for _, c := range a.calls {
		resp.ToolCalls = append(resp.ToolCalls, *c)
	}
	return resp, nil
}
