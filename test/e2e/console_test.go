package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The run of TestConsoleInABrowser: the model calls add, which waits for a person's
// approval, then answers.
const (
	consolePrompt = "What is 2 + 3?"
	consoleAnswer = "The sum is 5."
	consoleReason = "checked in the browser"
	// consoleDecider is who acme's token (signer.tenantToken) is: its issuer#subject.
	consoleDecider = "https://issuer.test#user-1"
)

// Deadlines of the browser: the whole session, and one wait for the page.
const (
	consoleSession = 90 * time.Second
	consoleWait    = 30 * time.Second
)

// TestConsoleInABrowser drives the browser console in Debian's Chromium (headless,
// through chromedp) as a person would: acme signs in with its bearer token; a run the CLI
// started as acme shows in the runs list; its page shows the timeline as the events
// arrive, the call of add waiting for approval, and, once approved with a reason, the
// decision (by acme's token's issuer#subject, as the journal records it too), the
// tool's result, the answer and the state SUCCEEDED. Signed in as globex, the page never
// lists acme's run, and acme's run's address shows not-found. The page throws no
// JavaScript exception and logs no console error all along. Screenshots of each step go
// to $TOOLMESH_BROWSER_ARTIFACTS (a directory; the test's temporary one when unset).
//
// Chromium is $TOOLMESH_CHROMIUM, else chromium on the PATH; without either the test
// skips (make test installs it and sets the variable).
func TestConsoleInABrowser(t *testing.T) {
	chromium := findChromium(t)
	cm := startConsoleMesh(t)
	b := openConsole(t, cm.m, chromium, "http://"+cm.m.orch.Addr+"/console/")
	b.signIn("acme", cm.acmeToken)
	run := startCLIRun(t, cm)
	openConsoleRun(b, run.id)
	callID := approveInConsole(b)
	checkConsoleFinished(b)
	run.wait(t)
	checkConsoleDecision(t, cm, run.id, callID)
	checkConsoleTenants(b, cm, run.id)
	b.checkJSErrors()
}

// findChromium returns the browser to drive: $TOOLMESH_CHROMIUM, else chromium on the
// PATH. The test skips only when there is neither.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOOLMESH_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no Chromium: TOOLMESH_CHROMIUM is unset and chromium is not on the PATH (make test installs Debian's chromium and sets it)")
	}
	return p
}

// consoleMesh is the mesh of TestConsoleInABrowser and its tenants' tokens.
type consoleMesh struct {
	m                      *mesh
	acmeToken, globexToken string
	acmeTokenFile          string // acme's token, for the CLI's -token-file
}

// startConsoleMesh starts an orchestrator with the tenants acme and globex, the console,
// the scripted OpenAI-compatible model and approvals for add, and a math worker.
func startConsoleMesh(t *testing.T) *consoleMesh {
	t.Helper()
	useModel(t, &promptModel{scripts: map[string]*turnModel{consolePrompt: {turns: []modelTurn{
		{calls: [][2]string{{"add", `{"a":2,"b":3}`}}},
		{text: consoleAnswer},
	}}}})
	sign := newSigner(t, "k1")
	m := startMesh(t, "", fmt.Sprintf(`
provider: {name: openai}
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [math]}
  globex: {groups: [math]}
console: {enabled: true, trace_url: "https://tracing.example/trace/{trace_id}"}
tools:
  add:
    approval: {timeout: 10m}
`, sign.jwks))
	m.startWorker("math-1", "math")
	cm := &consoleMesh{m: m, acmeToken: sign.tenantToken(t, "acme"), globexToken: sign.tenantToken(t, "globex"),
		acmeTokenFile: filepath.Join(t.TempDir(), "acme.token")}
	if err := os.WriteFile(cm.acmeTokenFile, []byte(cm.acmeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The workers are listed to tenants only: wait for math-1 as acme.
	acme, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(cm.acmeToken, true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = acme.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := harness.WaitWorkers(ctx, acme, "math-1"); err != nil {
		m.dump()
		t.Fatal(err)
	}
	return cm
}

// consoleBrowser is a headless Chromium tab showing the console; it keeps the
// JavaScript errors of the page and writes screenshots to a directory.
type consoleBrowser struct {
	t     *testing.T
	m     *mesh
	ctx   context.Context // the tab's; its deadline bounds the whole session
	url   string          // the console's page
	shots string          // where the screenshots go

	mu       sync.Mutex
	jsErrors []string
	// requests are the page's requests (fetches, module scripts, the page itself), by
	// Chromium's id, in order, which a failure shows: which were still on their way or
	// failed.
	requests map[network.RequestID]*pageRequest
	order    []network.RequestID
}

// pageRequest is one request of the page and what became of it.
type pageRequest struct {
	method, url string
	sent        time.Time
	status      int64  // the response's status, once it came
	ended       bool   // its body came whole, or it failed
	failed      string // why it failed
}

// openConsole starts Chromium and opens the console's page at url. The browser is
// closed when the test ends, or when consoleSession has passed.
func openConsole(t *testing.T, m *mesh, chromium, url string) *consoleBrowser {
	t.Helper()
	shots := os.Getenv("TOOLMESH_BROWSER_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the console go to %s", shots)
	session, cancelSession := context.WithTimeout(context.Background(), consoleSession)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(session, opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelSession()
	})
	b := &consoleBrowser{t: t, m: m, ctx: tab, url: url, shots: shots}
	// Listen starts the browser and opens the tab, then hears every event of the page.
	if err := chromedp.Listen(tab, b.onEvent); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	// Chromium drops a page's requests when the machine's network changes under it
	// (net::ERR_NETWORK_CHANGED: another test making network namespaces, say), and the
	// page is left half loaded. A person loads it again; so does the test, twice at most.
	for try := 0; ; try++ {
		b.do("open the console", chromedp.Navigate(url))
		if !b.networkChanged() || try == 2 {
			break
		}
		t.Log("the page's requests failed as the network changed under the browser: loading it again")
	}
	return b
}

// networkChanged reports whether a request of the page failed as the network changed
// under the browser, and forgets the page's requests so far.
func (b *consoleBrowser) networkChanged() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := false
	for _, r := range b.requests {
		changed = changed || strings.Contains(r.failed, "ERR_NETWORK_CHANGED")
	}
	if changed {
		clear(b.requests)
		b.order = b.order[:0]
	}
	return changed
}

// onEvent keeps the page's uncaught exceptions and console.error calls. It runs on the
// goroutine that reads the browser's messages: it only appends.
func (b *consoleBrowser) onEvent(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "uncaught exception: " + d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		if d.URL != "" {
			msg += fmt.Sprintf(" (%s:%d:%d)", d.URL, d.LineNumber+1, d.ColumnNumber+1)
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		var args []string
		for _, a := range ev.Args {
			var text string
			switch {
			case a.Type == runtime.RemoteObjectTypeString && json.Unmarshal(a.Value, &text) == nil:
			case a.Description != "":
				text = a.Description
			default:
				text = string(a.Value)
			}
			args = append(args, text)
		}
		msg = "console.error: " + strings.Join(args, " ")
	case *network.EventRequestWillBeSent:
		b.mu.Lock()
		if b.requests == nil {
			b.requests = map[network.RequestID]*pageRequest{}
		}
		if _, seen := b.requests[ev.RequestID]; !seen && ev.Request != nil {
			b.requests[ev.RequestID] = &pageRequest{method: ev.Request.Method, url: ev.Request.URL, sent: time.Now()}
			b.order = append(b.order, ev.RequestID)
		}
		b.mu.Unlock()
		return
	case *network.EventResponseReceived:
		b.request(ev.RequestID, func(r *pageRequest) {
			if ev.Response != nil {
				r.status = ev.Response.Status
			}
		})
		return
	case *network.EventLoadingFinished:
		b.request(ev.RequestID, func(r *pageRequest) { r.ended = true })
		return
	case *network.EventLoadingFailed:
		b.request(ev.RequestID, func(r *pageRequest) { r.ended, r.failed = true, ev.ErrorText })
		return
	default:
		return
	}
	b.mu.Lock()
	b.jsErrors = append(b.jsErrors, msg)
	b.mu.Unlock()
}

// request runs note on the request of id, if the page sent it.
func (b *consoleBrowser) request(id network.RequestID, note func(*pageRequest)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.requests[id]; r != nil {
		note(r)
	}
}

// logRequests logs the page's requests that had not ended or that failed.
func (b *consoleBrowser) logRequests() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var lines []string
	for _, id := range b.order {
		r := b.requests[id]
		switch {
		case !r.ended:
			lines = append(lines, fmt.Sprintf("%s %s: sent %s ago, not ended (status %d)", r.method, r.url, time.Since(r.sent).Round(time.Millisecond), r.status))
		case r.failed != "":
			lines = append(lines, fmt.Sprintf("%s %s: failed: %s", r.method, r.url, r.failed))
		}
	}
	b.t.Logf("---- the page's requests: %d sent, %d not ended or failed ----\n%s", len(b.order), len(lines), strings.Join(lines, "\n"))
}

// checkJSErrors fails the test with the page's JavaScript errors, if it had any. A call
// that failed is not one: the page shows it in its banner, and Chromium reports the
// failed request in its log, not as a console.error or an exception.
func (b *consoleBrowser) checkJSErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.jsErrors) > 0 {
		b.t.Errorf("the console's page had %d JavaScript errors:\n%s", len(b.jsErrors), strings.Join(b.jsErrors, "\n"))
	}
}

// fail ends the test, with what the page showed, a last screenshot, the page's
// JavaScript errors and the mesh's output.
func (b *consoleBrowser) fail(format string, args ...any) {
	b.t.Helper()
	if b.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`)); err == nil {
			b.t.Logf("---- the page ----\n%s", text)
		}
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(b.shots, "failed.png"), png, 0o644)
		}
		cancel()
	}
	b.logRequests()
	b.checkJSErrors()
	b.m.dump()
	b.t.Fatalf(format, args...)
}

// do runs steps in the page, for at most consoleWait.
func (b *consoleBrowser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, consoleWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail("%s: %v", what, err)
	}
}

// wait polls the page every 100 ms, for at most consoleWait, until the JavaScript
// expression is truthy, and returns its value.
func (b *consoleBrowser) wait(what, expr string) any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, consoleWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Poll[any](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(consoleWait)))
	if err != nil {
		b.fail("waiting for %s: %v", what, err)
	}
	return v
}

// eval evaluates a JavaScript expression in the page.
func (b *consoleBrowser) eval(expr string) any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, consoleWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		b.fail("evaluating %s: %v", expr, err)
	}
	return v
}

// screenshot writes a screenshot of the whole page to name in the artifacts' directory.
func (b *consoleBrowser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, consoleWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn types token into the sign-in form of the page's header, as who, and waits until
// the header says that the page is signed in (it then draws its view anew).
func (b *consoleBrowser) signIn(who, token string) {
	b.t.Helper()
	b.do("sign in as "+who,
		chromedp.SendKeys(chromedp.CSS("#auth form.signin #token"), token),
		chromedp.Click(chromedp.CSS(`#auth form.signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#auth .who")))
}

// jsString writes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// jsPresent is a JavaScript expression: whether the page has an element matching sel.
func jsPresent(sel string) string {
	return fmt.Sprintf("document.querySelector(%s) !== null", jsString(sel))
}

// jsText is a JavaScript expression: the text of the first element matching sel, or ""
// when there is none.
func jsText(sel string) string {
	return fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? "")`, jsString(sel))
}

// cliRun is a run the toolmesh CLI started and follows: it prints the run's events, one
// JSON line each, until the run ends.
type cliRun struct {
	id     string
	cmd    *exec.Cmd
	done   chan struct{} // closed when the CLI's stdout is read to its end
	stderr bytes.Buffer

	mu    sync.Mutex
	lines []string
}

// startCLIRun runs consolePrompt with the CLI as acme (run -detach -tool add) and
// returns once the CLI printed the run's first event, with the run's id.
func startCLIRun(t *testing.T, cm *consoleMesh) *cliRun {
	t.Helper()
	bin, err := harness.Bin("toolmesh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*consoleSession)
	r := &cliRun{done: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, bin, "-addr", cm.m.orch.Addr, "-token-file", cm.acmeTokenFile,
		"run", "-detach", "-json", "-tool", "add", consolePrompt)
	t.Cleanup(func() {
		cancel() // kills the CLI if the test ended before the run
		if r.cmd.Process != nil && r.cmd.ProcessState == nil {
			<-r.done
			_ = r.cmd.Wait()
		}
	})
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	r.cmd.Stderr = &r.stderr
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go r.read(stdout, first)
	wait, cancelWait := context.WithTimeout(ctx, consoleWait)
	defer cancelWait()
	select {
	case r.id = <-first:
	case <-r.done:
		_ = r.cmd.Wait()
		t.Fatalf("toolmesh run ended before its first event:\n%s", r.stderr.String())
	case <-wait.Done():
		t.Fatalf("toolmesh run printed no event within %s", consoleWait)
	}
	t.Logf("the CLI started run %s", r.id)
	return r
}

// read keeps the CLI's lines and sends the run id of the first event on first.
func (r *cliRun) read(stdout io.Reader, first chan<- string) {
	defer close(r.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		r.mu.Lock()
		r.lines = append(r.lines, line)
		n := len(r.lines)
		r.mu.Unlock()
		ev := &toolpb.RunResponse{}
		if n == 1 && protojson.Unmarshal([]byte(line), ev) == nil && ev.GetRunId() != "" {
			first <- ev.GetRunId()
		}
	}
}

// wait waits for the CLI to end with the run, and checks that it printed the answer and
// exited 0.
func (r *cliRun) wait(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), consoleWait)
	defer cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		t.Fatalf("toolmesh run did not end within %s of the run's end", consoleWait)
	}
	err := r.cmd.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	last := &toolpb.RunResponse{}
	if len(r.lines) > 0 {
		_ = protojson.Unmarshal([]byte(r.lines[len(r.lines)-1]), last)
	}
	if err != nil || last.GetFinalResult().GetText() != consoleAnswer {
		t.Errorf("toolmesh run: %v, last event %v; want exit 0 and the answer %q\nstderr:\n%s", err, last, consoleAnswer, r.stderr.String())
	}
}

// openConsoleRun waits for the run to show in the runs list (it refreshes every 2 s),
// and opens its page.
func openConsoleRun(b *consoleBrowser, runID string) {
	b.t.Helper()
	row := fmt.Sprintf("tr[data-run-id=%s]", jsString(runID))
	b.wait("run "+runID+" in the runs list", jsPresent(row))
	// It waits for the approval of its call: it runs.
	if state := b.eval(fmt.Sprintf("document.querySelector(%s)?.dataset.state", jsString(row+" [data-state]"))); state != "RUN_STATE_RUNNING" {
		b.fail("run %s is listed in the state %v, want RUN_STATE_RUNNING", runID, state)
	}
	b.screenshot("01-runs.png")
	b.do("open run "+runID, chromedp.Click(chromedp.CSS(row+" a")))
	b.wait("the page of run "+runID, fmt.Sprintf("document.title === %s", jsString("Run "+runID+" · toolmesh")))
}

// approveInConsole waits for the timeline to show the run started and its call of add
// waiting for approval, approves it with a reason, and waits for the decision to show;
// it returns the call's id.
func approveInConsole(b *consoleBrowser) string {
	b.t.Helper()
	const loop = "section.loop.root " // the run's own loop: call ids repeat across loops
	b.wait("the timeline's started row", jsPresent(loop+`[data-kind="started"]`))
	callID, _ := b.wait("the call waiting for approval",
		fmt.Sprintf(`document.querySelector(%s)?.dataset.callId`, jsString(loop+`[data-kind="approval_requested"]`))).(string)
	row := loop + fmt.Sprintf(`[data-kind="approval_requested"][data-call-id=%s]`, jsString(callID))
	if summary := b.eval(jsText(row + " .summary")).(string); !strings.Contains(summary, "add(") || !strings.Contains(summary, "waits for approval") {
		b.fail("the approval's row says %q; want add's call waiting for approval", summary)
	}
	b.do("wait for the Approve button", chromedp.WaitVisible(chromedp.CSS(loop+fmt.Sprintf("[data-approve=%s]", jsString(callID)))))
	b.screenshot("02-run-waiting.png")
	b.do("approve call "+callID,
		chromedp.SendKeys(chromedp.CSS(loop+fmt.Sprintf("[data-reason=%s]", jsString(callID))), consoleReason),
		chromedp.Click(chromedp.CSS(loop+fmt.Sprintf("[data-approve=%s]", jsString(callID)))))
	decision := b.wait("the decision", jsText(row+" .decision.approved"))
	if want := "Approved by " + consoleDecider + ": " + consoleReason; decision != want {
		b.fail("the approval's row says %q, want %q", decision, want)
	}
	b.wait("the approval_decided row", jsPresent(loop+`[data-kind="approval_decided"]`))
	b.screenshot("03-approved.png")
	return callID
}

// checkConsoleFinished waits for the run to end SUCCEEDED with the answer, and checks the
// tool's result in the timeline.
func checkConsoleFinished(b *consoleBrowser) {
	b.t.Helper()
	b.wait("the state SUCCEEDED", jsPresent(`.run-head [data-state="RUN_STATE_SUCCEEDED"]`))
	if answer := b.wait("the answer", jsText("section.answer pre")); answer != consoleAnswer {
		b.fail("the answer shows %q, want %q", answer, consoleAnswer)
	}
	b.wait("the answer's row", jsPresent(`section.loop.root [data-kind="final_result"]`))
	result := `section.loop.root [data-kind="tool_call_finished"]`
	b.wait("the tool's result", jsPresent(result))
	b.do("open the tool's result", chromedp.Click(chromedp.CSS(result+" details > summary")))
	if got := b.wait("the tool's result opened", jsText(result+" details[open] pre")); got != "5" {
		b.fail("add's result shows %q, want 5", got)
	}
	b.screenshot("04-finished.png")
}

// checkConsoleDecision checks through the API, with the CLI, that the run succeeded and
// that the journal recorded the decision with who made it.
func checkConsoleDecision(t *testing.T, cm *consoleMesh, runID, callID string) {
	t.Helper()
	flags := []string{"-addr", cm.m.orch.Addr, "-token-file", cm.acmeTokenFile}
	stdout, stderr, code := command(t, "toolmesh", nil, append(flags, "get", runID)...)
	run := &toolpb.GetRunResponse{}
	if err := protojson.Unmarshal([]byte(stdout), run); code != 0 || err != nil {
		t.Fatalf("toolmesh get %s: exit %d, %v\n%s", runID, code, err, stderr)
	}
	if run.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || run.GetFinalText() != consoleAnswer || run.GetTenant() != "acme" {
		t.Errorf("GetRun: %v; want acme's run SUCCEEDED with %q", run, consoleAnswer)
	}
	stdout, stderr, code = command(t, "toolmesh", nil, append(flags, "watch", "-json", runID)...)
	if code != 0 {
		t.Fatalf("toolmesh watch %s: exit %d\n%s", runID, code, stderr)
	}
	var decided []*toolpb.ApprovalDecided
	for line := range strings.Lines(stdout) {
		ev := &toolpb.RunResponse{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("toolmesh watch printed %q: %v", line, err)
		}
		if d := ev.GetApprovalDecided(); d != nil {
			decided = append(decided, d)
		}
	}
	if len(decided) != 1 || decided[0].GetCallId() != callID || !decided[0].GetApproved() ||
		decided[0].GetDecidedBy() != consoleDecider || decided[0].GetReason() != consoleReason {
		t.Errorf("approval_decided events %v; want call %s approved by %s: %s", decided, callID, consoleDecider, consoleReason)
	}
}

// checkConsoleTenants signs out and in as globex, and checks that globex's runs list never
// shows acme's run (over more than one refresh) and that acme's run's address shows
// not-found, not the run.
func checkConsoleTenants(b *consoleBrowser, cm *consoleMesh, runID string) {
	b.t.Helper()
	row := fmt.Sprintf("tr[data-run-id=%s]", jsString(runID))
	b.do("go to the runs", chromedp.Click(chromedp.CSS(`[data-nav="runs"]`)))
	b.wait("acme's run listed to acme", jsPresent(row))
	b.do("sign out", chromedp.Click(chromedp.CSS("#auth button")), chromedp.WaitVisible(chromedp.CSS("#auth #token")))
	b.signIn("globex", cm.globexToken)
	b.wait("globex's runs list", fmt.Sprintf(`%s.startsWith("Live")`, jsText("main p.status")))
	// For 3 s (the list refreshes every 2 s), acme's run must never show.
	since := b.eval("Date.now()")
	seen := b.wait("3 s of globex's runs list", fmt.Sprintf(`document.querySelector(%s) ? "shown" : Date.now() - %v >= 3000 && "absent"`, jsString(row), since))
	if seen != "absent" || b.eval(jsPresent("main p.empty:not([hidden])")) != true {
		b.fail("globex's runs list: acme's run %s; want it absent, and the list empty", seen)
	}
	b.do("open acme's run by its address", chromedp.Navigate(b.url+"#/runs/"+runID))
	b.wait("not found", fmt.Sprintf(`%s.includes("knows no run") && !document.getElementById("banner").hidden`, jsText(".run-notice")))
	if banner := b.eval(jsText("#banner")).(string); !strings.Contains(banner, "not_found") {
		b.fail("the banner says %q; want not_found", banner)
	}
	for _, sel := range []string{"[data-seq]", ".run-head [data-state]", "section.answer"} {
		if b.eval(jsPresent(sel)) != false {
			b.fail("globex's page of acme's run shows %s", sel)
		}
	}
	if body := b.eval("document.body.innerText").(string); strings.Contains(body, consoleAnswer) {
		b.fail("globex's page of acme's run shows its answer:\n%s", body)
	}
	b.screenshot("05-globex.png")
}
