package arch

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const module = "github.com/toolmesh/toolmesh/"

// TestPackageTableMatchesImports holds docs/architecture.md's package table to the code:
// every package of the module (outside test/, bench/ and deploy/) has a row, every row
// names packages that exist, and a row's imports are exactly the module's packages its
// packages import (`go list`), written as `internal/{a,b}`, `pkg/x` or none.
func TestPackageTableMatchesImports(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	actual := map[string][]string{} // package → the module's packages it imports
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok || strings.HasPrefix(pkg, "test/") || strings.HasPrefix(pkg, "bench") || strings.HasPrefix(pkg, "deploy/") {
			continue
		}
		imps := []string{}
		for _, imp := range f[1:] {
			if p, ok := strings.CutPrefix(imp, module); ok {
				imps = append(imps, p)
			}
		}
		actual[pkg] = imps
	}

	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| package | role | imports") })
	if start < 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	code := regexp.MustCompile("`([^`]+)`")
	documented := map[string]bool{}
	for _, row := range lines[start+2:] {
		if !strings.HasPrefix(row, "|") {
			break
		}
		cells := strings.Split(strings.Trim(row, "|"), "|")
		if len(cells) != 3 {
			t.Errorf("a row of %d cells: %s", len(cells), row)
			continue
		}
		var pkgs []string
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			pkgs = append(pkgs, m[1])
		}
		want := map[string]bool{}
		for _, p := range pkgs {
			documented[p] = true
			imps, ok := actual[p]
			if !ok {
				t.Errorf("the table names %s, which is no package of the module", p)
			}
			for _, imp := range imps {
				if !slices.Contains(pkgs, imp) {
					want[imp] = true
				}
			}
		}
		got := map[string]bool{}
		if strings.TrimSpace(cells[2]) != "none" {
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				prefix, set, braces := strings.Cut(m[1], "{")
				if !braces {
					got[m[1]] = true
					continue
				}
				for _, x := range strings.Split(strings.TrimSuffix(set, "}"), ",") {
					got[prefix+strings.TrimSpace(x)] = true
				}
			}
		}
		for imp := range want {
			if !got[imp] {
				t.Errorf("%v imports %s; the table does not say so", pkgs, imp)
			}
		}
		for imp := range got {
			if !want[imp] {
				t.Errorf("the table says %v imports %s; it does not", pkgs, imp)
			}
		}
	}
	for p := range actual {
		if !documented[p] {
			t.Errorf("package %s has no row in docs/architecture.md's package table", p)
		}
	}
}
