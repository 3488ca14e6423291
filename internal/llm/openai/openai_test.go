package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newProvider(t *testing.T, s *llmtest.Server, mod ...func(*openai.Options)) *openai.Provider {
	t.Helper()
	o := openai.Options{
		APIKey:       "sk-test",
		BaseURL:      s.URL + "/v1",
		DefaultModel: "gpt-test",
		HTTPClient:   s.Client(),
		RetryDelay:   10 * time.Millisecond,
	}
	for _, f := range mod {
		f(&o)
	}
	p, err := openai.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sse writes the events of a Chat Completions stream, then [DONE].
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		fmt.Fprintf(w, "data: %s\n\n", e)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

const model = "gpt-test-2026-01-01"

// chunk is a chat.completion.chunk event with one choice.
func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1760000000,"model":%q,"system_fingerprint":"fp_1","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"usage":null}`, model, delta, f)
}

// usage is the last chunk of a stream with include_usage.
func usage(in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1760000000,"model":%q,"system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`, model, in, out, in+out)
}

func toolDelta(index int, id, name, args string) string {
	fn := map[string]string{"arguments": args}
	tc := map[string]any{"index": index, "function": fn}
	if id != "" {
		tc["id"] = id
		tc["type"] = "function"
		fn["name"] = name
	}
	b, _ := json.Marshal(map[string]any{"tool_calls": []any{tc}})
	return string(b)
}

func checkRequest(t *testing.T, r llmtest.Request) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", r.Method, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	if r.Body["stream"] != true {
		t.Errorf("stream = %v, want true", r.Body["stream"])
	}
	if diff := cmp.Diff(map[string]any{"include_usage": true}, r.Body["stream_options"]); diff != "" {
		t.Errorf("stream_options (-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestPlainAnswer(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w,
			chunk(`{"role":"assistant","content":"","refusal":null}`, ""),
			chunk(`{"content":"Hel"}`, ""),
			chunk(`{"content":"lo."}`, ""),
			chunk(`{}`, "stop"),
			usage(21, 3),
		)
	})
	p := newProvider(t, s)
	if p.Name() != "openai" || p.DefaultModel() != "gpt-test" || llm.Label(p, "") != "openai/gpt-test" {
		t.Errorf("Name, DefaultModel, Label = %q, %q, %q", p.Name(), p.DefaultModel(), llm.Label(p, ""))
	}
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		System:          "Be brief.",
		Messages:        []llm.Message{{Role: llm.RoleUser, Text: "Say hello."}},
		Temperature:     ptr(0.25),
		MaxOutputTokens: 100,
	}))
	if err != nil {
		t.Fatal(err)
	}

	r := s.Only(t)
	checkRequest(t, r)
	if r.Body["model"] != "gpt-test" {
		t.Errorf("model = %v", r.Body["model"])
	}
	wantMsgs := llmtest.JSON(t, `[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello."}]`)
	if diff := cmp.Diff(wantMsgs, r.Body["messages"]); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if r.Body["temperature"] != 0.25 || r.Body["max_tokens"] != 100.0 {
		t.Errorf("temperature, max_tokens = %v, %v", r.Body["temperature"], r.Body["max_tokens"])
	}
	for _, k := range []string{"tools", "response_format", "max_completion_tokens", "parallel_tool_calls"} {
		if _, ok := r.Body[k]; ok {
			t.Errorf("request has %s: %s", k, r.Raw)
		}
	}

	if diff := cmp.Diff([]llm.Chunk{{TextDelta: "Hel"}, {TextDelta: "lo."}}, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	want := &llm.Response{Text: "Hello.", Usage: llm.Usage{InputTokens: 21, OutputTokens: 3}, FinishReason: "stop", Model: "openai/" + model}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	// Collect gives the same answer.
	got, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Model: "other", Messages: []llm.Message{{Role: llm.RoleUser, Text: "again"}}}))
	if err != nil || got.Text != "Hello." {
		t.Errorf("Collect = %+v, %v", got, err)
	}
	if reqs := s.Requests(); reqs[1].Body["model"] != "other" {
		t.Errorf("second request model = %v, want other", reqs[1].Body["model"])
	}
}

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}`

var weatherTool = llm.ToolSpec{Name: "get_weather", Description: "Current weather of a city.", Parameters: json.RawMessage(weatherSchema)}

func TestOneToolCall(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w,
			chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Paris\"}"}}]}`, ""),
			chunk(`{}`, "tool_calls"),
			usage(80, 17),
		)
	})
	p := newProvider(t, s)
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Weather in Paris?"}},
		Tools:    []llm.ToolSpec{weatherTool, {Name: "no_args"}},
	}))
	if err != nil {
		t.Fatal(err)
	}

	r := s.Only(t)
	checkRequest(t, r)
	wantTools := llmtest.JSON(t, `[
		{"type":"function","function":{"name":"get_weather","description":"Current weather of a city.","parameters":`+weatherSchema+`}},
		{"type":"function","function":{"name":"no_args","parameters":{"type":"object","properties":{}}}}]`)
	if diff := cmp.Diff(wantTools, r.Body["tools"]); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	// The schema is sent as written: its properties keep their order.
	if !strings.Contains(r.Raw, `"properties":{"city":{"type":"string","description":"City name"},"unit":`) {
		t.Errorf("tool schema not sent verbatim: %s", r.Raw)
	}

	wantDeltas := []llm.Chunk{
		{ToolCallDelta: &llm.ToolCallDelta{Index: 0, ID: "call_abc", Name: "get_weather"}},
		{ToolCallDelta: &llm.ToolCallDelta{Index: 0, Arguments: `{"city": "Paris"}`}},
	}
	if diff := cmp.Diff(wantDeltas, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	want := &llm.Response{
		ToolCalls:    []llm.ToolCall{{ID: "call_abc", Name: "get_weather", Arguments: `{"city": "Paris"}`}},
		Usage:        llm.Usage{InputTokens: 80, OutputTokens: 17},
		FinishReason: "tool_calls",
		Model:        "openai/" + model,
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestParallelToolCalls(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w,
			chunk(`{"role":"assistant","content":"Checking both."}`, ""),
			chunk(toolDelta(0, "call_1", "get_weather", `{"city":"Paris"}`), ""),
			chunk(toolDelta(1, "call_2", "get_weather", `{"city":"Oslo"}`), ""),
			chunk(`{}`, "tool_calls"),
			usage(90, 40),
		)
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Weather in Paris and Oslo?"}},
		Tools:    []llm.ToolSpec{weatherTool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, s.Only(t))
	want := &llm.Response{
		Text: "Checking both.",
		ToolCalls: []llm.ToolCall{
			{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "call_2", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
		},
		Usage:        llm.Usage{InputTokens: 90, OutputTokens: 40},
		FinishReason: "tool_calls",
		Model:        "openai/" + model,
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestToolCallDeltasReassembled(t *testing.T) {
	args0 := `{"city": "San Francisco, CA", "unit": "f"}`
	args1 := `{"city": "Tokyo"}`
	// The arguments arrive a few characters at a time, the two calls interleaved.
	events := []string{chunk(`{"role":"assistant","content":null}`, "")}
	events = append(events, chunk(toolDelta(0, "call_a", "get_weather", ""), ""))
	events = append(events, chunk(toolDelta(1, "call_b", "get_weather", ""), ""))
	for i := 0; i < len(args0) || i < len(args1); i += 3 {
		if i < len(args0) {
			events = append(events, chunk(toolDelta(0, "", "", args0[i:min(i+3, len(args0))]), ""))
		}
		if i < len(args1) {
			events = append(events, chunk(toolDelta(1, "", "", args1[i:min(i+3, len(args1))]), ""))
		}
	}
	events = append(events, chunk(`{}`, "tool_calls"), usage(50, 30))
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w, events...) })
	p := newProvider(t, s)
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Weather?"}},
		Tools:    []llm.ToolSpec{weatherTool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, s.Only(t))
	if len(deltas) < 10 {
		t.Errorf("only %d deltas", len(deltas))
	}
	// Rebuild the calls from the deltas alone, as a streaming consumer would.
	var rebuilt [2]llm.ToolCall
	for i, d := range deltas {
		td := d.ToolCallDelta
		if td == nil || td.Index > 1 {
			t.Fatalf("delta %d = %+v", i, d)
		}
		if (td.ID != "") != (i < 2) || (td.Name != "") != (i < 2) {
			t.Errorf("delta %d = %+v: ID and name must come first, once", i, td)
		}
		c := &rebuilt[td.Index]
		c.ID += td.ID
		c.Name += td.Name
		c.Arguments += td.Arguments
	}
	want := []llm.ToolCall{{ID: "call_a", Name: "get_weather", Arguments: args0}, {ID: "call_b", Name: "get_weather", Arguments: args1}}
	if diff := cmp.Diff(want, rebuilt[:]); diff != "" {
		t.Errorf("calls from deltas (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, resp.ToolCalls); diff != "" {
		t.Errorf("response calls (-want +got):\n%s", diff)
	}
	if resp.FinishReason != "tool_calls" || resp.Usage != (llm.Usage{InputTokens: 50, OutputTokens: 30}) {
		t.Errorf("response = %+v", resp)
	}
}

// Some compatible servers give every call of an answer index 0, each with its own ID.
func TestToolCallsAllAtIndexZero(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w,
			chunk(toolDelta(0, "call_x", "get_weather", `{"city":"Rome"}`), ""),
			chunk(toolDelta(0, "call_y", "get_weather", `{"city":"Lima"}`), ""),
			chunk(`{}`, "tool_calls"),
		)
	})
	// A local server needs no key.
	p := newProvider(t, s, func(o *openai.Options) { o.APIKey = "" })
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "x"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Only(t); r.Header.Get("Authorization") != "" || r.Body["model"] != "gpt-test" {
		t.Errorf("request = %v %s", r.Header, r.Raw)
	}
	want := []llm.ToolCall{{ID: "call_x", Name: "get_weather", Arguments: `{"city":"Rome"}`}, {ID: "call_y", Name: "get_weather", Arguments: `{"city":"Lima"}`}}
	if diff := cmp.Diff(want, resp.ToolCalls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if resp.Usage != (llm.Usage{}) || resp.Model != "openai/"+model {
		t.Errorf("response = %+v", resp)
	}
}

func TestToolErrorRoundTrip(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, chunk(`{"role":"assistant","content":"Oslo is 3°C; Paris failed."}`, ""), chunk(`{}`, "stop"), usage(120, 9))
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
		System: "sys",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Text: "Weather in Paris and Oslo?"},
			{Role: llm.RoleAssistant, Text: "Checking.", ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{ID: "call_2", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", ToolName: "get_weather", Text: "Error: upstream timeout", IsError: true},
			{Role: llm.RoleTool, ToolCallID: "call_2", ToolName: "get_weather", Text: `{"temp_c":3}`},
		},
		Tools: []llm.ToolSpec{weatherTool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Only(t)
	checkRequest(t, r)
	want := llmtest.JSON(t, `[
		{"role":"system","content":"sys"},
		{"role":"user","content":"Weather in Paris and Oslo?"},
		{"role":"assistant","content":"Checking.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"Error: upstream timeout"},
		{"role":"tool","tool_call_id":"call_2","content":"{\"temp_c\":3}"}]`)
	if diff := cmp.Diff(want, r.Body["messages"]); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if resp.Text != "Oslo is 3°C; Paris failed." || resp.FinishReason != "stop" || resp.Usage.InputTokens != 120 {
		t.Errorf("response = %+v", resp)
	}
}

func TestStructuredOutput(t *testing.T) {
	strict := `{"title":"weather_report","type":"object","properties":{"city":{"type":"string"},"temp_c":{"type":["number","null"]}},"required":["city","temp_c"],"additionalProperties":false}`
	loose := `{"type":"object","properties":{"city":{"type":"string","minLength":1}},"required":["city"]}`
	for _, tc := range []struct {
		name, schema, wantName string
		wantStrict             bool
	}{
		{"strict", strict, "weather_report", true},
		{"non-strict", loose, "output", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := `{"city":"Oslo","temp_c":3}`
			s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				b, _ := json.Marshal(answer[:9])
				b2, _ := json.Marshal(answer[9:])
				sse(w, chunk(`{"role":"assistant","content":`+string(b)+`}`, ""), chunk(`{"content":`+string(b2)+`}`, ""), chunk(`{}`, "stop"), usage(30, 12))
			})
			p := newProvider(t, s)
			resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
				Messages:     []llm.Message{{Role: llm.RoleUser, Text: "Report the weather in Oslo."}},
				OutputSchema: json.RawMessage(tc.schema),
			}))
			if err != nil {
				t.Fatal(err)
			}
			r := s.Only(t)
			checkRequest(t, r)
			want := map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": tc.wantName, "strict": tc.wantStrict, "schema": llmtest.JSON(t, tc.schema)}}
			if diff := cmp.Diff(want, r.Body["response_format"]); diff != "" {
				t.Errorf("response_format (-want +got):\n%s", diff)
			}
			if resp.Text != answer || !json.Valid([]byte(resp.Text)) {
				t.Errorf("text = %q", resp.Text)
			}
		})
	}
}

// errorBody is OpenAI's error object.
func errorBody(msg, typ, code string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	return string(b)
}

func writeError(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

func TestErrorStatuses(t *testing.T) {
	llmtest.CheckStatuses(t, openai.Name, []llmtest.StatusCase{
		{Name: "401", Status: 401, Body: errorBody("Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"),
			Want: llm.ErrAuth, Kind: llm.KindAuth, Msg: "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys."},
		{Name: "403", Status: 403, Body: errorBody("Country, region, or territory not supported", "request_forbidden", "unsupported_country_region_territory"), Want: llm.ErrAuth, Kind: llm.KindAuth, Msg: "Country, region, or territory not supported"},
		{Name: "403 model", Status: 403, Body: errorBody("Project `proj_1` does not have access to model `gpt-test`", "invalid_request_error", "model_not_found"), Want: llm.ErrNotFound, Kind: llm.KindNotFound, Msg: "Project `proj_1` does not have access to model `gpt-test`"},
		{Name: "404 model", Status: 404, Body: errorBody("The model `gpt-test` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"),
			Want: llm.ErrUnknownModel, Kind: llm.KindNotFound, Msg: "The model `gpt-test` does not exist or you do not have access to it."},
		{Name: "400 context", Status: 400, Body: errorBody("This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.", "invalid_request_error", "context_length_exceeded"),
			Want: llm.ErrContextTooLong, Kind: llm.KindContextTooLong, Msg: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages."},
		{Name: "400", Status: 400, Body: errorBody("Invalid value for 'temperature'.", "invalid_request_error", "invalid_value"), Want: llm.ErrBadRequest, Kind: llm.KindBadRequest, Msg: "Invalid value for 'temperature'."},
		{Name: "429 quota", Status: 429, Body: errorBody("You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", "insufficient_quota"),
			Want: llm.ErrRateLimited, Kind: llm.KindRateLimited, Msg: "You exceeded your current quota, please check your plan and billing details."},
		// Compatible servers: vLLM's error object, Ollama's error string, plain text.
		{Name: "vllm 404", Status: 404, Body: `{"object":"error","message":"The model ` + "`llama`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`, Want: llm.ErrNotFound, Kind: llm.KindNotFound, Msg: "The model `llama` does not exist."},
		{Name: "ollama 404", Status: 404, Body: `{"error":"model \"llama9\" not found, try pulling it first"}`, Want: llm.ErrNotFound, Kind: llm.KindNotFound, Msg: `model "llama9" not found, try pulling it first`},
		{Name: "llama.cpp context", Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`,
			Want: llm.ErrContextTooLong, Kind: llm.KindContextTooLong, Msg: "the request exceeds the available context size, try increasing it"},
		{Name: "plain 400", Status: 400, Body: "bad things", Want: llm.ErrBadRequest, Kind: llm.KindBadRequest, Msg: "bad things"},
	}, writeError, func(t *testing.T, s *llmtest.Server) llm.Provider { return newProvider(t, s) }, checkRequest)
}

func TestRateLimitRetryAfter(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			writeError(w, 429, errorBody("Rate limit reached for gpt-test on tokens per min (TPM): Limit 30000, Used 30000, Requested 100. Please try again in 1s.", "tokens", "rate_limit_exceeded"))
			return
		}
		sse(w, chunk(`{"role":"assistant","content":"ok"}`, ""), chunk(`{}`, "stop"), usage(5, 1))
	})
	// The backoff would be far shorter than the server's Retry-After.
	p := newProvider(t, s, func(o *openai.Options) { o.RetryDelay = time.Millisecond })
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "ok" || resp.Usage != (llm.Usage{InputTokens: 5, OutputTokens: 1}) {
		t.Errorf("response = %+v", resp)
	}
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("server received %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		checkRequest(t, r)
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < time.Second || gap > 1900*time.Millisecond {
		t.Errorf("retry came %v after the 429, want Retry-After's 1s", gap)
	}
	if diff := cmp.Diff(reqs[0].Body, reqs[1].Body); diff != "" {
		t.Errorf("retried body differs:\n%s", diff)
	}
}

func TestUnavailableAfterRetries(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		writeError(w, 500, errorBody("The server had an error while processing your request. Sorry about that!", "server_error", ""))
	})
	p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = 2 })
	start := time.Now()
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrUnavailable) || !errors.Is(err, llm.ErrOverloaded) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	pe := llmtest.ProviderError(t, err, openai.Name)
	if got := len(s.Requests()); got != 3 || pe.Attempts != 3 {
		t.Errorf("server saw %d attempts, error says %d; want 3 (1 + MaxRetries)", got, pe.Attempts)
	}
	for i, r := range s.Requests() {
		checkRequest(t, r)
		if got := r.Header.Get("X-Stainless-Retry-Count"); got != fmt.Sprint(i) {
			t.Errorf("attempt %d: X-Stainless-Retry-Count = %q", i+1, got)
		}
	}
	if pe.StatusCode != 500 || pe.Message != "The server had an error while processing your request. Sorry about that!" {
		t.Errorf("error = %#v", pe)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
}

func TestNoRetries(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		writeError(w, 503, errorBody("overloaded", "server_error", ""))
	})
	p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = -1 })
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrUnavailable) || len(s.Requests()) != 1 {
		t.Errorf("error = %v after %d requests", err, len(s.Requests()))
	}
}

func TestRetryAfterTooLong(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Retry-After", "3600")
		writeError(w, 429, errorBody("Rate limit reached", "requests", "rate_limit_exceeded"))
	})
	p := newProvider(t, s)
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	pe := llmtest.ProviderError(t, err, openai.Name)
	if !errors.Is(err, llm.ErrRateLimited) || pe.RetryAfter != time.Hour || len(s.Requests()) != 1 {
		t.Errorf("error = %#v after %d requests; want rate limited at once, RetryAfter 1h", pe, len(s.Requests()))
	}
}

func TestNetworkErrorRetried(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			// The connection drops before any answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if n == 2 {
			// The stream is cut before any chunk.
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", chunk(`{"role":"assistant","content":""}`, ""))
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		sse(w, chunk(`{"content":"fine"}`, ""), chunk(`{}`, "stop"))
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "fine" || len(s.Requests()) != 3 {
		t.Fatalf("Collect = %+v, %v after %d requests", resp, err, len(s.Requests()))
	}
}

func TestStreamCutAfterChunkNotRetried(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`{"content":"partial"}`, ""))
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	p := newProvider(t, s)
	deltas, _, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrNetwork) || len(deltas) != 1 || len(s.Requests()) != 1 {
		t.Errorf("error = %v, %d deltas, %d requests; want a network error after one chunk, no retry", err, len(deltas), len(s.Requests()))
	}
}

func TestErrorEventInStream(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			fmt.Fprintf(w, "data: %s\n\n", errorBody("The server had an error while processing your request.", "server_error", ""))
			return
		}
		sse(w, chunk(`{"content":"second try"}`, ""), chunk(`{}`, "stop"))
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "second try" || len(s.Requests()) != 2 {
		t.Fatalf("Collect = %+v, %v after %d requests", resp, err, len(s.Requests()))
	}
}

func TestMalformed(t *testing.T) {
	for name, write := range map[string]func(w http.ResponseWriter){
		"bad event JSON": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"\n\n")
		},
		"not a stream": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body>Welcome to nginx!</body></html>")
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { write(w) })
			p := newProvider(t, s)
			_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
			if !errors.Is(err, llm.ErrMalformed) {
				t.Fatalf("error = %v, want ErrMalformed", err)
			}
			if pe := llmtest.ProviderError(t, err, openai.Name); pe.Attempts != 1 {
				t.Errorf("attempts = %d", pe.Attempts)
			}
			checkRequest(t, s.Only(t)) // not retried
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	r := llmtest.CheckCancelMidStream(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`{"role":"assistant","content":"thinking"}`, ""))
		w.(http.Flusher).Flush()
	}, func(s *llmtest.Server) llm.Provider { return newProvider(t, s) })
	checkRequest(t, r)
}

func TestCanceledBeforeStart(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w) })
	p := newProvider(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := llm.Collect(p.Stream(ctx, &llm.Request{}))
	if !errors.Is(err, context.Canceled) || len(s.Requests()) != 0 {
		t.Errorf("error = %v after %d requests", err, len(s.Requests()))
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Retry-After", "30")
		writeError(w, 503, errorBody("busy", "server_error", ""))
	})
	p := newProvider(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := llm.Collect(p.Stream(ctx, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("error = %v after %v", err, time.Since(start))
	}
}

func TestTimeoutPerAttempt(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", chunk(`{"role":"assistant"}`, ""))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // hangs until the client gives up
			return
		}
		sse(w, chunk(`{"content":"ok"}`, ""), chunk(`{}`, "stop"))
	})
	p := newProvider(t, s, func(o *openai.Options) { o.Timeout = 200 * time.Millisecond })
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "ok" || len(s.Requests()) != 2 {
		t.Fatalf("Collect = %+v, %v after %d requests", resp, err, len(s.Requests()))
	}

	p = newProvider(t, s, func(o *openai.Options) { o.Timeout = 200 * time.Millisecond; o.MaxRetries = -1 })
	s.Reset()
	_, err = llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrNetwork) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want a network error for the timeout", err)
	}
}

func TestConsumerStops(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, chunk(`{"content":"a"}`, ""), chunk(`{"content":"b"}`, ""), chunk(`{}`, "stop"))
	})
	p := newProvider(t, s)
	n := 0
	for _, err := range p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Errorf("got %d chunks", n)
	}
}

func TestBadRequests(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w) })
	p := newProvider(t, s, func(o *openai.Options) { o.DefaultModel = "" })
	llmtest.CheckRefused(t, p, s, map[string]*llm.Request{
		"nil":          nil,
		"no model":     {Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}},
		"bad schema":   {Model: "m", Tools: []llm.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
		"bad output":   {Model: "m", OutputSchema: json.RawMessage(`{`)},
		"unknown role": {Model: "m", Messages: []llm.Message{{Role: "narrator", Text: "hi"}}},
	})
}

func TestNewOptions(t *testing.T) {
	for _, base := range []string{"localhost:11434", "ftp://x", "::"} {
		if _, err := openai.New(openai.Options{BaseURL: base}); err == nil {
			t.Errorf("New(BaseURL %q) succeeded", base)
		}
	}
	if _, err := openai.New(openai.Options{Timeout: -1}); err == nil {
		t.Error("New with a negative timeout succeeded")
	}
	p, err := openai.New(openai.Options{})
	if err != nil || p.DefaultModel() != "" {
		t.Errorf("New(zero) = %v, %v", p, err)
	}
}

// TestRetryLogLines: the JSON lines of a call retried once, then failed, name the
// provider once and log their durations as text.
func TestRetryLogLines(t *testing.T) {
	lines, err := llmtest.RetryLog(t, openai.Name,
		func(w http.ResponseWriter) { writeError(w, 503, errorBody("overloaded", "server_error", "")) },
		func(s *llmtest.Server, log *slog.Logger) llm.Provider {
			return newProvider(t, s, func(o *openai.Options) { o.MaxRetries = 1; o.RetryDelay = time.Millisecond; o.Logger = log })
		}, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}})
	if !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "model call failed, retrying", "provider": "openai", "model": "gpt-test", "attempt": json.Number("1"),
			"status": json.Number("503"), "kind": "unavailable", "wait": "(duration)", "error": "overloaded"},
		{"level": "DEBUG", "msg": "model call failed", "provider": "openai", "model": "gpt-test", "attempt": json.Number("2"),
			"duration": "(duration)", "error": "openai: unavailable (HTTP 503): overloaded (after 2 attempts)"},
	}
	if diff := cmp.Diff(want, llmtest.Stable(lines)); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

// TestDefaultMaxTokens: Options.MaxTokens bounds the answer of a request that sets no
// bound of its own; the request's own bound wins.
func TestDefaultMaxTokens(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, chunk(`{"content":"ok"}`, "stop"), usage(1, 1))
	})
	p := newProvider(t, s, func(o *openai.Options) { o.MaxTokens = 64 })
	for _, tc := range []struct{ request, want int }{{0, 64}, {10, 10}} {
		if _, _, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
			Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}, MaxOutputTokens: tc.request,
		})); err != nil {
			t.Fatal(err)
		}
		reqs := s.Requests()
		if got := reqs[len(reqs)-1].Body["max_tokens"]; got != float64(tc.want) {
			t.Errorf("request bound %d: max_tokens = %v, want %d", tc.request, got, tc.want)
		}
	}
}

// TestBufferedAnswer: for a model Buffered names, the request is not streamed (no stream,
// no stream_options) and the whole answer, tool calls and usage included, is yielded as
// one piece; other models still stream.
func TestBufferedAnswer(t *testing.T) {
	var s *llmtest.Server
	s = llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if strings.Contains(s.Requests()[n-1].Raw, `"stream":true`) {
			sse(w, chunk(`{"role":"assistant","content":"streamed"}`, ""), chunk(`{}`, "stop"), usage(1, 1))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"`+model+`",
			"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking.","refusal":null,
			"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			              {"id":"call_b","type":"function","function":{"name":"no_args","arguments":"{}"}}]}}],
			"usage":{"prompt_tokens":80,"completion_tokens":17,"total_tokens":97}}`)
	})
	p := newProvider(t, s, func(o *openai.Options) { o.Buffered = func(m string) bool { return m == "gpt-test" } })
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Weather in Paris?"}},
		Tools:    []llm.ToolSpec{weatherTool, {Name: "no_args"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if _, ok := r.Body["stream"]; ok {
		t.Errorf("a buffered request sent stream: %s", r.Raw)
	}
	if _, ok := r.Body["stream_options"]; ok {
		t.Errorf("a buffered request sent stream_options: %s", r.Raw)
	}
	want := &llm.Response{
		Text: "Checking.",
		ToolCalls: []llm.ToolCall{
			{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "call_b", Name: "no_args", Arguments: `{}`},
		},
		Usage:        llm.Usage{InputTokens: 80, OutputTokens: 17},
		FinishReason: "tool_calls",
		Model:        "openai/" + model,
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if len(deltas) != 3 || deltas[0].TextDelta != "Checking." {
		t.Errorf("deltas %+v, want the text and both calls at once", deltas)
	}
	// Another model streams.
	_, resp, err = llmtest.Collect(p.Stream(t.Context(), &llm.Request{Model: "gpt-other", Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "streamed" {
		t.Errorf("streamed model: %+v, %v", resp, err)
	}
}

// TestBufferedErrorStatus: a refused buffered request fails like a streamed one.
func TestBufferedErrorStatus(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		writeError(w, http.StatusUnauthorized, errorBody("bad key", "invalid_request_error", "invalid_api_key"))
	})
	p := newProvider(t, s, func(o *openai.Options) { o.Buffered = func(string) bool { return true } })
	_, _, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	var pe *llm.ProviderError
	if !errors.As(err, &pe) || pe.Kind != llm.KindAuth {
		t.Errorf("error %v, want an auth ProviderError", err)
	}
}
