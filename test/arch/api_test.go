package arch

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateAPI = flag.Bool("update-api", false, "rewrite testdata/api from the code")

// TestPublicAPISnapshot holds the exported API of every package under pkg/ (but the
// generated pkg/toolpb, which the proto and buf's breaking check hold) to a snapshot in
// testdata/api: a change to what worker, client and orchestrator authors use shows as a
// diff of that file. After a deliberate change, run
// `go test ./test/arch -run TestPublicAPISnapshot -update-api` and review the diff.
func TestPublicAPISnapshot(t *testing.T) {
	root := moduleRoot(t)
	dirs, err := filepath.Glob(filepath.Join(root, "pkg", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || name == "toolpb" {
			continue
		}
		got := apiOf(t, dir)
		file := filepath.Join("testdata", "api", name+".txt")
		seen = append(seen, name+".txt")
		if *updateAPI {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("pkg/%s has no API snapshot (%v): run with -update-api", name, err)
			continue
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("the exported API of pkg/%s changed (-snapshot +code); if that is meant, run with -update-api:\n%s", name, diff)
		}
	}
	snaps, _ := filepath.Glob(filepath.Join("testdata", "api", "*.txt"))
	for _, s := range snaps {
		if !slices.Contains(seen, filepath.Base(s)) {
			t.Errorf("%s is the snapshot of no package", s)
		}
	}
	if len(seen) < 5 {
		t.Errorf("snapshots of only %v: the listing is broken", seen)
	}
}

// apiOf lists the exported declarations of the package in dir, one per line, sorted:
// functions and methods with their signatures, types without their unexported fields
// and methods, constants with their values, variables with their types.
func apiOf(t *testing.T, dir string) string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var lines []string
	print := func(prefix string, n any) {
		var b bytes.Buffer
		if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, prefix+strings.Join(strings.Fields(b.String()), " "))
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				d.Body, d.Doc = nil, nil
				print("", d)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					apiSpec(d.Tok, spec, print)
				}
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func apiSpec(tok token.Token, spec ast.Spec, print func(string, any)) {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return
		}
		s.Doc, s.Comment = nil, nil
		switch ty := s.Type.(type) {
		case *ast.StructType:
			ty.Fields.List = exportedFields(ty.Fields.List)
		case *ast.InterfaceType:
			ty.Methods.List = exportedFields(ty.Methods.List)
		}
		print("type ", s)
	case *ast.ValueSpec:
		for i, n := range s.Names {
			if !n.IsExported() {
				continue
			}
			one := &ast.ValueSpec{Names: []*ast.Ident{n}, Type: s.Type}
			if tok == token.CONST && i < len(s.Values) {
				one.Values = []ast.Expr{s.Values[i]}
			}
			print(tok.String()+" ", one)
		}
	}
}

func exportedFields(fs []*ast.Field) []*ast.Field {
	var out []*ast.Field
	for _, f := range fs {
		f.Doc, f.Comment = nil, nil
		if len(f.Names) == 0 { // embedded
			if id := embeddedName(f.Type); id == "" || ast.IsExported(id) {
				out = append(out, f)
			}
			continue
		}
		var names []*ast.Ident
		for _, n := range f.Names {
			if n.IsExported() {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			f.Names = names
			out = append(out, f)
		}
	}
	return out
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(x.X)
	}
	return ""
}

func exportedRecv(r *ast.FieldList) bool {
	return len(r.List) == 1 && ast.IsExported(embeddedName(r.List[0].Type))
}
