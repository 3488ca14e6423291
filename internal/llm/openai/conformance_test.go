package openai_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
)

// TestConformance runs the providers' shared suite against a server speaking Chat
// Completions.
func TestConformance(t *testing.T) {
	llmtest.Conformance(t, llmtest.Wire{
		Name: openai.Name, DefaultModel: "gpt-test", TextFinish: "stop", ToolsFinish: "tool_calls",
		New: func(t *testing.T, s *llmtest.Server) llm.Provider {
			return newProvider(t, s, func(o *openai.Options) { o.MaxRetries = 2 })
		},
		Answer: func(w http.ResponseWriter, a llmtest.Answer) {
			events := []string{chunk(`{"role":"assistant","content":""}`, "")}
			for _, d := range a.Text {
				b, _ := json.Marshal(map[string]string{"content": d})
				events = append(events, chunk(string(b), ""))
			}
			for i, c := range a.Calls {
				for j, piece := range c.Arguments {
					if j == 0 {
						events = append(events, chunk(toolDelta(i, c.ID, c.Name, piece), ""))
					} else {
						events = append(events, chunk(toolDelta(i, "", "", piece), ""))
					}
				}
			}
			events = append(events, chunk(`{}`, a.Finish), usage(a.InputTokens, a.OutputTokens))
			sse(w, events...)
		},
		Error: func(w http.ResponseWriter, status int, msg string) {
			writeError(w, status, errorBody(msg, "invalid_request_error", "test"))
		},
		Cut: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("data: " + chunk(`{"content":"partial"}`, "") + "\n\n"))
			w.(http.Flusher).Flush()
		},
		Decode: decodeChat,
	})
}

// decodeChat reads a Chat Completions request into the suite's form.
func decodeChat(t *testing.T, r llmtest.Request) llmtest.Sent {
	t.Helper()
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name, Arguments string
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name       string `json:"name"`
				Parameters any    `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		t.Fatalf("the request is not a Chat Completions request: %v", err)
	}
	sent := llmtest.Sent{Model: body.Model, MaxTokens: body.MaxTokens}
	for _, m := range body.Messages {
		switch m.Role {
		case "system":
			sent.System = m.Content
		case "tool":
			sent.Messages = append(sent.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: m.ToolCallID, Text: m.Content})
		default:
			msg := llm.Message{Role: llm.Role(m.Role), Text: m.Content}
			for _, c := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
			}
			sent.Messages = append(sent.Messages, msg)
		}
	}
	llmtest.FillToolNames(sent.Messages)
	for _, tl := range body.Tools {
		sent.Tools = append(sent.Tools, tl.Function.Name)
		sent.Schemas = append(sent.Schemas, tl.Function.Parameters)
	}
	return sent
}
