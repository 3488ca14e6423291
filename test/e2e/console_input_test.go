package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestConsoleAnswersAQuestion: an MCP tool asks a question while a run calls it; the
// console shows the question on the run's page, with the requested schema, and a person
// answers it there as JSON; the answer reaches the tool, and the run ends with it.
func TestConsoleAnswersAQuestion(t *testing.T) {
	chromium := findChromium(t)
	url, done := startQuestionServer(t, true)
	m := startMesh(t, "mcp-input.yaml", "console: {enabled: true}\nmcp_servers:\n  questions: {url: "+url+"}\ngroups:\n  accounts:\n    mcp: {server: questions}\n")
	ctx, cancel := context.WithTimeout(context.Background(), consoleSession)
	defer cancel()
	go func() {
		for _, err := range m.c.Run(ctx, &toolpb.RunRequest{RunId: "ask-me", Prompt: "open one", ToolGroups: []string{"accounts"}, Detached: true}) {
			if err != nil {
				return
			}
		}
	}()
	b := openConsole(t, m, chromium, "http://"+m.orch.Addr+"/console/")
	openConsoleRun(b, "ask-me")
	const loop = "section.loop.root "
	callID, _ := b.wait("the question", fmt.Sprintf(`document.querySelector(%s)?.dataset.callId`, jsString(loop+`[data-kind="approval_requested"]`))).(string)
	row := loop + fmt.Sprintf(`[data-kind="approval_requested"][data-call-id=%s]`, jsString(callID))
	if summary := b.eval(jsText(row + " .summary")).(string); !strings.HasPrefix(summary, "account · call "+callID+" asks: Whose account? (until ") {
		b.fail("the question's row says %q", summary)
	}
	if q := b.eval(jsText(row + " .approval .question")).(string); q != "Whose account?" {
		b.fail("the answer box asks %q", q)
	}
	b.screenshot("question-waiting.png")
	b.do("answer the question",
		chromedp.SetValue(chromedp.CSS(row+fmt.Sprintf(" textarea[data-answer=%s]", jsString(callID))), `{"name": "carol"}`),
		chromedp.Click(chromedp.CSS(row+" .approval button.approve")))
	if decision := b.wait("the answer", jsText(row+" .decision.approved")).(string); !strings.HasPrefix(decision, "Answered by client via ") {
		b.fail("the question's row says %q, want it answered", decision)
	}
	b.screenshot("question-answered.png")
	if text := finalText(t, m.watch(ctx, "ask-me")); text != "account: accept carol" {
		t.Errorf("final text %q", text)
	}
	if n := done.Load(); n != 1 {
		t.Errorf("the tool finished %d times, want once", n)
	}
	b.checkJSErrors()
}
