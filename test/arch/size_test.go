package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Size bounds a reader can hold in their head.
const (
	// maxFuncLines bounds a function's body, outside generated code and table tests.
	maxFuncLines = 100
	// maxHandlerLines bounds a gRPC handler's body: it validates, calls the domain and
	// maps the answer; anything longer belongs below it.
	maxHandlerLines = 60
)

// TestFunctionSizes holds every Go function of the repository (its other modules, the
// benchmarks and the tests included) to maxFuncLines lines, and every gRPC handler (a
// method of OrchestratorService, ToolRegistryService or ToolWorkerService) to
// maxHandlerLines. Generated code is exempt, and so is a table test: a test whose largest
// slice or map literal, its table, is at least half of it.
func TestFunctionSizes(t *testing.T) {
	handlers := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{toolpb.OrchestratorService_ServiceDesc, toolpb.ToolRegistryService_ServiceDesc, toolpb.ToolWorkerService_ServiceDesc} {
		for _, m := range sd.Methods {
			handlers[m.MethodName] = true
		}
		for _, s := range sd.Streams {
			handlers[s.StreamName] = true
		}
	}
	root := moduleRoot(t)
	fset := token.NewFileSet()
	funcs, handled := 0, 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".tmp" || name == "node_modules" || name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		isTest := strings.HasSuffix(path, "_test.go")
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			lines := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Body.Lbrace).Line - 1
			name := fd.Name.Name
			if fd.Recv != nil {
				name = embeddedName(fd.Recv.List[0].Type) + "." + name
			}
			switch {
			case !isTest && fd.Recv != nil && handlers[fd.Name.Name] && takesToolpb(fd):
				handled++
				if lines > maxHandlerLines {
					t.Errorf("%s: gRPC handler %s is %d lines, over %d: move its work below the adapter", rel, name, lines, maxHandlerLines)
				}
			case lines <= maxFuncLines:
			case isTest && 2*largestTable(fset, fd.Body) >= lines:
			default:
				t.Errorf("%s: %s is %d lines, over %d: split it into steps with names", rel, name, lines, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 1000 || handled < 10 {
		t.Errorf("saw %d functions and %d handlers: the walk is broken", funcs, handled)
	}
}

// takesToolpb reports whether a method takes a toolpb message or stream: a handler, not
// a domain method of the same name.
func takesToolpb(fd *ast.FuncDecl) bool {
	for _, p := range fd.Type.Params.List {
		found := false
		ast.Inspect(p.Type, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "toolpb" {
					found = true
				}
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// largestTable is the number of lines of the largest slice or map literal in body.
func largestTable(fset *token.FileSet, body *ast.BlockStmt) int {
	most := 0
	ast.Inspect(body, func(n ast.Node) bool {
		cl, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		switch cl.Type.(type) {
		case *ast.ArrayType, *ast.MapType:
			most = max(most, fset.Position(cl.Rbrace).Line-fset.Position(cl.Lbrace).Line)
		}
		return true
	})
	return most
}
