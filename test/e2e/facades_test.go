package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// promptModel is an OpenAI-compatible model with one script (a turnModel) per prompt,
// so that one orchestrator serves several runs, and it records what each request showed
// the model: every tool with its description and parameters, and the tool results.
type promptModel struct {
	scripts map[string]*turnModel
	mu      sync.Mutex
	seen    map[string][]modelRequest // by prompt
}

// offeredTool is a tool as the model saw it; parameters is its JSON Schema with the
// keys of every object sorted.
type offeredTool struct{ Name, Description, Parameters string }

// modelRequest is what one request showed the model.
type modelRequest struct {
	tools   []offeredTool     // sorted by name
	results map[string]string // tool results, by call id
}

func (m *promptModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, `{"error":{"message":"unreadable body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	var body struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	req := modelRequest{results: map[string]string{}}
	for _, t := range body.Tools {
		req.tools = append(req.tools, offeredTool{t.Function.Name, t.Function.Description, canonicalJSON(t.Function.Parameters)})
	}
	slices.SortFunc(req.tools, func(a, b offeredTool) int { return strings.Compare(a.Name, b.Name) })
	prompt := ""
	for _, msg := range body.Messages {
		switch {
		case msg.Role == "user" && prompt == "":
			prompt = messageText(msg.Content)
		case msg.Role == "tool":
			req.results[msg.ToolCallID] = messageText(msg.Content)
		}
	}
	script, ok := m.scripts[prompt]
	if !ok {
		http.Error(w, `{"error":{"message":"no script for the prompt","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	if m.seen == nil {
		m.seen = map[string][]modelRequest{}
	}
	m.seen[prompt] = append(m.seen[prompt], req)
	m.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	script.ServeHTTP(w, r)
}

// requests returns what the requests of the run with prompt showed the model.
func (m *promptModel) requests(prompt string) []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.seen[prompt])
}

// messageText is a message's content: a string, or the text of its parts.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// canonicalJSON writes JSON with the keys of every object sorted, so that schemas
// compare whatever order the provider wrote them in.
func canonicalJSON(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "invalid JSON: " + string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// unfoldText is what a facade's call answers: the tools it made available, and its
// usage notes after a blank line when it has them.
func unfoldText(notes string, tools ...string) string {
	s := "Tools now available: " + strings.Join(tools, ", ") + ". You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."
	if notes != "" {
		s += "\n\n" + notes
	}
	return s
}

// The library group's tools as the model sees them.
const (
	emptyParams  = `{"properties":{},"type":"object"}`
	titleParams  = `{"additionalProperties":false,"properties":{"title":{"description":"the book's exact title, such as Emma","type":"string"}},"required":["title"],"type":"object"}`
	deskDesc     = "Checkout desk: borrow and return books; the other library tools are put away while you are at the desk"
	deskNotes    = "Use borrow_book to take a book home and return_book to bring it back. Give the exact title."
	shelvesDesc  = "Library shelves: find novels and look up words"
	shelvesNotes = "Use find_novel to search novels by title or author, define_word for the meaning of a word, opening_hours for when the library is open."
	closedParams = `{"additionalProperties":false,"properties":{},"type":"object"}`
	deskPrompt   = "Borrow Emma."
	roomPrompt   = "How does Moby-Dick open?"
	cardPrompt   = "Show the card of L-1024."
)

var (
	// libraryTools are what a run of the library group offers first.
	libraryTools = []offeredTool{
		{"checkout_desk", deskDesc, emptyParams},
		{"library_card", "Show a member's library card. The card is the final answer: nothing is said after it.",
			`{"additionalProperties":false,"properties":{"member":{"description":"the member's card number, such as L-1024","type":"string"}},"required":["member"],"type":"object"}`},
		{"reading_room", "Reading room: list the library's books and read their opening lines", emptyParams},
		{"shelves", shelvesDesc,
			`{"properties":{"category":{"description":"Category to access. Available: fiction, reference","enum":["fiction","reference"],"type":"string"}},"required":["category"],"type":"object"}`},
	}
	findNovel    = offeredTool{"find_novel", "Find novels by part of the title or the author's name", `{"additionalProperties":false,"properties":{"query":{"description":"part of the title or the author's name","type":"string"}},"required":["query"],"type":"object"}`}
	defineWord   = offeredTool{"define_word", "Look up a word in the library's dictionary", `{"additionalProperties":false,"properties":{"word":{"description":"the word to look up","type":"string"}},"required":["word"],"type":"object"}`}
	openingHours = offeredTool{"opening_hours", "Tell when the library is open", closedParams}
)

// withTools is tools without the named ones, plus more, sorted by name.
func withTools(tools []offeredTool, drop []string, more ...offeredTool) []offeredTool {
	out := slices.DeleteFunc(slices.Clone(tools), func(t offeredTool) bool { return slices.Contains(drop, t.Name) })
	out = append(out, more...)
	slices.SortFunc(out, func(a, b offeredTool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// TestWorkerFacadeOptions serves the library group from a real toolworker process and
// checks, through the run's events and the model's requests, what a worker's facade
// options and a worker's return-direct tool do: an exclusive facade leaves the model
// only its own tools (a tool it put away is then unknown); a facade without guide and
// context tools leaves neither; a default by-category facade adds both, and opens all its
// tools for a category it does not list; a return-direct tool's result ends the run as
// its final answer, with no further model call.
func TestWorkerFacadeOptions(t *testing.T) {
	model := &promptModel{scripts: map[string]*turnModel{
		deskPrompt: {turns: []modelTurn{
			{calls: [][2]string{{"checkout_desk", `{}`}}},
			{calls: [][2]string{{"borrow_book", `{"title":"Emma"}`}, {"library_card", `{"member":"L-1024"}`}}},
			{text: "Emma is yours for 21 days."},
		}},
		roomPrompt: {turns: []modelTurn{
			{calls: [][2]string{{"reading_room", `{}`}}},
			{calls: [][2]string{{"shelves", `{"category":"fiction"}`}}},
			{calls: [][2]string{{"read_opening", `{"title":"Moby-Dick"}`}, {"shelves_context", `{}`}, {"shelves", `{}`}}},
			{text: "Call me Ishmael."},
		}},
		cardPrompt: {turns: []modelTurn{
			{calls: [][2]string{{"shelves", `{"category":"maps"}`}}},
			{calls: [][2]string{{"library_card", `{"member":"L-1024"}`}}},
			{text: "the model was called after a return-direct result"},
		}},
	}}
	useModel(t, model)
	m := startMesh(t, "", "provider: {name: openai}")
	m.startWorker("library-1", "library")
	m.waitWorkers("library-1")

	t.Run("exclusive", func(t *testing.T) { checkExclusiveFacade(t, m, model) })
	t.Run("no guide and no context tool", func(t *testing.T) { checkBareFacade(t, m, model) })
	t.Run("unknown category and return direct", func(t *testing.T) { checkReturnDirect(t, m, model) })
}

// libraryRun runs prompt with the library group and returns its events and the results
// of its calls by tool name.
func libraryRun(t *testing.T, m *mesh, prompt string) ([]*toolpb.RunResponse, map[string]*toolpb.ToolCallFinished) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"library"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].GetFinalResult() == nil {
		t.Fatalf("the run did not end with a final result: %v", evs)
	}
	byTool := map[string]*toolpb.ToolCallFinished{}
	for _, f := range finished(evs, 0) {
		byTool[f.GetTool()] = f
	}
	return evs, byTool
}

// toolsChanged returns the run's tools_changed events.
func toolsChanged(evs []*toolpb.RunResponse) []*toolpb.ToolsChanged {
	var out []*toolpb.ToolsChanged
	for _, ev := range evs {
		if c := ev.GetToolsChanged(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// checkRequests compares the tools each request offered with want, one per request.
func checkRequests(t *testing.T, reqs []modelRequest, want ...[]offeredTool) {
	t.Helper()
	if len(reqs) != len(want) {
		t.Fatalf("the model got %d requests, want %d", len(reqs), len(want))
	}
	for i, w := range want {
		if diff := cmp.Diff(w, reqs[i].tools); diff != "" {
			t.Errorf("tools offered in request %d (-want +got):\n%s", i+1, diff)
		}
	}
}

// checkResults compares the content and outcome of each named tool's call.
func checkResults(t *testing.T, byTool map[string]*toolpb.ToolCallFinished, want map[string]string, outcome map[string]toolpb.ToolCallOutcome) {
	t.Helper()
	for name, content := range want {
		f, ok := byTool[name]
		wantOutcome, set := outcome[name]
		if !set {
			wantOutcome = toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK
		}
		if !ok || f.GetContent() != content || f.GetOutcome() != wantOutcome {
			t.Errorf("%s finished %v\nwant %s %q", name, f, wantOutcome, content)
		}
	}
}

// checkExclusiveFacade: calling checkout_desk, exclusive with usage notes, removes every
// other tool and adds its children with its guide and context tools; library_card, which
// it put away, is then an unknown tool.
func checkExclusiveFacade(t *testing.T, m *mesh, model *promptModel) {
	evs, byTool := libraryRun(t, m, deskPrompt)
	if got := evs[len(evs)-1].GetFinalResult(); got.GetText() != "Emma is yours for 21 days." || got.GetReturnDirect() || got.GetIterations() != 3 {
		t.Errorf("final result %v", got)
	}
	checkResults(t, byTool, map[string]string{
		"checkout_desk": unfoldText(deskNotes, "borrow_book", "return_book"),
		"borrow_book":   "Borrowed 'Emma' by Jane Austen: due back in 21 days.",
		"library_card": "Tool 'library_card' does not exist. Available tools: [borrow_book, return_book, checkout_desk, checkout_desk_context]. " +
			"Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable.",
	}, map[string]toolpb.ToolCallOutcome{"library_card": toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL})

	desk := []offeredTool{
		{"borrow_book", "Borrow a book of the library for 21 days", titleParams},
		{"checkout_desk", "Call a specific tool instead: borrow_book, return_book", emptyParams},
		{"checkout_desk_context", deskDesc + ". Available: borrow_book, return_book. " + deskNotes, emptyParams},
		{"return_book", "Return a borrowed book", titleParams},
	}
	reqs := model.requests(deskPrompt)
	checkRequests(t, reqs, libraryTools, desk, desk)
	if got := reqs[1].results["call_1_0"]; got != unfoldText(deskNotes, "borrow_book", "return_book") {
		t.Errorf("the model read checkout_desk's answer as %q", got)
	}
	changes := toolsChanged(evs)
	want := []*toolpb.ToolsChanged{{
		Added:   []string{"borrow_book", "return_book", "checkout_desk", "checkout_desk_context"},
		Removed: []string{"checkout_desk", "library_card", "reading_room", "shelves"},
		Tools:   []string{"borrow_book", "return_book", "checkout_desk", "checkout_desk_context"},
	}}
	checkChanges(t, changes, want)
}

// checkChanges compares tools_changed events, their loop ids and iterations aside.
func checkChanges(t *testing.T, got, want []*toolpb.ToolsChanged) {
	t.Helper()
	type change struct{ Added, Removed, Tools []string }
	conv := func(cs []*toolpb.ToolsChanged) []change {
		var out []change
		for _, c := range cs {
			out = append(out, change{c.GetAdded(), c.GetRemoved(), c.GetTools()})
		}
		return out
	}
	if diff := cmp.Diff(conv(want), conv(got)); diff != "" {
		t.Errorf("tools_changed events (-want +got):\n%s", diff)
	}
}

// checkBareFacade: reading_room, with neither guide nor context tool, leaves no tool of
// its name and no reading_room_context; shelves, a default by-category facade, adds the
// tools of the category it was called with, its guide under its name and its context
// tool, each answering with its exact text.
func checkBareFacade(t *testing.T, m *mesh, model *promptModel) {
	evs, byTool := libraryRun(t, m, roomPrompt)
	if got := evs[len(evs)-1].GetFinalResult(); got.GetText() != "Call me Ishmael." || got.GetReturnDirect() {
		t.Errorf("final result %v", got)
	}
	checkResults(t, byTool, map[string]string{
		"reading_room":    unfoldText("", "list_titles", "read_opening"),
		"read_opening":    "Moby-Dick opens: Call me Ishmael.",
		"shelves_context": "Tools for " + shelvesDesc + ":\n- find_novel: Find novels by part of the title or the author's name\n\nUsage notes: " + shelvesNotes,
		// The second call of shelves, in the same turn as the context tool, reaches the
		// guide that took its name.
		"shelves": "Use one of these tools directly:\n- find_novel: Find novels by part of the title or the author's name\n\n" + shelvesNotes,
	}, nil)
	var shelvesCalls []string
	for _, f := range finished(evs, 0) {
		if f.GetTool() == "shelves" {
			shelvesCalls = append(shelvesCalls, f.GetContent())
		}
	}
	if want := []string{unfoldText(shelvesNotes, "find_novel"), byTool["shelves"].GetContent()}; !slices.Equal(shelvesCalls, want) {
		t.Errorf("shelves answered %q, want %q", shelvesCalls, want)
	}

	room := withTools(libraryTools, []string{"reading_room"},
		offeredTool{"list_titles", "List the library's books with their authors and years", closedParams},
		offeredTool{"read_opening", "Read the first sentence of a book", titleParams})
	fiction := withTools(room, []string{"shelves"},
		findNovel,
		offeredTool{"shelves", "Call a specific tool instead: find_novel", emptyParams},
		offeredTool{"shelves_context", shelvesDesc + ". Available: find_novel. " + shelvesNotes, emptyParams})
	reqs := model.requests(roomPrompt)
	checkRequests(t, reqs, libraryTools, room, fiction, fiction)
	if got := reqs[1].results["call_1_0"]; got != unfoldText("", "list_titles", "read_opening") {
		t.Errorf("the model read reading_room's answer as %q", got)
	}
	if got := reqs[2].results["call_2_0"]; got != unfoldText(shelvesNotes, "find_novel") {
		t.Errorf("the model read shelves' answer as %q", got)
	}
	checkChanges(t, toolsChanged(evs), []*toolpb.ToolsChanged{
		{
			Added: []string{"list_titles", "read_opening"}, Removed: []string{"reading_room"},
			Tools: []string{"checkout_desk", "library_card", "shelves", "list_titles", "read_opening"},
		},
		{
			Added: []string{"find_novel", "shelves", "shelves_context"}, Removed: []string{"shelves"},
			Tools: []string{"checkout_desk", "library_card", "list_titles", "read_opening", "find_novel", "shelves", "shelves_context"},
		},
	})
}

// checkReturnDirect: shelves called with a category it does not list opens all its
// tools; library_card, a worker's return-direct tool, ends the run with its result as
// the final answer, and the model is not called again.
func checkReturnDirect(t *testing.T, m *mesh, model *promptModel) {
	evs, byTool := libraryRun(t, m, cardPrompt)
	const card = "Library card L-1024: valid, no books overdue, no fines due."
	got := evs[len(evs)-1].GetFinalResult()
	if got.GetText() != card || !got.GetReturnDirect() || got.GetIterations() != 2 {
		t.Errorf("final result %v, want %q returned directly after 2 model calls", got, card)
	}
	checkResults(t, byTool, map[string]string{
		"shelves":      unfoldText(shelvesNotes, "find_novel", "define_word", "opening_hours"),
		"library_card": card,
	}, nil)
	if w := byTool["library_card"].GetWorkerId(); w != "library-1" {
		t.Errorf("library_card ran on %q, want library-1", w)
	}
	all := withTools(libraryTools, []string{"shelves"},
		findNovel, defineWord, openingHours,
		offeredTool{"shelves", "Call a specific tool instead: find_novel, define_word, opening_hours", emptyParams},
		offeredTool{"shelves_context", shelvesDesc + ". Available: find_novel, define_word, opening_hours. " + shelvesNotes, emptyParams})
	checkRequests(t, model.requests(cardPrompt), libraryTools, all)
	checkChanges(t, toolsChanged(evs), []*toolpb.ToolsChanged{{
		Added: []string{"find_novel", "define_word", "opening_hours", "shelves", "shelves_context"}, Removed: []string{"shelves"},
		Tools: []string{"checkout_desk", "library_card", "reading_room", "find_novel", "define_word", "opening_hours", "shelves", "shelves_context"},
	}})
}
