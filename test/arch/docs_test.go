package arch

import (
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/readme"
)

// configurationDoc returns docs/configuration.md.
func configurationDoc(t *testing.T) string {
	t.Helper()
	root, err := readme.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEveryConfigKeyIsDocumented walks the orchestrator's config as YAML sees it and
// fails on a key that no row of the configuration reference's tables starts with
// (written `a.b.c`, with `<...>` for a map's keys). Only a converter is documented as a
// whole; every other object is documented field by field.
func TestEveryConfigKeyIsDocumented(t *testing.T) {
	doc := configurationDoc(t)
	var missing []string
	documented := func(path []string) bool {
		parts := make([]string, len(path))
		for i, p := range path {
			if p == "<>" {
				parts[i] = `<[^>]+>`
			} else {
				parts[i] = regexp.QuoteMeta(p)
			}
		}
		return regexp.MustCompile("(?m)^\\| `" + strings.Join(parts, `\.`) + "` \\|").MatchString(doc)
	}
	whole := reflect.TypeFor[config.ConverterSpec]()
	var walk func(typ reflect.Type, path []string) bool
	walk = func(typ reflect.Type, path []string) bool {
		if typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		switch {
		case typ == whole:
		case typ.Kind() == reflect.Struct:
			return walkFields(typ, path, walk) // the missing fields are reported
		case typ.Kind() == reflect.Map:
			return walk(typ.Elem(), append(path, "<>"))
		}
		if documented(path) {
			return true
		}
		missing = append(missing, strings.Join(path, "."))
		return false
	}
	walk(reflect.TypeFor[config.Config](), nil)
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md has no table row for %s", strings.Join(missing, ", "))
	}
}

// walkFields walks the YAML fields of a struct; it reports whether every field was
// documented.
func walkFields(typ reflect.Type, path []string, walk func(reflect.Type, []string) bool) bool {
	all := true
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !walk(f.Type, append(path[:len(path):len(path)], name)) {
			all = false
		}
	}
	return all
}

// TestEveryFlagIsDocumented finds the flags each binary defines (calls such as
// fs.String("name", ...) in cmd/<binary>) and fails on one its section of the
// configuration reference does not list as `-name`.
func TestEveryFlagIsDocumented(t *testing.T) {
	doc := configurationDoc(t)
	root, err := readme.Root()
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{"orchestrator": "### orchestrator", "toolworker": "### toolworker", "toolmesh": "### toolmesh (the CLI)"}
	for bin, heading := range sections {
		start := strings.Index(doc, heading+"\n")
		if start < 0 {
			t.Errorf("docs/configuration.md has no section %q", heading)
			continue
		}
		section := doc[start+len(heading):]
		if end := strings.Index(section, "\n### "); end >= 0 {
			section = section[:end]
		}
		flags := definedFlags(t, filepath.Join(root, "cmd", bin))
		if len(flags) == 0 {
			t.Errorf("found no flags in cmd/%s: the test proves nothing", bin)
		}
		for _, f := range flags {
			if !strings.Contains(section, "`-"+f+"`") && !strings.Contains(section, "`-"+f+" ") {
				t.Errorf("cmd/%s defines -%s, which %q does not list", bin, f, heading)
			}
		}
	}
}

// definedFlags returns the names of the flags a command's package defines with the flag
// package's String, Int, Duration, Bool, Float64 and Var functions (on a FlagSet or the
// package).
func definedFlags(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			arg := 0
			switch sel.Sel.Name {
			case "String", "Int", "Duration", "Bool", "Float64", "Int64", "Uint":
			case "Var", "StringVar", "IntVar", "DurationVar", "BoolVar", "Func":
				if sel.Sel.Name != "Func" {
					arg = 1
				}
			default:
				return true
			}
			lit, ok := call.Args[arg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if name, err := strconv.Unquote(lit.Value); err == nil && regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(name) {
				names = append(names, name)
			}
			return true
		})
	}
	return names
}

// TestDefaultsWrittenOutAreTheDefaults parses the configuration reference's "The defaults,
// written out" block as a config file: every value it writes out is the default (a key it
// leaves out is the default by construction).
func TestDefaultsWrittenOutAreTheDefaults(t *testing.T) {
	doc := configurationDoc(t)
	_, rest, ok := strings.Cut(doc, "### The defaults, written out\n")
	if !ok {
		t.Fatal("docs/configuration.md has no section \"The defaults, written out\"")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the defaults' YAML block is not closed")
	}
	got, err := config.Parse([]byte(block))
	if err != nil {
		t.Fatalf("the defaults written out do not parse: %v", err)
	}
	// provider.openai.stream is unset by default, which means true, as written out.
	if s := got.Provider.OpenAI.Stream; s != nil && *s {
		got.Provider.OpenAI.Stream = nil
	}
	if diff := cmp.Diff(config.Default(), got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the defaults written out differ from config.Default() (-code +docs):\n%s", diff)
	}
}
