package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// accumulator assembles the events of a streamed message into an answer.
type accumulator struct {
	llm.Draft
	// blocks maps the index of a tool_use content block to its position in Calls.
	blocks map[int64]int
	// startInput is the input a tool_use block started with, by position in Calls.
	startInput map[int]string
	stopped    bool // message_stop arrived
}

func newAccumulator(model string) *accumulator {
	return &accumulator{Draft: llm.Draft{Model: model}, blocks: make(map[int64]int), startInput: make(map[int]string)}
}

func inputTokens(in, cacheCreation, cacheRead int64) int64 { return in + cacheCreation + cacheRead }

// Add takes one event and returns the deltas to yield for it.
func (a *accumulator) Add(e anthropic.MessageStreamEventUnion) []llm.Chunk {
	switch e.Type {
	case "message_start":
		m := e.Message
		if m.Model != "" {
			a.Model = string(m.Model)
		}
		u := m.Usage
		a.Usage = llm.Usage{InputTokens: inputTokens(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens), OutputTokens: u.OutputTokens}
	case "content_block_start":
		cb := e.ContentBlock
		switch cb.Type {
		case "tool_use":
			pos := len(a.Calls)
			a.Calls = append(a.Calls, &llm.ToolCall{ID: cb.ID, Name: cb.Name})
			a.blocks[e.Index] = pos
			a.startInput[pos] = cb.JSON.Input.Raw()
			return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, ID: cb.ID, Name: cb.Name}}}
		case "text":
			if cb.Text != "" {
				a.Text.WriteString(cb.Text)
				return []llm.Chunk{{TextDelta: cb.Text}}
			}
		}
	case "content_block_delta":
		d := e.Delta
		switch d.Type {
		case "text_delta":
			if d.Text != "" {
				a.Text.WriteString(d.Text)
				return []llm.Chunk{{TextDelta: d.Text}}
			}
		case "input_json_delta":
			pos, ok := a.blocks[e.Index]
			if !ok || d.PartialJSON == "" {
				return nil
			}
			a.Calls[pos].Arguments += d.PartialJSON
			return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, Arguments: d.PartialJSON}}}
		}
	case "content_block_stop":
		pos, ok := a.blocks[e.Index]
		if !ok || a.Calls[pos].Arguments != "" {
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
		a.Calls[pos].Arguments = args
		return []llm.Chunk{{ToolCallDelta: &llm.ToolCallDelta{Index: pos, Arguments: args}}}
	case "message_delta":
		if e.Delta.StopReason != "" {
			a.FinishReason = string(e.Delta.StopReason)
		}
		u := e.Usage
		if u.JSON.OutputTokens.Valid() {
			a.Usage.OutputTokens = u.OutputTokens
		}
		if in := inputTokens(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens); in > 0 {
			a.Usage.InputTokens = in // the counts of message_delta are cumulative
		}
	case "message_stop":
		a.stopped = true
	}
	return nil
}

// errNoStop ends an answer whose stream stopped before message_stop.
var errNoStop = errors.New("the answer stream ended before message_stop")

// Finish returns the assembled answer.
func (a *accumulator) Finish() (*llm.Response, error) {
	if !a.stopped {
		return nil, errNoStop
	}
	return a.Response(Name), nil
}
