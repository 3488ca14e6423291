package anthropic_test

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
	"github.com/toolmesh/toolmesh/internal/llm/anthropic"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newProvider(t *testing.T, s *llmtest.Server, mod ...func(*anthropic.Options)) *anthropic.Provider {
	t.Helper()
	o := anthropic.Options{
		APIKey:       "sk-ant-test",
		BaseURL:      s.URL,
		DefaultModel: "claude-test",
		HTTPClient:   s.Client(),
		RetryDelay:   10 * time.Millisecond,
	}
	for _, f := range mod {
		f(&o)
	}
	p, err := anthropic.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const model = "claude-test-20260101"

// The events of the Messages stream, as the API sends them.

func ev(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

func msgStart(in, out int) string {
	return ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":%d,"service_tier":"standard"}}}`, model, in, out))
}

func ping() string { return ev("ping", `{"type": "ping"}`) }

func textStart(i int) string {
	return ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i))
}

func textDelta(i int, s string) string {
	b, _ := json.Marshal(s)
	return ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, b))
}

func toolStart(i int, id, name string) string {
	return ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, i, id, name))
}

func jsonDelta(i int, partial string) string {
	b, _ := json.Marshal(partial)
	return ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, b))
}

func blockStop(i int) string {
	return ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

func msgDelta(stop string, out int) string {
	return ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, out))
}

func msgStop() string { return ev("message_stop", `{"type":"message_stop"}`) }

// sse writes a Messages event stream.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		fmt.Fprint(w, e)
		w.(http.Flusher).Flush()
	}
}

func checkRequest(t *testing.T, r llmtest.Request) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/v1/messages" {
		t.Errorf("request = %s %s, want POST /v1/messages", r.Method, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-ant-test" {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get("Anthropic-Version"); got == "" {
		t.Error("no anthropic-version header")
	}
	if got := r.Header.Get("Traceparent"); got != "" {
		t.Errorf("the SDK's tracing is on: traceparent %q", got)
	}
	if r.Body["stream"] != true {
		t.Errorf("stream = %v, want true", r.Body["stream"])
	}
	if _, ok := r.Body["temperature"]; ok {
		t.Errorf("temperature sent: %s", r.Raw)
	}
}

func TestPlainAnswer(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(25, 1), textStart(0), ping(), textDelta(0, "Hel"), textDelta(0, "lo."), blockStop(0), msgDelta("end_turn", 15), msgStop())
	})
	p := newProvider(t, s)
	if p.Name() != "anthropic" || p.DefaultModel() != "claude-test" || llm.Label(p, "") != "anthropic/claude-test" {
		t.Errorf("Name, DefaultModel, Label = %q, %q, %q", p.Name(), p.DefaultModel(), llm.Label(p, ""))
	}
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		System:      "Be brief.",
		Messages:    []llm.Message{{Role: llm.RoleUser, Text: "Say hello."}},
		Temperature: new(0.5),
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Only(t)
	checkRequest(t, r)
	want := llmtest.JSON(t, `{
		"model":"claude-test","max_tokens":4096,"stream":true,
		"system":[{"type":"text","text":"Be brief."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Say hello."}]}]}`)
	if diff := cmp.Diff(want, any(r.Body)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]llm.Chunk{{TextDelta: "Hel"}, {TextDelta: "lo."}}, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	wantResp := &llm.Response{Text: "Hello.", Usage: llm.Usage{InputTokens: 25, OutputTokens: 15}, FinishReason: "end_turn", Model: "anthropic/" + model}
	if diff := cmp.Diff(wantResp, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}

	// A request's model and max tokens win.
	if _, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Model: "claude-other", MaxOutputTokens: 100, Messages: []llm.Message{{Role: llm.RoleUser, Text: "x"}}})); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[1]; r.Body["model"] != "claude-other" || r.Body["max_tokens"] != 100.0 {
		t.Errorf("second request = %s", r.Raw)
	}
}

const weatherSchema = `{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}`

var weatherTool = llm.ToolSpec{Name: "get_weather", Description: "Get the current weather in a given location", Parameters: json.RawMessage(weatherSchema)}

func TestOneToolCall(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(472, 2),
			textStart(0), textDelta(0, "Let me check."), blockStop(0),
			toolStart(1, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather"),
			jsonDelta(1, ""), jsonDelta(1, `{"location": "San`), jsonDelta(1, ` Francisco, CA"}`), blockStop(1),
			msgDelta("tool_use", 89), msgStop())
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.MaxTokens = 1024 })
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "What is the weather like in San Francisco?"}},
		Tools:    []llm.ToolSpec{weatherTool, {Name: "no_args"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Only(t)
	checkRequest(t, r)
	if r.Body["max_tokens"] != 1024.0 {
		t.Errorf("max_tokens = %v", r.Body["max_tokens"])
	}
	wantTools := llmtest.JSON(t, `[
		{"name":"get_weather","description":"Get the current weather in a given location","input_schema":`+weatherSchema+`},
		{"name":"no_args","input_schema":{"type":"object","properties":{}}}]`)
	if diff := cmp.Diff(wantTools, r.Body["tools"]); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if !strings.Contains(r.Raw, `"properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"unit":`) {
		t.Errorf("tool schema not sent verbatim: %s", r.Raw)
	}
	wantDeltas := []llm.Chunk{
		{TextDelta: "Let me check."},
		{ToolCallDelta: &llm.ToolCallDelta{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "get_weather"}},
		{ToolCallDelta: &llm.ToolCallDelta{Index: 0, Arguments: `{"location": "San`}},
		{ToolCallDelta: &llm.ToolCallDelta{Index: 0, Arguments: ` Francisco, CA"}`}},
	}
	if diff := cmp.Diff(wantDeltas, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	want := &llm.Response{
		Text:         "Let me check.",
		ToolCalls:    []llm.ToolCall{{ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "get_weather", Arguments: `{"location": "San Francisco, CA"}`}},
		Usage:        llm.Usage{InputTokens: 472, OutputTokens: 89},
		FinishReason: "tool_use",
		Model:        "anthropic/" + model,
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestParallelToolCalls(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(500, 3),
			toolStart(0, "toolu_a", "get_weather"), jsonDelta(0, `{"location":"Paris"}`), blockStop(0),
			toolStart(1, "toolu_b", "get_weather"), jsonDelta(1, `{"location":"Oslo"}`), blockStop(1),
			msgDelta("tool_use", 120), msgStop())
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
		ToolCalls: []llm.ToolCall{
			{ID: "toolu_a", Name: "get_weather", Arguments: `{"location":"Paris"}`},
			{ID: "toolu_b", Name: "get_weather", Arguments: `{"location":"Oslo"}`},
		},
		Usage:        llm.Usage{InputTokens: 500, OutputTokens: 120},
		FinishReason: "tool_use",
		Model:        "anthropic/" + model,
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestToolInputDeltasReassembled(t *testing.T) {
	args := `{"location": "San Francisco, CA", "unit": "fahrenheit"}`
	events := []string{msgStart(100, 1), textStart(0), textDelta(0, "Checking"), blockStop(0), toolStart(1, "toolu_1", "get_weather")}
	for i := 0; i < len(args); i += 4 {
		events = append(events, jsonDelta(1, args[i:min(i+4, len(args))]))
	}
	// A tool without input streams no input deltas.
	events = append(events, blockStop(1), toolStart(2, "toolu_2", "no_args"), blockStop(2), msgDelta("tool_use", 60), msgStop())
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w, events...) })
	p := newProvider(t, s)
	deltas, resp, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "x"}}, Tools: []llm.ToolSpec{weatherTool, {Name: "no_args"}}}))
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, s.Only(t))
	var rebuilt [2]llm.ToolCall
	for _, d := range deltas {
		if td := d.ToolCallDelta; td != nil {
			c := &rebuilt[td.Index]
			c.ID += td.ID
			c.Name += td.Name
			c.Arguments += td.Arguments
		}
	}
	want := []llm.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: args}, {ID: "toolu_2", Name: "no_args", Arguments: "{}"}}
	if diff := cmp.Diff(want, rebuilt[:]); diff != "" {
		t.Errorf("calls from deltas (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, resp.ToolCalls); diff != "" {
		t.Errorf("response calls (-want +got):\n%s", diff)
	}
	if len(deltas) < 15 || resp.Text != "Checking" || resp.Usage != (llm.Usage{InputTokens: 100, OutputTokens: 60}) {
		t.Errorf("%d deltas, response %+v", len(deltas), resp)
	}
}

func TestToolErrorRoundTrip(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(700, 1), textStart(0), textDelta(0, "Oslo is 3°C; Paris failed."), blockStop(0), msgDelta("end_turn", 12), msgStop())
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
		System: "You report the weather.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Text: "Weather in Paris and Oslo?"},
			{Role: llm.RoleAssistant, Text: "Checking both.", ToolCalls: []llm.ToolCall{
				{ID: "toolu_1", Name: "get_weather", Arguments: `{"location":"Paris"}`},
				{ID: "toolu_2", Name: "get_weather", Arguments: `{"location":"Oslo"}`},
				{ID: "toolu_3", Name: "get_weather", Arguments: `not json`},
			}},
			{Role: llm.RoleTool, ToolCallID: "toolu_1", ToolName: "get_weather", Text: "upstream timeout", IsError: true},
			{Role: llm.RoleTool, ToolCallID: "toolu_2", ToolName: "get_weather", Text: `{"temp_c":3}`},
			{Role: llm.RoleTool, ToolCallID: "toolu_3", ToolName: "get_weather", Text: "invalid arguments", IsError: true},
			{Role: llm.RoleSystem, Text: "Answer in one line."},
			{Role: llm.RoleUser, Text: "Be quick."},
		},
		Tools: []llm.ToolSpec{weatherTool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Only(t)
	checkRequest(t, r)
	wantSystem := llmtest.JSON(t, `[{"type":"text","text":"You report the weather."},{"type":"text","text":"Answer in one line."}]`)
	if diff := cmp.Diff(wantSystem, r.Body["system"]); diff != "" {
		t.Errorf("system (-want +got):\n%s", diff)
	}
	want := llmtest.JSON(t, `[
		{"role":"user","content":[{"type":"text","text":"Weather in Paris and Oslo?"}]},
		{"role":"assistant","content":[
			{"type":"text","text":"Checking both."},
			{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}},
			{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"location":"Oslo"}},
			{"type":"tool_use","id":"toolu_3","name":"get_weather","input":{}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"upstream timeout"}],"is_error":true},
			{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"{\"temp_c\":3}"}]},
			{"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"text","text":"invalid arguments"}],"is_error":true},
			{"type":"text","text":"Be quick."}]}]`)
	if diff := cmp.Diff(want, r.Body["messages"]); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if resp.Text != "Oslo is 3°C; Paris failed." || resp.FinishReason != "end_turn" || resp.Usage.InputTokens != 700 {
		t.Errorf("response = %+v", resp)
	}
}

func TestStructuredOutput(t *testing.T) {
	native := `{"type":"object","properties":{"summary":{"type":"string"},"temp_c":{"type":"number"}},"required":["summary","temp_c"],"additionalProperties":false}`
	adapted := `{"type":"object","properties":{"summary":{"type":"string","minLength":1}},"required":["summary"]}`
	for _, tc := range []struct {
		name, schema, wantSent string
	}{
		{"native", native, native},
		{"adapted", adapted, `{"type":"object","properties":{"summary":{"type":"string","description":"{minLength: 1}"}},"required":["summary"],"additionalProperties":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := `{"summary":"Cold","temp_c":3}`
			s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				sse(w, msgStart(40, 1), textStart(0), textDelta(0, answer[:12]), textDelta(0, answer[12:]), blockStop(0), msgDelta("end_turn", 11), msgStop())
			})
			p := newProvider(t, s)
			resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
				Messages:     []llm.Message{{Role: llm.RoleUser, Text: "Weather in Oslo?"}},
				OutputSchema: json.RawMessage(tc.schema),
			}))
			if err != nil {
				t.Fatal(err)
			}
			r := s.Only(t)
			checkRequest(t, r)
			want := map[string]any{"format": map[string]any{"type": "json_schema", "schema": llmtest.JSON(t, tc.wantSent)}}
			if diff := cmp.Diff(want, r.Body["output_config"]); diff != "" {
				t.Errorf("output_config (-want +got):\n%s", diff)
			}
			if _, ok := r.Body["tools"]; ok {
				t.Errorf("tools sent: %s", r.Raw)
			}
			if tc.name == "native" && !strings.Contains(r.Raw, `"properties":{"summary":{"type":"string"},"temp_c":`) {
				t.Errorf("schema not sent verbatim: %s", r.Raw)
			}
			if resp.Text != answer {
				t.Errorf("text = %q", resp.Text)
			}
		})
	}
}

func errorBody(typ, msg string) string {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
	return string(b)
}

func writeError(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

func TestErrorStatuses(t *testing.T) {
	llmtest.CheckStatuses(t, anthropic.Name, []llmtest.StatusCase{
		{Name: "401", Status: 401, Body: errorBody("authentication_error", "invalid x-api-key"), Want: llm.ErrAuth, Kind: llm.KindAuth, Msg: "invalid x-api-key"},
		{Name: "403", Status: 403, Body: errorBody("permission_error", "Your API key does not have permission to use the specified resource."), Want: llm.ErrAuth, Kind: llm.KindAuth, Msg: "Your API key does not have permission to use the specified resource."},
		{Name: "404", Status: 404, Body: errorBody("not_found_error", "model: claude-test"), Want: llm.ErrUnknownModel, Kind: llm.KindNotFound, Msg: "model: claude-test"},
		{Name: "400 prompt too long", Status: 400, Body: errorBody("invalid_request_error", "prompt is too long: 215463 tokens > 200000 maximum"), Want: llm.ErrContextTooLong, Kind: llm.KindContextTooLong, Msg: "prompt is too long: 215463 tokens > 200000 maximum"},
		{Name: "400", Status: 400, Body: errorBody("invalid_request_error", "messages: roles must alternate between \"user\" and \"assistant\""), Want: llm.ErrBadRequest, Kind: llm.KindBadRequest, Msg: "messages: roles must alternate between \"user\" and \"assistant\""},
		{Name: "413", Status: 413, Body: errorBody("request_too_large", "Request exceeds the maximum allowed number of bytes."), Want: llm.ErrBadRequest, Kind: llm.KindBadRequest, Msg: "Request exceeds the maximum allowed number of bytes."},
		{Name: "plain 404", Status: 404, Body: "404 page not found", Want: llm.ErrNotFound, Kind: llm.KindNotFound, Msg: "404 page not found"},
	}, writeError, func(t *testing.T, s *llmtest.Server) llm.Provider { return newProvider(t, s) }, checkRequest)
}

func TestRateLimitRetryAfter(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			writeError(w, 429, errorBody("rate_limit_error", "This request would exceed the rate limit for your organization of 50 input tokens per minute."))
			return
		}
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "ok"), blockStop(0), msgDelta("end_turn", 2), msgStop())
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.RetryDelay = time.Millisecond })
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "ok" || resp.Usage != (llm.Usage{InputTokens: 5, OutputTokens: 2}) {
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
		t.Errorf("retry came %v after the 429, want retry-after's 1s", gap)
	}
}

func TestRetryAfterMs(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After-Ms", "300")
			w.Header().Set("Retry-After", "5")
			writeError(w, 529, errorBody("overloaded_error", "Overloaded"))
			return
		}
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "ok"), blockStop(0), msgDelta("end_turn", 2), msgStop())
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.RetryDelay = time.Millisecond })
	if _, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}})); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if gap := reqs[1].At.Sub(reqs[0].At); len(reqs) != 2 || gap < 300*time.Millisecond || gap > time.Second {
		t.Errorf("%d requests, retry after %v; want 2, after retry-after-ms's 300ms", len(reqs), gap)
	}
}

func TestUnavailableAfterRetries(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		writeError(w, 500, errorBody("api_error", "Internal server error"))
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.MaxRetries = 2 })
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	pe := llmtest.ProviderError(t, err, anthropic.Name)
	if got := len(s.Requests()); got != 3 || pe.Attempts != 3 {
		t.Errorf("server saw %d attempts, error says %d; want 3 (1 + MaxRetries)", got, pe.Attempts)
	}
	for i, r := range s.Requests() {
		checkRequest(t, r)
		if got := r.Header.Get("X-Stainless-Retry-Count"); got != fmt.Sprint(i) {
			t.Errorf("attempt %d: X-Stainless-Retry-Count = %q", i+1, got)
		}
	}
	if pe.StatusCode != 500 || pe.Message != "Internal server error" {
		t.Errorf("error = %#v", pe)
	}
}

func TestOverloadedAfterRetries(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("X-Should-Retry", "true")
		writeError(w, 529, errorBody("overloaded_error", "Overloaded"))
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.MaxRetries = 1 })
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	pe := llmtest.ProviderError(t, err, anthropic.Name)
	if !errors.Is(err, llm.ErrOverloaded) || pe.StatusCode != 529 || pe.Message != "Overloaded" || len(s.Requests()) != 2 {
		t.Errorf("error = %#v after %d requests", pe, len(s.Requests()))
	}
}

func TestShouldRetryFalse(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("X-Should-Retry", "false")
		writeError(w, 500, errorBody("api_error", "Internal server error"))
	})
	p := newProvider(t, s)
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrUnavailable) || len(s.Requests()) != 1 {
		t.Errorf("error = %v after %d requests, want no retry", err, len(s.Requests()))
	}
}

// TestShouldRetryTrueOnDeterministicStatus: a 4xx other than 408, 409 and 429 is sent
// once even when the server says X-Should-Retry: true, as the OpenAI provider does.
func TestShouldRetryTrueOnDeterministicStatus(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("X-Should-Retry", "true")
		writeError(w, 400, errorBody("invalid_request_error", "messages: at least one message is required"))
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.MaxRetries = 2; o.RetryDelay = time.Millisecond })
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrBadRequest) || len(s.Requests()) != 1 {
		t.Errorf("error = %v after %d requests, want one request", err, len(s.Requests()))
	}
}

func TestErrorEventRetried(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			// The API accepted the request, then was overloaded before any content.
			sse(w, msgStart(5, 1), ping(), ev("error", `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`))
			return
		}
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "second try"), blockStop(0), msgDelta("end_turn", 3), msgStop())
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "second try" || len(s.Requests()) != 2 {
		t.Fatalf("Collect = %+v, %v after %d requests", resp, err, len(s.Requests()))
	}
}

func TestErrorEventAfterContent(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "partial"), ev("error", `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`))
	})
	p := newProvider(t, s)
	deltas, _, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	pe := llmtest.ProviderError(t, err, anthropic.Name)
	if !errors.Is(err, llm.ErrOverloaded) || pe.Message != "Overloaded" || len(deltas) != 1 || len(s.Requests()) != 1 {
		t.Errorf("error = %#v, %d deltas, %d requests; want overloaded after one chunk, no retry", pe, len(deltas), len(s.Requests()))
	}
}

func TestNetworkErrorRetried(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "fine"), blockStop(0), msgDelta("end_turn", 3), msgStop())
	})
	p := newProvider(t, s)
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "fine" || len(s.Requests()) != 2 {
		t.Fatalf("Collect = %+v, %v after %d requests", resp, err, len(s.Requests()))
	}
}

func TestStreamCutShort(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		// No message_stop: the connection ends after a chunk.
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "partial"))
	})
	p := newProvider(t, s)
	deltas, _, err := llmtest.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrNetwork) || len(deltas) != 1 || len(s.Requests()) != 1 {
		t.Errorf("error = %v, %d deltas, %d requests", err, len(deltas), len(s.Requests()))
	}
}

func TestMalformed(t *testing.T) {
	for name, write := range map[string]func(w http.ResponseWriter){
		"bad event JSON": func(w http.ResponseWriter) {
			sse(w, msgStart(5, 1), "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\n\n")
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
			if pe := llmtest.ProviderError(t, err, anthropic.Name); pe.Attempts != 1 {
				t.Errorf("attempts = %d", pe.Attempts)
			}
			checkRequest(t, s.Only(t))
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	r := llmtest.CheckCancelMidStream(t, func(w http.ResponseWriter) {
		sse(w, msgStart(5, 1), textStart(0), textDelta(0, "thinking"))
	}, func(s *llmtest.Server) llm.Provider { return newProvider(t, s) })
	checkRequest(t, r)
}

func TestTimeoutPerAttempt(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		sse(w, msgStart(5, 1))
		<-r.Context().Done()
	})
	p := newProvider(t, s, func(o *anthropic.Options) { o.Timeout = 100 * time.Millisecond; o.MaxRetries = 1 })
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	pe := llmtest.ProviderError(t, err, anthropic.Name)
	if !errors.Is(err, llm.ErrNetwork) || !errors.Is(err, context.DeadlineExceeded) || pe.Attempts != 2 || len(s.Requests()) != 2 {
		t.Errorf("error = %#v after %d requests", pe, len(s.Requests()))
	}
}

func TestBadRequests(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w) })
	p := newProvider(t, s, func(o *anthropic.Options) { o.DefaultModel = "" })
	llmtest.CheckRefused(t, p, s, map[string]*llm.Request{
		"nil":          nil,
		"no model":     {Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}},
		"bad schema":   {Model: "m", Tools: []llm.ToolSpec{{Name: "t", Parameters: json.RawMessage(`"x"`)}}},
		"bad output":   {Model: "m", OutputSchema: json.RawMessage(`[]`)},
		"unknown role": {Model: "m", Messages: []llm.Message{{Role: "narrator", Text: "hi"}}},
	})
}

func TestNewOptions(t *testing.T) {
	for _, o := range []anthropic.Options{{BaseURL: "api.anthropic.com"}, {Timeout: -1}, {MaxTokens: -1}} {
		if _, err := anthropic.New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	if _, err := anthropic.New(anthropic.Options{}); err != nil {
		t.Error(err)
	}
}

// TestRetryLogLines: the JSON lines of a call retried once, then failed, name the
// provider once and log their durations as text.
func TestRetryLogLines(t *testing.T) {
	lines, err := llmtest.RetryLog(t, anthropic.Name,
		func(w http.ResponseWriter) { writeError(w, 529, errorBody("overloaded_error", "Overloaded")) },
		func(s *llmtest.Server, log *slog.Logger) llm.Provider {
			return newProvider(t, s, func(o *anthropic.Options) { o.MaxRetries = 1; o.RetryDelay = time.Millisecond; o.Logger = log })
		}, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}, Temperature: new(0.5)})
	if !errors.Is(err, llm.ErrOverloaded) {
		t.Fatalf("error = %v, want ErrOverloaded", err)
	}
	want := []map[string]any{
		{"level": "DEBUG", "msg": "temperature not sent: the Messages API no longer takes it", "provider": "anthropic"},
		{"level": "WARN", "msg": "model call failed, retrying", "provider": "anthropic", "model": "claude-test", "attempt": json.Number("1"),
			"status": json.Number("529"), "kind": "unavailable", "wait": "(duration)", "error": "Overloaded"},
		{"level": "DEBUG", "msg": "model call failed", "provider": "anthropic", "model": "claude-test", "attempt": json.Number("2"),
			"duration": "(duration)", "error": "anthropic: unavailable (HTTP 529): Overloaded (after 2 attempts)"},
	}
	if diff := cmp.Diff(want, llmtest.Stable(lines)); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}
