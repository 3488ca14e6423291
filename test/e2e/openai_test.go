package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// fakeOpenAI speaks the Chat Completions streaming wire format (server-sent events of
// chat.completion.chunk objects, usage in a last chunk, then [DONE]) as OpenAI documents
// it. It asks for add(2, 3) when the conversation has no tool result yet, and answers with
// the sum once it has one.
type fakeOpenAI struct {
	mu       sync.Mutex
	requests []map[string]any
	auth     []string
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()

	var toolResult string
	for _, m := range body["messages"].([]any) {
		if msg := m.(map[string]any); msg["role"] == "tool" {
			toolResult, _ = msg["content"].(string)
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake-2026",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	if toolResult == "" {
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": "call_abc", "type": "function",
			"function": map[string]any{"name": "add", "arguments": ""}}}}, nil)
		for _, part := range []string{`{"a": 2,`, ` "b"`, `: 3}`} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": part}}}}, nil)
		}
		chunk(map[string]any{}, "tool_calls")
	} else {
		chunk(map[string]any{"role": "assistant", "content": "The sum is "}, nil)
		chunk(map[string]any{"content": toolResult + "."}, nil)
		chunk(map[string]any{}, "stop")
	}
	usage, _ := json.Marshal(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake-2026",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", usage)
}

// TestOpenAICompatibleProvider: the orchestrator process, configured only through
// OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL, drives a two-step tool conversation
// with an OpenAI-compatible server; the tool runs on a worker process.
func TestOpenAICompatibleProvider(t *testing.T) {
	fake := &fakeOpenAI{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "test-key")
	t.Setenv("OPENAI_MODEL", "gpt-fake")
	t.Setenv("ANTHROPIC_API_KEY", "")

	m := startMesh(t, "", "provider: {name: auto}")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "What is 2 + 3?", Tools: []string{"add"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "The sum is 5." {
		t.Errorf("final text %q", got)
	}
	if s := evs[0].GetStarted(); s.GetModel() != "openai/gpt-fake" {
		t.Errorf("started with model %q, want openai/gpt-fake", s.GetModel())
	}
	if f := finished(evs, 1); len(f) != 1 || f[0].GetContent() != "5" || f[0].GetWorkerId() != "math-1" {
		t.Errorf("tool call: %v", f)
	}
	var usage []*toolpb.Usage
	for _, ev := range evs {
		if u := ev.GetUsage(); u != nil {
			usage = append(usage, u)
		}
	}
	if len(usage) != 2 || usage[0].GetInputTokens() != 42 || usage[0].GetOutputTokens() != 7 || usage[0].GetModel() != "openai/gpt-fake-2026" {
		t.Errorf("usage events: %v", usage)
	}

	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.requests) != 2 {
		t.Fatalf("the model got %d requests, want 2", len(fake.requests))
	}
	for i, req := range fake.requests {
		if req["model"] != "gpt-fake" || req["stream"] != true || fake.auth[i] != "Bearer test-key" {
			t.Errorf("request %d: model %v, stream %v, auth %q", i, req["model"], req["stream"], fake.auth[i])
		}
		tools, _ := json.Marshal(req["tools"])
		if !strings.Contains(string(tools), `"name":"add"`) || !strings.Contains(string(tools), `"required":["a","b"]`) {
			t.Errorf("request %d tools: %s", i, tools)
		}
	}
	second, _ := json.Marshal(fake.requests[1]["messages"])
	for _, want := range []string{`"tool_call_id":"call_abc"`, `"role":"tool"`, `"content":"5"`, `"id":"call_abc"`, `"arguments":"{\"a\": 2, \"b\": 3}"`} {
		if !strings.Contains(string(second), want) {
			t.Errorf("second request's messages lack %s: %s", want, second)
		}
	}
	if !strings.Contains(m.orch.Output(), `"provider":"openai"`) {
		t.Error("the orchestrator did not log that it uses the openai provider")
	}
}
