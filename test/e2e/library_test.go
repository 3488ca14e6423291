package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestExampleOrchestrator runs examples/support-orchestrator, an orchestrator built on
// pkg/orchestrator, with a real worker process: its audit layer records every call and
// refuses the denied one, its function converter stamps the context a worker receives,
// its in-process group serves calls, its archive sink gets the artifact a config rule
// sends it, its formatter shows the blackboard's note, and its strategy offers forget
// only once a note was remembered, beside the unfolding of the blackboard facade.
func TestExampleOrchestrator(t *testing.T) {
	dir := t.TempDir()
	audit, archive := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "archive.jsonl")
	script, err := filepath.Abs(filepath.Join("testdata", "library.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orch, err := harness.StartOrchestratorBin(ctx, "support-orchestrator", "support", "127.0.0.1:0", nil,
		"-config", filepath.Join("..", "..", "examples", "support-orchestrator", "orchestrator.yaml"),
		"-script", script, "-audit", audit, "-archive", archive, "-deny", "multiply")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := orch.Stop(30 * time.Second); err != nil {
			t.Errorf("support-orchestrator: %v\n%s", err, orch.Output())
		}
	})
	w, err := harness.StartWorker("w1", "w1", "math,"+examplegroups.EchoPrefix+"ex", orch.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(30 * time.Second) })
	c, err := client.Dial(orch.Addr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := harness.WaitWorkers(ctx, c, "w1"); err != nil {
		t.Fatalf("%v\n%s", err, orch.Output())
	}

	groups, err := c.ListToolGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notes := groups[slices.IndexFunc(groups, func(g *toolpb.ToolGroupStatus) bool { return g.GetGroup().GetRole() == "notes" })]
	if notes.GetSource() != "in-process" || !slices.Equal(notes.GetTools(), []string{"recall", "remember"}) {
		t.Errorf("the notes group is listed as %v", notes)
	}

	var evs []*toolpb.RunResponse
	for ev, err := range c.Run(ctx, &toolpb.RunRequest{Prompt: "take a note", ToolGroups: []string{"notes", "echo_ex", "blackboard"},
		Tools: []string{"add", "multiply"}, Context: map[string]string{"tenantId": "acme"}}) {
		if err != nil {
			t.Fatalf("%v\n%s", err, orch.Output())
		}
		evs = append(evs, ev)
	}
	if got := finalText(t, evs); got != "done: No notes." {
		t.Errorf("final %q", got)
	}
	results := map[string]*toolpb.ToolCallFinished{}
	for _, f := range finished(evs, 0) {
		results[f.GetTool()] = f
	}
	for tool, want := range map[string]string{
		"remember":        "Remembered.",
		"add":             "5",
		"multiply":        "Error: Tool 'multiply' is switched off on this orchestrator. Do without it.",
		"forget":          "Forgot 1 note(s).",
		"blackboard_last": "Last Note:\nA note that says \"call Ada back\".",
		"recall":          "No notes.",
	} {
		if got := results[tool].GetContent(); got != want {
			t.Errorf("%s answered %q, want %q", tool, got, want)
		}
	}
	var echo examplegroups.Echo
	if err := json.Unmarshal([]byte(results["show_context_ex"].GetContent()), &echo); err != nil {
		t.Fatalf("show_context_ex answered %q: %v", results["show_context_ex"].GetContent(), err)
	}
	if at, err := time.Parse(time.RFC3339Nano, echo.Context["requestedAt"]); err != nil || time.Since(at) > time.Minute || echo.Context["tenantId"] != "acme" {
		t.Errorf("the worker received %v: the converter did not stamp it", echo.Context)
	}

	checkAudit(t, audit)
	arch := readLines(t, archive)
	if len(arch) != 1 || !strings.Contains(arch[0], `"type":"notes.Note","value":{"text":"call Ada back"}`) {
		t.Errorf("the archive holds %q", arch)
	}
}

// checkAudit checks the example's audit file: a line for every call, the denied one
// refused, each with its group.
func checkAudit(t *testing.T, audit string) {
	t.Helper()
	var lines []map[string]any
	for _, l := range readLines(t, audit) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, rec)
	}
	byTool := map[string]map[string]any{}
	for _, rec := range lines {
		byTool[rec["tool"].(string)] = rec
	}
	for _, tool := range []string{"remember", "show_context_ex", "multiply", "add", "blackboard", "forget", "blackboard_last", "recall"} {
		if byTool[tool] == nil {
			t.Errorf("the audit file has no line for %s: %v", tool, lines)
		}
	}
	if byTool["multiply"]["refused"] != true || byTool["add"]["refused"] != nil || byTool["remember"]["group"] != "notes" || byTool["show_context_ex"]["group"] != "echo_ex" {
		t.Errorf("audit lines: %v", byTool)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
