package llmtest

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// Wire is how a provider's API looks on the wire, for the conformance suite: the fake
// server writes answers and errors with it, and reads back what the provider sent.
type Wire struct {
	// Name is the provider's name (llm.Provider.Name).
	Name string
	// New makes the provider under test on s: its default model DefaultModel, retrying
	// at most twice, 10ms apart.
	New          func(t *testing.T, s *Server) llm.Provider
	DefaultModel string
	// Answer writes a whole streamed answer; Finish is the provider's own finish reason
	// for it, which the provider must pass on as it is (TextFinish or ToolsFinish).
	Answer                  func(w http.ResponseWriter, a Answer)
	TextFinish, ToolsFinish string
	// Error writes an error response of status whose message is msg.
	Error func(w http.ResponseWriter, status int, msg string)
	// Cut writes the start of an answer (the text delta "partial") and ends the response
	// without finishing the stream.
	Cut func(w http.ResponseWriter)
	// Decode reads what the provider sent into the suite's common form (FillToolNames
	// names the tool messages from the calls they answer).
	Decode func(t *testing.T, r Request) Sent
	// ErrorFlag says the wire marks a failed tool result as such; without one, the
	// result's text (which starts "Error: ") is what tells the model.
	ErrorFlag bool
}

// Answer is a streamed answer: its text in deltas, then its tool calls, each with its
// arguments in pieces, then its finish and usage.
type Answer struct {
	Text                      []string
	Calls                     []AnswerCall
	Finish                    string
	InputTokens, OutputTokens int
}

// AnswerCall is a tool call of an Answer.
type AnswerCall struct {
	ID, Name  string
	Arguments []string
}

// Sent is a request as the provider put it on the wire, in a form every provider's can
// be read into.
type Sent struct {
	Model    string
	System   string
	Messages []llm.Message
	// Tools are the offered tools' names and their parameters' JSON values.
	Tools     []string
	Schemas   []any
	MaxTokens int
}

// Conformance runs the scenarios every provider must pass, against a fake server that
// speaks w: text streamed in deltas, tool calls reassembled from pieces, parallel calls
// in order, a conversation with tool results (errors included) sent faithfully, the
// error statuses classified, a rate limit retried, a stream cut short refused, and a
// cancellation that ends the stream at once.
func Conformance(t *testing.T, w Wire) {
	t.Run("text in deltas", func(t *testing.T) { conformText(t, w) })
	t.Run("tool calls reassembled", func(t *testing.T) { conformToolCalls(t, w) })
	t.Run("a conversation with tool results", func(t *testing.T) { conformHistory(t, w) })
	t.Run("error statuses", func(t *testing.T) { conformStatuses(t, w) })
	t.Run("a rate limit retried", func(t *testing.T) { conformRetry(t, w) })
	t.Run("a stream cut short", func(t *testing.T) { conformCut(t, w) })
	t.Run("cancelled mid-stream", func(t *testing.T) {
		CheckCancelMidStream(t, func(rw http.ResponseWriter) { w.Cut(rw) }, func(s *Server) llm.Provider { return w.New(t, s) })
	})
}

func conformText(t *testing.T, w Wire) {
	s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
		w.Answer(rw, Answer{Text: []string{"Hel", "lo", "."}, Finish: w.TextFinish, InputTokens: 21, OutputTokens: 3})
	})
	p := w.New(t, s)
	if p.Name() != w.Name {
		t.Errorf("Name = %q, want %q", p.Name(), w.Name)
	}
	deltas, resp, err := Collect(p.Stream(t.Context(), &llm.Request{System: "Be brief.", MaxOutputTokens: 100,
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Say hello."}}}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]llm.Chunk{{TextDelta: "Hel"}, {TextDelta: "lo"}, {TextDelta: "."}}, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	if resp.Text != "Hello." || resp.Usage != (llm.Usage{InputTokens: 21, OutputTokens: 3}) || resp.FinishReason != w.TextFinish || len(resp.ToolCalls) != 0 {
		t.Errorf("response = %+v", resp)
	}
	sent := w.Decode(t, s.Only(t))
	want := Sent{Model: w.DefaultModel, System: "Be brief.", Messages: []llm.Message{{Role: llm.RoleUser, Text: "Say hello."}}, MaxTokens: 100}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

func conformToolCalls(t *testing.T, w Wire) {
	s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
		w.Answer(rw, Answer{Text: []string{"Checking."}, Finish: w.ToolsFinish, InputTokens: 50, OutputTokens: 20, Calls: []AnswerCall{
			{ID: "call_a", Name: "get_weather", Arguments: []string{`{"ci`, `ty":"Par`, `is"}`}},
			{ID: "call_b", Name: "get_weather", Arguments: []string{`{"city":"Oslo","unit":"c"}`}},
		}})
	})
	p := w.New(t, s)
	schema := `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}`
	_, resp, err := Collect(p.Stream(t.Context(), &llm.Request{Model: "m-2", Messages: []llm.Message{{Role: llm.RoleUser, Text: "Weather?"}},
		Tools: []llm.ToolSpec{{Name: "get_weather", Description: "Weather of a city.", Parameters: json.RawMessage(schema)}}}))
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_b", Name: "get_weather", Arguments: `{"city":"Oslo","unit":"c"}`}}
	if diff := cmp.Diff(want, resp.ToolCalls); diff != "" {
		t.Errorf("tool calls (-want +got):\n%s", diff)
	}
	if resp.Text != "Checking." || resp.FinishReason != w.ToolsFinish || resp.Usage != (llm.Usage{InputTokens: 50, OutputTokens: 20}) {
		t.Errorf("response = %+v", resp)
	}
	sent := w.Decode(t, s.Only(t))
	if sent.Model != "m-2" || !cmp.Equal(sent.Tools, []string{"get_weather"}) || !cmp.Equal(sent.Schemas, []any{JSON(t, schema)}) {
		t.Errorf("sent model %q, tools %v, schemas %v", sent.Model, sent.Tools, sent.Schemas)
	}
}

func conformHistory(t *testing.T, w Wire) {
	s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
		w.Answer(rw, Answer{Text: []string{"Done."}, Finish: w.TextFinish, InputTokens: 1, OutputTokens: 1})
	})
	p := w.New(t, s)
	history := []llm.Message{
		{Role: llm.RoleUser, Text: "Weather in Paris and Rome?"},
		{Role: llm.RoleAssistant, Text: "Checking.", ToolCalls: []llm.ToolCall{
			{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_b", Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
		{Role: llm.RoleTool, ToolCallID: "call_a", ToolName: "get_weather", Text: "18C, sunny"},
		{Role: llm.RoleTool, ToolCallID: "call_b", ToolName: "get_weather", Text: "Error: the weather service is down", IsError: true},
	}
	if _, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: history})); err != nil {
		t.Fatal(err)
	}
	sent := w.Decode(t, s.Only(t))
	want := history
	if !w.ErrorFlag {
		want = slices.Clone(history)
		want[3].IsError = false
	}
	if diff := cmp.Diff(want, sent.Messages); diff != "" {
		t.Errorf("the conversation as sent (-want +got):\n%s", diff)
	}
}

func conformStatuses(t *testing.T, w Wire) {
	for _, tc := range []struct {
		status int
		want   error
	}{
		{http.StatusUnauthorized, llm.ErrAuth},
		{http.StatusForbidden, llm.ErrAuth},
		{http.StatusNotFound, llm.ErrNotFound},
		{http.StatusBadRequest, llm.ErrBadRequest},
	} {
		s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) { w.Error(rw, tc.status, "refused for the test") })
		_, err := llm.Collect(w.New(t, s).Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
		if !errors.Is(err, tc.want) {
			t.Errorf("status %d: error %v, want %v", tc.status, err, tc.want)
		}
		if pe := ProviderError(t, err, w.Name); pe.StatusCode != tc.status || pe.Attempts != 1 || pe.Message != "refused for the test" {
			t.Errorf("status %d: %#v, want the status, one attempt and the server's message", tc.status, pe)
		}
		if n := len(s.Requests()); n != 1 {
			t.Errorf("status %d was tried %d times: only rate limits and server errors are retried", tc.status, n)
		}
	}
}

func conformRetry(t *testing.T, w Wire) {
	s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Error(rw, http.StatusTooManyRequests, "slow down")
			return
		}
		w.Answer(rw, Answer{Text: []string{"ok"}, Finish: w.TextFinish, InputTokens: 1, OutputTokens: 1})
	})
	resp, err := llm.Collect(w.New(t, s).Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err != nil || resp.Text != "ok" || len(s.Requests()) != 2 {
		t.Errorf("after a 429: %+v, %v, %d requests; want the second answer", resp, err, len(s.Requests()))
	}
	s = NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
		w.Error(rw, http.StatusServiceUnavailable, "down")
	})
	_, err = llm.Collect(w.New(t, s).Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if !errors.Is(err, llm.ErrUnavailable) || len(s.Requests()) != 3 {
		t.Errorf("a server that stays down: %v after %d requests; want ErrUnavailable after 3", err, len(s.Requests()))
	}
}

func conformCut(t *testing.T, w Wire) {
	s := NewServer(t, func(rw http.ResponseWriter, _ *http.Request, _ int) { w.Cut(rw) })
	resp, err := llm.Collect(w.New(t, s).Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
	if err == nil {
		t.Errorf("a stream cut short gave %+v and no error", resp)
	}
	if n := len(s.Requests()); n != 1 {
		t.Errorf("a stream cut after its first chunk was sent %d times; it must not be retried", n)
	}
}

// FillToolNames names each tool message of msgs after the call it answers, as a wire that
// sends only the call's id is read back.
func FillToolNames(msgs []llm.Message) {
	names := map[string]string{}
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
		if m.Role == llm.RoleTool {
			msgs[i].ToolName = names[m.ToolCallID]
		}
	}
}
