package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/readme"
)

// TestREADMEWorkerAgainstItsScript does what the README tells a new user to do: build
// its worker, start an orchestrator with its script, run the prompt with the CLI, and
// get the answer it says.
func TestREADMEWorkerAgainstItsScript(t *testing.T) {
	gos, err := readme.Of("go")
	if err != nil || len(gos) == 0 {
		t.Fatalf("README Go blocks: %v", err)
	}
	yamls, err := readme.Of("yaml")
	if err != nil {
		t.Fatal(err)
	}
	var script string
	for _, b := range yamls {
		if strings.HasPrefix(b.Text, "# stock.yaml") {
			script = b.Text
		}
	}
	if script == "" {
		t.Fatal("the README's stock.yaml is gone")
	}
	root, err := readme.Root()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, ".tmp", "readme-e2e")
	t.Cleanup(func() { _ = os.RemoveAll(src) })
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(gos[0].Text), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "my-worker")
	build := exec.Command("go", "build", "-o", bin, "./.tmp/readme-e2e")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's worker: %v\n%s", err, out)
	}
	scriptPath := filepath.Join(dir, "stock.yaml")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orch, err := harness.StartOrchestrator(ctx, "orchestrator", "127.0.0.1:0", nil, "--script", scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orch.Stop(10 * time.Second) }()
	t.Setenv("TOOLMESH_ADDR", orch.Addr)
	w, err := harness.Start("my-worker", bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(10 * time.Second) }()
	if _, err := w.WaitLine(ctx, func(l string) bool { return strings.Contains(l, "registered with orchestrator") }); err != nil {
		t.Fatalf("the README's worker did not register: %v\n%s", err, w.Output())
	}
	cli, err := harness.Bin("toolmesh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, cli, "run", "-group", "inventory", "-context", "tenantId=acme", "How many SKU-1 are in stock?").CombinedOutput()
	if err != nil {
		t.Fatalf("toolmesh run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "The inventory says: 7 units of SKU-1 in stock") {
		t.Errorf("toolmesh run printed:\n%s", out)
	}
}
