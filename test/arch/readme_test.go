package arch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/readme"
)

// TestREADMEGoCompiles builds and vets every Go program of the README as a reader would
// paste it into a file of their own module.
func TestREADMEGoCompiles(t *testing.T) {
	blocks, err := readme.Of("go")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("the README has no Go code: the test proves nothing")
	}
	root, err := readme.Root()
	if err != nil {
		t.Fatal(err)
	}
	// Inside the module (under the git-ignored .tmp), so that its packages resolve.
	base := filepath.Join(root, ".tmp", "readme-test")
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	for _, b := range blocks {
		t.Run("line "+strconv.Itoa(b.Line), func(t *testing.T) {
			dir := filepath.Join(base, "block"+strconv.Itoa(b.Line))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.Text), 0o644); err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, dir)
			for _, args := range [][]string{{"build", "-o", filepath.Join(t.TempDir(), "bin"), "./" + rel}, {"vet", "./" + rel}} {
				cmd := exec.Command("go", args...)
				cmd.Dir = root
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("README.md:%d: go %s: %v\n%s", b.Line, args[0], err, out)
				}
			}
		})
	}
}

// TestREADMEScriptsLoad checks that every scripted-model script of the README loads.
func TestREADMEScriptsLoad(t *testing.T) {
	blocks, err := readme.Of("yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range blocks {
		if !strings.Contains("\n"+b.Text, "\nrules:") {
			continue // not a script
		}
		if _, err := scripted.Parse([]byte(b.Text)); err != nil {
			t.Errorf("README.md:%d: %v", b.Line, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("the README has no script: the test proves nothing")
	}
}
