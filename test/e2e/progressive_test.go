package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// modelTurn is one answer of turnModel: tool calls, or text when there are none.
type modelTurn struct {
	calls [][2]string // tool name, JSON arguments
	text  string
	// before runs when the request for this turn arrives, before the answer.
	before func()
}

// turnModel is an OpenAI-compatible server (Chat Completions, streamed, real wire
// format) that answers the n-th model call of a conversation with turns[n-1] and records
// the tools offered in each request.
type turnModel struct {
	turns []modelTurn
	mu    sync.Mutex
	tools [][]string // tool names offered, per request
}

func (m *turnModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	var offered []string
	for _, t := range body.Tools {
		offered = append(offered, t.Function.Name)
	}
	slices.Sort(offered)
	turn := 1
	for _, msg := range body.Messages {
		if msg.Role == "assistant" {
			turn++
		}
	}
	m.mu.Lock()
	m.tools = append(m.tools, offered)
	m.mu.Unlock()
	if turn > len(m.turns) {
		http.Error(w, `{"error":{"message":"the conversation went past the script","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	t := m.turns[turn-1]
	if t.before != nil {
		t.before()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1700000000, "model": "turns",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if len(t.calls) == 0 {
		send(map[string]any{"role": "assistant", "content": t.text}, nil)
		send(map[string]any{}, "stop")
	} else {
		for i, c := range t.calls {
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": c[0], "arguments": c[1]}}}}, nil)
		}
		send(map[string]any{}, "tool_calls")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (m *turnModel) offered() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.tools)
}

// useModel points the orchestrator's OpenAI-compatible provider at m.
func useModel(t *testing.T, m http.Handler) {
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "test-key")
	t.Setenv("OPENAI_MODEL", "turns")
	t.Setenv("ANTHROPIC_API_KEY", "")
}

// TestFacadeTreeLevelByLevel: a worker registers a three-level facade tree; the model
// opens it level by level, calls a leaf, calls the old facade name again (the guide
// answers), calls the context tool twice (the second time ALREADY LOADED), and finishes.
// The tools offered at each step are asserted from the model server's requests.
func TestFacadeTreeLevelByLevel(t *testing.T) {
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"catalog", `{}`}}},
		{calls: [][2]string{{"inventory", `{}`}}},
		{calls: [][2]string{{"stock", `{}`}}},
		{calls: [][2]string{{"stock_level", `{"sku":"A-100"}`}}},
		{calls: [][2]string{{"catalog", `{}`}}},
		{calls: [][2]string{{"catalog_context", `{}`}}},
		{calls: [][2]string{{"catalog_context", `{}`}}},
		{text: "A-100 has 62 units in stock."},
	}}
	useModel(t, model)
	m := startMesh(t, "", "provider: {name: openai}")
	m.startWorker("shop-1", "shop")
	m.waitWorkers("shop-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "How many A-100 are in stock?", ToolGroups: []string{"shop"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "A-100 has 62 units in stock." {
		t.Errorf("final text %q", got)
	}

	catalogKids := []string{"inventory", "pricing"}
	want := [][]string{
		{"catalog", "open_cart"},
		{"catalog", "catalog_context", "inventory", "open_cart", "pricing"},
		{"catalog", "catalog_context", "inventory", "inventory_context", "open_cart", "pricing", "stock"},
		{"catalog", "catalog_context", "inventory", "inventory_context", "open_cart", "pricing", "stock", "stock_context", "stock_level", "stock_reserve"},
	}
	got := model.offered()
	if len(got) != 8 {
		t.Fatalf("the model got %d requests, want 8", len(got))
	}
	for i, w := range want {
		if diff := cmp.Diff(w, got[i]); diff != "" {
			t.Errorf("tools offered in request %d (-want +got):\n%s", i+1, diff)
		}
	}
	for i := 4; i < 8; i++ {
		if diff := cmp.Diff(want[3], got[i]); diff != "" {
			t.Errorf("tools offered in request %d changed (-want +got):\n%s", i+1, diff)
		}
	}

	results := map[int]string{}
	for _, f := range finished(evs, 0) {
		var turn, idx int
		if _, err := fmt.Sscanf(f.GetCallId(), "call_%d_%d", &turn, &idx); err != nil {
			t.Fatalf("call id %q: %v", f.GetCallId(), err)
		}
		results[turn] = f.GetContent()
	}
	unfold := func(names ...string) string {
		return "Tools now available: " + strings.Join(names, ", ") + ". You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."
	}
	catalogDesc := "Shop catalog: browse products, check stock and prices"
	checks := map[int]string{
		1: unfold(catalogKids...),
		2: unfold("stock"),
		3: unfold("stock_level", "stock_reserve"),
		4: "A-100: 62 in stock",
		5: "Use one of these tools directly:\n- inventory: Inventory: check and reserve the stock of products\n- pricing: Pricing: quote the price of products",
		6: "Tools for " + catalogDesc + ":\n- inventory: Inventory: check and reserve the stock of products\n- pricing: Pricing: quote the price of products",
		7: "ALREADY LOADED. The body of 'catalog_context' was returned earlier in this turn — read it from your conversation history above. Do not call this tool again. Use the tools it describes.",
	}
	for turn, w := range checks {
		if results[turn] != w {
			t.Errorf("result of turn %d:\n got %q\nwant %q", turn, results[turn], w)
		}
	}

	var changes []*toolpb.ToolsChanged
	for _, ev := range evs {
		if c := ev.GetToolsChanged(); c != nil {
			changes = append(changes, c)
		}
	}
	if len(changes) != 3 || !slices.Contains(changes[0].GetRemoved(), "catalog") || !slices.Contains(changes[2].GetAdded(), "stock_level") {
		t.Errorf("tools_changed events: %v", changes)
	}
}

// TestStatefulCartAcrossReplicas: a selectable facade binds a connection string; the cart
// tools it selects keep their items across calls served by different replicas, and
// after the replica that served the facade call is killed.
func TestStatefulCartAcrossReplicas(t *testing.T) {
	var m *mesh
	var opener string
	var openerMu sync.Mutex
	const prompt = "Buy things"
	model := &promptModel{scripts: map[string]*turnModel{prompt: {turns: []modelTurn{
		{calls: [][2]string{{"open_cart", `{"store":"postgres://shop/main"}`}}},
		{calls: [][2]string{{"cart_add", `{"sku":"A-100","quantity":2}`}}},
		{calls: [][2]string{{"cart_add", `{"sku":"B-200","quantity":3}`}}},
		{calls: [][2]string{{"cart_add", `{"sku":"C-300","quantity":1}`}}},
		{calls: [][2]string{{"cart_view", `{}`}}, before: func() {
			openerMu.Lock()
			defer openerMu.Unlock()
			_ = m.workers[opener].Kill() // the replica that ran the selector
		}},
		{calls: [][2]string{{"cart_checkout", `{}`}}},
		{text: "Checked out."},
	}}}}
	useModel(t, model)
	m = startMesh(t, "", "provider: {name: openai}")
	m.startWorker("shop-1", "shop")
	m.startWorker("shop-2", "shop")
	m.waitWorkers("shop-1", "shop-2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"shop"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "open_cart" {
			openerMu.Lock()
			opener = f.GetWorkerId()
			openerMu.Unlock()
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "Checked out." {
		t.Errorf("final text %q", got)
	}
	served := map[string]bool{}
	byTool := map[string]*toolpb.ToolCallFinished{}
	for _, f := range finished(evs, 0) {
		if f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
			t.Errorf("%s: %s %q", f.GetTool(), f.GetOutcome(), f.GetContent())
		}
		if strings.HasPrefix(f.GetTool(), "cart_add") {
			served[f.GetWorkerId()] = true
		}
		byTool[f.GetTool()] = f
	}
	if len(served) != 2 {
		t.Errorf("cart_add calls were served by %v, want both replicas", served)
	}
	view := byTool["cart_view"]
	wantView := `{"store":"postgres://shop/main","items":[{"sku":"A-100","quantity":2},{"sku":"B-200","quantity":3},{"sku":"C-300","quantity":1}]}`
	if view.GetContent() != wantView {
		t.Errorf("cart_view = %q, want %q", view.GetContent(), wantView)
	}
	if view.GetWorkerId() == opener {
		t.Errorf("cart_view ran on %s, the replica that was killed", opener)
	}
	if got := byTool["cart_checkout"].GetContent(); got != "checked out the cart at postgres://shop/main: 3 items, total quantity 6; the cart is now empty" {
		t.Errorf("cart_checkout = %q", got)
	}
	delete(m.workers, opener) // killed on purpose
	// open_cart created the cart's tools for the store: the model reads the store in
	// their descriptions from the next request on, through the replica that never ran
	// the selector too.
	reqs := model.requests(prompt)
	if len(reqs) != 7 {
		t.Fatalf("the model got %d requests, want 7", len(reqs))
	}
	for i, req := range reqs[1:] {
		descs := map[string]string{}
		for _, o := range req.tools {
			descs[o.Name] = o.Description
		}
		want := map[string]string{"cart_add": "Add a quantity of a product to the cart at postgres://shop/main",
			"cart_view": "Show the items of the cart at postgres://shop/main", "cart_checkout": "Check out (summarise and empty) the cart at postgres://shop/main"}
		for name, d := range want {
			if descs[name] != d {
				t.Errorf("request %d: %s is described %q, want %q", i+2, name, descs[name], d)
			}
		}
	}
}
