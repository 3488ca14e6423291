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
// its worker, write the development certificates and token key, start an orchestrator
// with its config and script, run the prompt with the CLI and a tenant's token, and get
// the answer it says. The worker reads the verified tenant: a client that claims another
// tenant in the context gets the same answer.
func TestREADMEWorkerAgainstItsScript(t *testing.T) {
	gos, err := readme.Of("go")
	if err != nil || len(gos) == 0 {
		t.Fatalf("README Go blocks: %v", err)
	}
	yamls, err := readme.Of("yaml")
	if err != nil {
		t.Fatal(err)
	}
	var script, config string
	for _, b := range yamls {
		switch {
		case strings.HasPrefix(b.Text, "# stock.yaml"):
			script = b.Text
		case strings.HasPrefix(b.Text, "# orchestrator.yaml"):
			config = b.Text
		}
	}
	if script == "" || config == "" {
		t.Fatal("the README's stock.yaml or orchestrator.yaml is gone")
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
	cli, err := harness.Bin("toolmesh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The README's commands run in the directory that holds certs/; this one runs them
	// from the test's, so the paths are made absolute.
	certs := filepath.Join(dir, "certs")
	if out, err := exec.CommandContext(ctx, cli, "certs", "-dir", certs).CombinedOutput(); err != nil {
		t.Fatalf("toolmesh certs: %v\n%s", err, out)
	}
	configPath := filepath.Join(dir, "orchestrator.yaml")
	if err := os.WriteFile(configPath, []byte(strings.ReplaceAll(config, "certs/", certs+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := exec.CommandContext(ctx, cli, "token", "-key", filepath.Join(certs, "jwt-signing-key.pem"), "-tenant", "acme").Output()
	if err != nil {
		t.Fatalf("toolmesh token: %v", err)
	}
	tokPath := filepath.Join(dir, "tok")
	if err := os.WriteFile(tokPath, tok, 0o600); err != nil {
		t.Fatal(err)
	}

	orch, err := harness.StartOrchestrator(ctx, "orchestrator", "127.0.0.1:0", nil, "--config", configPath, "--script", scriptPath)
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
	for _, forged := range [][]string{nil, {"-context", "tenantId=globex", "-context", "tenant_id=globex"}} {
		args := append(append([]string{"-token-file", tokPath, "run", "-group", "inventory"}, forged...), "How many SKU-1 are in stock?")
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("toolmesh %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "The inventory says: 7 units of SKU-1 in stock") {
			t.Errorf("toolmesh %v printed:\n%s", args, out)
		}
	}
}
