package arch

import (
	"context"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBuildsOnMacOS: the module builds on macOS, where developers work (go build ./...,
// go vet ./..., an editor's checks): no Go file that macOS builds names what the syscall
// or golang.org/x/sys/unix packages have only on Linux — Pdeathsig in a SysProcAttr, or
// unix.Prlimit, broke both. `GOOS=darwin go vet ./...` says as much, at the cost of
// compiling every dependency for macOS (minutes): this reads the two packages' macOS
// files and the module's instead.
func TestBuildsOnMacOS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	darwin := build.Default
	darwin.GOOS, darwin.GOARCH, darwin.CgoEnabled = "darwin", "arm64", false

	goCmd := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	apis := map[string]*platformAPI{
		"syscall":               readAPI(t, &darwin, filepath.Join(goCmd("env", "GOROOT"), "src", "syscall")),
		"golang.org/x/sys/unix": readAPI(t, &darwin, filepath.Join(goCmd("list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys"), "unix")),
	}

	cmd := exec.CommandContext(ctx, "git", "ls-files", "*.go")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	checked := 0
	for name := range strings.Lines(string(out)) {
		name = filepath.Join("../..", strings.TrimSpace(name))
		if ok, err := darwin.MatchFile(filepath.Dir(name), filepath.Base(name)); err != nil || !ok {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]*platformAPI{} // the file's name of each package → its API
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			api, ok := apis[path]
			if !ok {
				continue
			}
			n := filepath.Base(path)
			if imp.Name != nil {
				n = imp.Name.Name
			}
			local[n] = api
		}
		if len(local) == 0 {
			continue
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && local[x.Name] != nil && !local[x.Name].names[n.Sel.Name] {
					t.Errorf("%s: %s.%s does not exist on macOS", fset.Position(n.Pos()), x.Name, n.Sel.Name)
				}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || local[x.Name] == nil {
					return true
				}
				fields := local[x.Name].fields[sel.Sel.Name]
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					if k, ok := kv.Key.(*ast.Ident); ok && fields != nil && !fields[k.Name] {
						t.Errorf("%s: %s.%s has no field %s on macOS", fset.Position(kv.Pos()), x.Name, sel.Sel.Name, k.Name)
					}
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no file of the module imports syscall or golang.org/x/sys/unix for macOS: the test reads nothing")
	}
}

// platformAPI is what a package declares for a platform: its top-level names, and the
// fields of its struct types.
type platformAPI struct {
	names  map[string]bool
	fields map[string]map[string]bool
}

// readAPI reads the API of the package in dir as ctx builds it.
func readAPI(t *testing.T, ctx *build.Context, dir string) *platformAPI {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	api := &platformAPI{names: map[string]bool{}, fields: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					api.names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							api.names[n.Name] = true
						}
					case *ast.TypeSpec:
						api.names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							fs := map[string]bool{}
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									fs[n.Name] = true
								}
							}
							api.fields[s.Name.Name] = fs
						}
					}
				}
			}
		}
	}
	if len(api.names) < 100 {
		t.Fatalf("%s declares %d names for %s: not the package expected", dir, len(api.names), ctx.GOOS)
	}
	return api
}
