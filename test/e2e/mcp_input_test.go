package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// startQuestionServer serves, on a real socket, a go-sdk MCP server whose tool "account"
// asks for the account's owner: with an elicitation on its session (stateful: a
// 2025-11-25 server), or with an input_required result (stateless: 2026-07-28). done
// counts the calls that finished with an answer.
func startQuestionServer(t *testing.T, stateless bool) (url string, done *atomic.Int32) {
	t.Helper()
	return startQuestionServerWith(t, stateless, nil)
}

// startQuestionServerWith is startQuestionServer whose tool "account" calls answered,
// when set, once it has its answer and has taken its effect (counted in done), before it
// returns.
func startQuestionServerWith(t *testing.T, stateless bool, answered func()) (url string, done *atomic.Int32) {
	t.Helper()
	done = &atomic.Int32{}
	s := sdk.NewServer(&sdk.Implementation{Name: "questions", Version: "v1"}, nil)
	ask := &sdk.ElicitParams{Message: "Whose account?", RequestedSchema: &jsonschema.Schema{Type: "object",
		Properties: map[string]*jsonschema.Schema{"name": {Type: "string"}}, Required: []string{"name"}}}
	finish := func(r *sdk.ElicitResult) (*sdk.CallToolResult, any, error) {
		done.Add(1)
		if answered != nil {
			answered()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s %v", r.Action, r.Content["name"])}}}, nil, nil
	}
	sdk.AddTool(s, &sdk.Tool{Name: "account", Description: "Opens an account, asking whose."}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if !stateless {
			r, err := req.Session.Elicit(ctx, ask)
			if err != nil {
				return nil, nil, err
			}
			return finish(r)
		}
		if r, ok := req.Params.InputResponses["owner"].(*sdk.ElicitResult); ok && req.Params.RequestState == "asked" {
			return finish(r)
		}
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"owner": ask}, RequestState: "asked"}, nil, nil
	})
	addTransfer(s, stateless, done)
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: stateless}))
	t.Cleanup(srv.CloseClientConnections)
	t.Cleanup(srv.Close)
	return srv.URL, done
}

// addTransfer adds the tool "transfer", which asks two questions, one after the other:
// whose account, then which currency (in 2026-07-28, two input_required rounds, the
// first answer kept in the request state).
func addTransfer(s *sdk.Server, stateless bool, done *atomic.Int32) {
	field := func(msg, name string) *sdk.ElicitParams {
		return &sdk.ElicitParams{Message: msg, RequestedSchema: &jsonschema.Schema{Type: "object",
			Properties: map[string]*jsonschema.Schema{name: {Type: "string"}}, Required: []string{name}}}
	}
	owner, currency := field("Whose account?", "name"), field("Which currency?", "currency")
	finish := func(name, cur any) (*sdk.CallToolResult, any, error) {
		done.Add(1)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%v in %v", name, cur)}}}, nil, nil
	}
	sdk.AddTool(s, &sdk.Tool{Name: "transfer", Description: "Transfers, asking whose account and which currency."}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if !stateless {
			a, err := req.Session.Elicit(ctx, owner)
			if err != nil {
				return nil, nil, err
			}
			b, err := req.Session.Elicit(ctx, currency)
			if err != nil {
				return nil, nil, err
			}
			return finish(a.Content["name"], b.Content["currency"])
		}
		r := req.Params.InputResponses
		switch state := req.Params.RequestState; {
		case strings.HasPrefix(state, "owner="):
			if b, ok := r["currency"].(*sdk.ElicitResult); ok {
				return finish(strings.TrimPrefix(state, "owner="), b.Content["currency"])
			}
		case state == "asked":
			if a, ok := r["owner"].(*sdk.ElicitResult); ok {
				return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"currency": currency}, RequestState: fmt.Sprintf("owner=%v", a.Content["name"])}, nil, nil
			}
		}
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"owner": owner}, RequestState: "asked"}, nil, nil
	})
}

// startQuestionRun starts a mesh with the question server at url as the group
// "accounts", on a journal in a file, and the detached run "q" that calls its tool
// "account"; it returns once the run shows the tool's question.
func startQuestionRun(ctx context.Context, t *testing.T, url string) (*mesh, *toolpb.ApprovalRequested) {
	t.Helper()
	m := startMesh(t, "mcp-input.yaml", fmt.Sprintf("journal: {data_dir: %q, lease_ttl: 2s}\n", filepath.Join(t.TempDir(), "data"))+
		"mcp_servers:\n  questions: {url: "+url+"}\ngroups:\n  accounts:\n    mcp: {server: questions}\n")
	for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{RunId: "q", Prompt: "open one", ToolGroups: []string{"accounts"}, Detached: true}) {
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		if ap := ev.GetApprovalRequested(); ap != nil {
			return m, ap
		}
	}
	m.dump()
	t.Fatal("the run ended without asking its question")
	return nil, nil
}

// TestQuestionSurvivesRestart: an MCP tool asks the user a question mid-call, in each
// revision; the run shows it (an approval_requested event with the question, and in
// GetRun) and waits, journaled. The orchestrator is SIGKILLed and restarted: the run
// waits again; an answer that does not fit the question's schema is refused naming
// content_json; the right answer reaches the tool, which finishes once.
func TestQuestionSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		protocol  string
	}{
		{"elicitation (2025-11-25)", false, "2025-11-25"},
		{"input_required (2026-07-28)", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			url, done := startQuestionServer(t, tc.stateless)
			m, ap := startQuestionRun(ctx, t, url)
			in := ap.GetInput()
			if in.GetMessage() != "Whose account?" || in.GetInputId() != "1" || in.GetServer() != "questions" || in.GetProtocolVersion() != tc.protocol ||
				!strings.Contains(in.GetRequestedSchemaJson(), `"name"`) || ap.GetTool() != "account" || ap.GetArgumentsJson() != "{}" {
				t.Fatalf("approval_requested = %v, want the tool's question", ap)
			}
			addr := m.orch.Addr
			_ = m.orch.Kill()
			m.startOrchestrator(addr)
			got, err := m.c.GetRun(ctx, "q")
			if err != nil || len(got.GetWaiting()) != 1 || got.GetWaiting()[0].GetInput().GetMessage() != "Whose account?" {
				t.Fatalf("GetRun after the restart: waiting %v, %v; want the question", got.GetWaiting(), err)
			}
			err = m.c.AnswerToolInput(ctx, "q", ap.GetCallId(), "", `{"name": 5}`)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "content_json") {
				t.Errorf("an answer off the schema: %v, want INVALID_ARGUMENT naming content_json", err)
			}
			if err := m.c.AnswerToolInput(ctx, "q", ap.GetCallId(), "", `{"name": "carol"}`); err != nil {
				m.dump()
				t.Fatalf("answering after the restart: %v", err)
			}
			if text := finalText(t, m.watch(ctx, "q")); text != "account: accept carol" {
				m.dump()
				t.Errorf("final text %q, want the tool's answer with the user's", text)
			}
			if n := done.Load(); n != 1 {
				t.Errorf("the tool finished %d times, want once", n)
			}
		})
	}
}

// TestQuestionDeclinedOrUnanswered: a question the user declines, and one nobody answers
// before its deadline (the tool's approval timeout, the call itself needing no approval),
// reach the tool as decline and cancel; the model reads what became of the question,
// then the tool's answer.
func TestQuestionDeclinedOrUnanswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, done := startQuestionServer(t, true)
	m := startMesh(t, "mcp-input.yaml", "mcp_servers:\n  questions: {url: "+url+"}\ngroups:\n  accounts:\n    mcp: {server: questions}\n"+
		"tools:\n  account:\n    approval: {required: false, timeout: 1s}\n")
	for _, tc := range []struct {
		name, deny, want string
	}{
		{"declined", "not mine", "account: The user declined to answer the question tool 'account' asked (\"Whose account?\"), and the tool was told so. Their reason: not mine\nThe tool answered: decline <nil>"},
		{"unanswered", "", "account: Nobody answered the question tool 'account' asked (\"Whose account?\") in time, so the tool was told it was cancelled.\nThe tool answered: cancel <nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var evs []*toolpb.RunResponse
			for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{RunId: "q-" + tc.name, Prompt: "open one", ToolGroups: []string{"accounts"}}) {
				if err != nil {
					m.dump()
					t.Fatal(err)
				}
				evs = append(evs, ev)
				if ap := ev.GetApprovalRequested(); ap != nil && tc.deny != "" {
					if err := m.c.ApproveToolCall(ctx, "q-"+tc.name, ap.GetCallId(), "", false, tc.deny); err != nil {
						t.Fatal(err)
					}
				}
			}
			if text := finalText(t, evs); text != tc.want {
				t.Errorf("final text %q, want %q", text, tc.want)
			}
			var decided *toolpb.ApprovalDecided
			for _, ev := range evs {
				if d := ev.GetApprovalDecided(); d != nil {
					decided = d
				}
			}
			if wantBy := map[bool]string{true: "deadline", false: "client via"}[tc.deny == ""]; decided == nil || decided.GetApproved() || decided.GetInputId() != "1" || !strings.HasPrefix(decided.GetDecidedBy(), wantBy) {
				t.Errorf("approval_decided = %v, want the question refused by %q", decided, wantBy)
			}
		})
	}
	if n := done.Load(); n != 2 {
		t.Errorf("the tool finished %d times, want twice", n)
	}
}

// TestAnsweredQuestionReplayedAfterRestart: a tool asks two questions in turn, in each
// revision; the first is answered, and the orchestrator is SIGKILLed while the second
// waits. After the restart the call is sent again: the first question is answered from
// the journal, without asking anyone, and the second, answered then, completes the
// call. The run's events show each question and each answer once.
func TestAnsweredQuestionReplayedAfterRestart(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			url, done := startQuestionServer(t, stateless)
			m := startMesh(t, "mcp-input-two.yaml", fmt.Sprintf("journal: {data_dir: %q, lease_ttl: 2s}\n", filepath.Join(t.TempDir(), "data"))+
				"mcp_servers:\n  questions: {url: "+url+"}\ngroups:\n  accounts:\n    mcp: {server: questions}\n")
			var second *toolpb.ApprovalRequested
			for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{RunId: "t", Prompt: "transfer", ToolGroups: []string{"accounts"}, Detached: true}) {
				if err != nil {
					m.dump()
					t.Fatal(err)
				}
				ap := ev.GetApprovalRequested()
				if ap.GetInput().GetInputId() == "1" {
					if err := m.c.AnswerToolInput(ctx, "t", ap.GetCallId(), "1", `{"name":"carol"}`); err != nil {
						t.Fatal(err)
					}
				}
				if ap.GetInput().GetInputId() == "2" {
					second = ap
					break
				}
			}
			if second.GetInput().GetMessage() != "Which currency?" {
				t.Fatalf("second question %v", second)
			}
			addr := m.orch.Addr
			_ = m.orch.Kill()
			m.startOrchestrator(addr)
			if err := m.c.AnswerToolInput(ctx, "t", second.GetCallId(), "2", `{"currency":"EUR"}`); err != nil {
				m.dump()
				t.Fatalf("answering the second question after the restart: %v", err)
			}
			evs := m.watch(ctx, "t")
			if text := finalText(t, evs); text != "transfer: carol in EUR" {
				m.dump()
				t.Errorf("final text %q", text)
			}
			var asked, answered []string
			for _, ev := range evs {
				if ap := ev.GetApprovalRequested(); ap != nil {
					asked = append(asked, ap.GetInput().GetInputId())
				}
				if d := ev.GetApprovalDecided(); d != nil {
					answered = append(answered, d.GetInputId()+" "+d.GetContentJson())
				}
			}
			if strings.Join(asked, ",") != "1,2" || strings.Join(answered, ",") != `1 {"name":"carol"},2 {"currency":"EUR"}` {
				t.Errorf("questions %v, answers %v; want each once, in order", asked, answered)
			}
			if n := done.Load(); n != 1 {
				t.Errorf("the tool finished %d times, want once", n)
			}
		})
	}
}

// TestAnswerCommittedBeforeTheToolGoesOn: the answer to an MCP tool's question is in the
// journal before it reaches the tool. The orchestrator is SIGKILLed as soon as the tool,
// which is not idempotent, has its answer and has taken its effect; the run's next owner
// must tell the model the outcome is unknown, never send the call again. The answer's
// record used to be committed in the background (within 5 ms): killed before, the next
// owner found a question without its answer, took the call for one still waiting for a
// person and sent it again, and the tool took its effect twice.
func TestAnswerCommittedBeforeTheToolGoesOn(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var kill atomic.Pointer[func()]
			url, done := startQuestionServerWith(t, stateless, func() {
				if k := kill.Swap(nil); k != nil {
					(*k)()
				}
			})
			m, ap := startQuestionRun(ctx, t, url)
			addr, orch := m.orch.Addr, m.orch
			k := func() { _ = orch.Kill() }
			kill.Store(&k)
			if err := m.c.AnswerToolInput(ctx, "q", ap.GetCallId(), "", `{"name": "carol"}`); err != nil {
				t.Fatalf("answering: %v", err)
			}
			if err := orch.Wait(30 * time.Second); err == nil && !orch.Exited() {
				t.Fatal("the orchestrator was not killed")
			}
			m.startOrchestrator(addr)
			evs := m.watch(ctx, "q")
			text := finalText(t, evs)
			if n := done.Load(); n != 1 {
				m.dump()
				t.Fatalf("the tool, not idempotent, took its effect %d times; want once (final text %q)", n, text)
			}
			if !strings.Contains(text, "unknown") {
				t.Errorf("final text %q; want the model told the outcome is unknown", text)
			}
		})
	}
}
