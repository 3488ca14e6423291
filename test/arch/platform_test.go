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
// go vet ./..., an editor's checks): no Go file that macOS (arm64 or amd64) builds names
// what the syscall or golang.org/x/sys/unix packages have only on Linux — Pdeathsig in a
// SysProcAttr, or unix.Prlimit, broke both. `GOOS=darwin go vet ./...` says as much, at
// the cost of compiling every dependency for macOS (minutes): this reads the two
// packages' macOS files and the module's instead. It checks the names the packages
// qualify, the fields of their struct literals, and, through any value, the fields
// syscall's process and stat types have on Linux alone; not what a type checker alone
// can tell.
func TestBuildsOnMacOS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	goCmd := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	dirs := map[string]string{
		"syscall":               filepath.Join(goCmd("env", "GOROOT"), "src", "syscall"),
		"golang.org/x/sys/unix": goCmd("list", "-f", "{{.Dir}}", "golang.org/x/sys/unix"),
	}
	platform := func(goos, goarch string) *build.Context {
		c := build.Default
		c.GOOS, c.GOARCH, c.CgoEnabled = goos, goarch, goos == "darwin" // macOS builds with cgo by default
		return &c
	}
	// The fields that syscall's types have on Linux and not on macOS, of types macOS has
	// too (SysProcAttr's Pdeathsig, Stat_t's Atim): a file macOS builds must not name
	// them, through a value either. (A type Linux alone has is named by its package.)
	linux := map[string]*platformAPI{}
	for path, dir := range dirs {
		linux[path] = readAPI(t, platform("linux", "amd64"), dir)
	}
	macs := []*build.Context{platform("darwin", "arm64"), platform("darwin", "amd64")}
	apis := map[*build.Context]map[string]*platformAPI{}
	linuxOnly := map[string]bool{}
	for _, mac := range macs {
		apis[mac] = map[string]*platformAPI{}
		for path, dir := range dirs {
			api := readAPI(t, mac, dir)
			apis[mac][path] = api
			if path != "syscall" {
				continue
			}
			// The types whose fields are named through values: others' would flag common
			// names (Line, Off) in any file.
			for _, typ := range []string{"SysProcAttr", "Stat_t", "Statfs_t", "Rusage", "Timespec", "Timeval"} {
				fs := linux[path].fields[typ]
				if macFields, ok := api.fields[typ]; ok {
					for f := range fs {
						if !macFields[f] {
							linuxOnly[f] = true
						}
					}
				}
			}
		}
	}
	for _, mac := range macs { // a name some type has on macOS is no sign
		for _, api := range apis[mac] {
			for _, fs := range api.fields {
				for f := range fs {
					delete(linuxOnly, f)
				}
			}
		}
	}
	if !linuxOnly["Pdeathsig"] {
		t.Fatalf("Pdeathsig is not among the fields Linux alone has (%d of them): the API was not read", len(linuxOnly))
	}
	checked := 0
	for _, name := range moduleGoFiles(t) {
		for _, mac := range macs {
			if ok, err := mac.MatchFile(filepath.Dir(name), filepath.Base(name)); err != nil || !ok {
				continue
			}
			if checkFileOnMac(t, name, mac, apis[mac], linuxOnly) {
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file of the module imports syscall or golang.org/x/sys/unix for macOS: the test reads nothing")
	}
}

// moduleGoFiles lists the Go files that `go build ./...` of the module builds for some
// platform: not those of testdata, of nested modules or of hidden directories.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	const root = "../.."
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			n := d.Name()
			if n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkFileOnMac checks the file name as mac builds it against the packages' API there
// (fields Linux alone has through a value in any file), and reports whether it imports
// one of the packages.
func checkFileOnMac(t *testing.T, name string, mac *build.Context, apis map[string]*platformAPI, linuxOnly map[string]bool) bool {
	t.Helper()
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
	on := mac.GOOS + "/" + mac.GOARCH
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			x, isIdent := n.X.(*ast.Ident)
			switch {
			case isIdent && local[x.Name] != nil:
				if !local[x.Name].names[n.Sel.Name] {
					t.Errorf("%s: %s.%s does not exist on %s", fset.Position(n.Pos()), x.Name, n.Sel.Name, on)
				}
			case linuxOnly[n.Sel.Name]: // through a value: in any file (exec.Cmd's SysProcAttr)
				t.Errorf("%s: .%s is a field of syscall's types on Linux only, not on %s", fset.Position(n.Sel.Pos()), n.Sel.Name, on)
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
					t.Errorf("%s: %s.%s has no field %s on %s", fset.Position(kv.Pos()), x.Name, sel.Sel.Name, k.Name, on)
				}
			}
		}
		return true
	})
	return len(local) > 0
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
