// Package llm defines the model-provider contract of the orchestrator: a provider takes a
// conversation and the visible tool definitions and streams back text and tool calls.
//
// Providers live in sub-packages (scripted, and the real ones). This package must not
// import gRPC, generated protos or the loop.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
)

// Role is who wrote a message.
type Role string

// Message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one call the model asked for.
type ToolCall struct {
	// ID identifies the call within the conversation.
	ID string
	// Name is the tool the model named; it may not exist.
	Name string
	// Arguments is the JSON text the model produced; it may be invalid.
	Arguments string
}

// Message is one message of a conversation.
//
// A user or system message has Text. An assistant message has Text and/or ToolCalls.
// A tool message answers one tool call: ToolCallID, ToolName, Text, IsError.
type Message struct {
	Role       Role
	Text       string
	ToolCalls  []ToolCall
	ToolCallID string
	ToolName   string
	IsError    bool
	// Images are the images of a tool message's result, for a provider whose API takes
	// images in a tool result; Text holds a placeholder for each, which is all a provider
	// that takes none sends.
	Images []Image
}

// Image is an image a tool returned: its bytes and their media type ("image/png").
type Image struct {
	MediaType string
	Data      []byte
}

// ToolSpec is a tool as the model sees it.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage
}

// Request is one model call. Neither the caller nor the provider changes a request once
// it is sent, or what it refers to (its messages, their tool calls, its tool specs): a
// loop's requests share its history and tool specs, and a provider may keep a request.
type Request struct {
	// Model is the provider-specific model name; empty means the provider's default.
	Model string
	// System is the system prompt, kept apart because providers place it differently.
	System   string
	Messages []Message
	Tools    []ToolSpec
	// OutputSchema, when set, asks for a final answer that is JSON of this schema.
	OutputSchema json.RawMessage
	Temperature  *float64
	// MaxOutputTokens bounds the answer; zero means the provider's default.
	MaxOutputTokens int
}

// Usage counts the tokens of one model call.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens}
}

// Response is a complete model answer.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	// FinishReason is the provider's reason, such as "stop" or "tool_calls".
	FinishReason string
	// Model is the model that answered, as "provider/model".
	Model string
}

// Chunk is one piece of a streamed answer. Exactly one field is set; the last chunk of a
// successful stream carries Done.
type Chunk struct {
	// TextDelta is more answer text.
	TextDelta string
	// ToolCallDelta is part of a tool call: ID and Name arrive first, Arguments in pieces.
	ToolCallDelta *ToolCallDelta
	// Done is the assembled answer.
	Done *Response
}

// ToolCallDelta is a fragment of a tool call in a streamed answer.
type ToolCallDelta struct {
	// Index is the position of the call in the answer.
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Provider is a model behind an API. Stream must honour ctx: when it is cancelled the
// stream ends with ctx's error. Implementations are safe for concurrent use.
type Provider interface {
	// Name is the provider's name, such as "openai" or "scripted".
	Name() string
	// Stream sends req and yields the answer as it arrives.
	Stream(ctx context.Context, req *Request) iter.Seq2[Chunk, error]
}

// ErrNoFinalChunk is returned by Collect when a stream ended without a Done chunk.
var ErrNoFinalChunk = errors.New("llm: stream ended without a final answer")

// Collect drains a stream and returns the assembled answer. When the provider sends a
// Done chunk it wins; the deltas are only used to check the stream was well formed.
func Collect(seq iter.Seq2[Chunk, error]) (*Response, error) {
	var text strings.Builder
	for c, err := range seq {
		if err != nil {
			return nil, err
		}
		if c.Done != nil {
			return c.Done, nil
		}
		text.WriteString(c.TextDelta)
	}
	return nil, ErrNoFinalChunk
}

// DefaultModeler is implemented by providers that can name the model they use when a
// request names none.
type DefaultModeler interface {
	DefaultModel() string
}

// Label names the model a request will use as "provider/model" (model may itself
// contain slashes, as in "openai/meta-llama/Llama-3"); with no model it names the
// provider's default model, or just the provider.
func Label(p Provider, model string) string {
	if model == "" {
		if d, ok := p.(DefaultModeler); ok {
			model = d.DefaultModel()
		}
	}
	if model == "" {
		return p.Name()
	}
	return p.Name() + "/" + model
}
