package crash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// A step of the scripted conversation: tool calls the model asks for, or its answer.
type step struct {
	calls []call
	// answer, when the step has no calls, is the model's final text: "done", then the
	// content of every tool message it read, in order.
	answer bool
}

type call struct{ tool, args string }

// journey is the conversation every crash case runs: idempotent calls in parallel, a
// call that is not idempotent alone, a slow idempotent one, idempotent and not together,
// then the answer. The payment tools hold their answers for a while after their effect,
// so that a crash can come while they run.
var journey = []step{
	{calls: []call{{"credit", `{"account":"alice","cents":100,"hold_ms":20}`}, {"add", `{"a":2,"b":3}`}}},
	{calls: []call{{"charge", `{"account":"bob","cents":200,"hold_ms":20}`}}},
	{calls: []call{{"credit", `{"account":"carol","cents":300,"hold_ms":150}`}}},
	{calls: []call{{"add", `{"a":4,"b":5}`}, {"charge", `{"account":"dave","cents":400,"hold_ms":20}`}}},
	{answer: true},
}

// askID is the part of a call id that the model makes unique to each answer.
var askID = regexp.MustCompile(`_ask[0-9]+\b`)

// ask is one request the model got.
type ask struct {
	turn int
	// digest is of the request body as sent (the conversation, the tools, the options),
	// with the calls' ids as the model gave them less what is unique to each answer (see
	// askID): a step asked again names its calls anew, and the requests after it differ
	// from the uninterrupted run's in those ids only.
	digest string
	model  string // the model name the answer carried, unique to this request
	body   []byte
	at     time.Time
}

// model speaks OpenAI's Chat Completions streaming wire format (server-sent events of
// chat.completion.chunk objects, usage in a last chunk, then [DONE]) and follows the
// journey: it answers turn n (one more than the assistant messages it was sent) with
// step n, whatever else the conversation holds, so that the same conversation always
// gets the same answer. Every answer names a model of its own ("gpt-crash-<n>"), which
// the orchestrator journals with the answer: which request a journaled answer answered
// is then known.
type model struct {
	srv *httptest.Server

	mu   sync.Mutex
	asks []ask
}

func startModel(t *testing.T) *model {
	m := &model{}
	m.srv = httptest.NewServer(m)
	t.Cleanup(m.srv.Close)
	return m
}

func (m *model) url() string { return m.srv.URL + "/v1" }

// waitTurn waits until the model answered turn once more, after the first since asks.
func (m *model) waitTurn(ctx context.Context, turn, since int) {
	for ctx.Err() == nil {
		for _, a := range m.requests()[since:] {
			if a.turn == turn {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func (m *model) requests() []ask {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ask(nil), m.asks...)
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	raw := new(strings.Builder)
	if err := json.NewDecoder(teeBody(r, raw)).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	turn := 1
	var results []string
	for _, msg := range body.Messages {
		switch msg.Role {
		case "assistant":
			turn++
		case "tool":
			results = append(results, fmt.Sprint(msg.Content))
		}
	}
	sum := sha256.Sum256([]byte(askID.ReplaceAllString(raw.String(), "")))
	m.mu.Lock()
	n := len(m.asks) + 1
	name := fmt.Sprintf("gpt-crash-%d", n)
	m.asks = append(m.asks, ask{turn: turn, digest: hex.EncodeToString(sum[:8]), model: name, body: []byte(raw.String()), at: time.Now()})
	m.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion.chunk", "created": 1700000000, "model": name,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	if turn > len(journey) {
		turn = len(journey)
	}
	st := journey[turn-1]
	if st.answer {
		chunk(map[string]any{"role": "assistant", "content": "done"}, nil)
		chunk(map[string]any{"content": ": " + strings.Join(results, " | ")}, nil)
		chunk(map[string]any{}, "stop")
	} else {
		var calls []any
		for i, c := range st.calls {
			// A new id at every answer, as hosted models give them (OpenAI's call_…,
			// Anthropic's toolu_…): a step asked again names its calls anew, and a call
			// that left before its answer was kept would go out again under another
			// idempotency key.
			calls = append(calls, map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d_ask%d", turn, i, n), "type": "function",
				"function": map[string]any{"name": c.tool, "arguments": c.args}})
		}
		chunk(map[string]any{"role": "assistant", "tool_calls": calls}, nil)
		chunk(map[string]any{}, "tool_calls")
	}
	usage, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion.chunk", "created": 1700000000, "model": name,
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", usage)
}

// teeBody copies what is read of r's body to to.
func teeBody(r *http.Request, to *strings.Builder) *teeReader {
	return &teeReader{r: r, to: to}
}

type teeReader struct {
	r  *http.Request
	to *strings.Builder
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Body.Read(p)
	t.to.Write(p[:n])
	return n, err
}
