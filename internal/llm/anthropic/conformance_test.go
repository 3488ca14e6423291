package anthropic_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/anthropic"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
)

// TestConformance runs the providers' shared suite against a server speaking the
// Messages API.
func TestConformance(t *testing.T) {
	llmtest.Conformance(t, llmtest.Wire{
		Name: anthropic.Name, DefaultModel: "claude-test", TextFinish: "end_turn", ToolsFinish: "tool_use", ErrorFlag: true,
		New: func(t *testing.T, s *llmtest.Server) llm.Provider {
			return newProvider(t, s, func(o *anthropic.Options) { o.MaxRetries = 2 })
		},
		Answer: func(w http.ResponseWriter, a llmtest.Answer) {
			events := []string{msgStart(a.InputTokens, 1), ping()}
			block := 0
			if len(a.Text) > 0 {
				events = append(events, textStart(block))
				for _, d := range a.Text {
					events = append(events, textDelta(block, d))
				}
				events = append(events, blockStop(block))
				block++
			}
			for _, c := range a.Calls {
				events = append(events, toolStart(block, c.ID, c.Name))
				for _, piece := range c.Arguments {
					events = append(events, jsonDelta(block, piece))
				}
				events = append(events, blockStop(block))
				block++
			}
			events = append(events, msgDelta(a.Finish, a.OutputTokens), msgStop())
			sse(w, events...)
		},
		Error: func(w http.ResponseWriter, status int, msg string) {
			// The API's error type for each status.
			typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
				429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}[status]
			writeError(w, status, errorBody(typ, msg))
		},
		Cut: func(w http.ResponseWriter) {
			sse(w, msgStart(1, 1), textStart(0), textDelta(0, "partial"))
		},
		Decode: decodeMessages,
	})
}

// decodeMessages reads a Messages API request into the suite's form.
func decodeMessages(t *testing.T, r llmtest.Request) llmtest.Sent {
	t.Helper()
	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   []block         `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	var body struct {
		Model     string  `json:"model"`
		MaxTokens int     `json:"max_tokens"`
		System    []block `json:"system"`
		Messages  []struct {
			Role    string  `json:"role"`
			Content []block `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string `json:"name"`
			InputSchema any    `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		t.Fatalf("the request is not a Messages request: %v", err)
	}
	sent := llmtest.Sent{Model: body.Model, MaxTokens: body.MaxTokens}
	var system []string
	for _, b := range body.System {
		system = append(system, b.Text)
	}
	sent.System = strings.Join(system, "\n")
	for _, m := range body.Messages {
		msg := llm.Message{Role: llm.Role(m.Role)}
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				msg.Text += b.Text
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
			case "tool_result":
				var text string
				for _, c := range b.Content {
					text += c.Text
				}
				sent.Messages = append(sent.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: b.ToolUseID, Text: text, IsError: b.IsError})
			}
		}
		if msg.Text != "" || len(msg.ToolCalls) > 0 {
			sent.Messages = append(sent.Messages, msg)
		}
	}
	llmtest.FillToolNames(sent.Messages)
	for _, tl := range body.Tools {
		sent.Tools = append(sent.Tools, tl.Name)
		sent.Schemas = append(sent.Schemas, tl.InputSchema)
	}
	return sent
}
