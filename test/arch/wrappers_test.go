// Package arch checks rules that hold across the code base. This file proves that every
// tool wrapper forwards the ToolCallContext: it finds every type in the module that wraps
// a tool (it has a Delegate method and is itself a tool), and fails when one is missing
// from the table of constructors below or drops anything on the way to its delegate.
package arch

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// wrappers builds each wrapper type around a delegate; the key is "<dir>.<type>".
var wrappers = map[string][]func(tool.Tool) tool.Tool{
	"pkg/tool.wrapper": {
		func(t tool.Tool) tool.Tool { return tool.WithName(t, "renamed") },
		func(t tool.Tool) tool.Tool { return tool.WithDescription(t, "described") },
		func(t tool.Tool) tool.Tool { return tool.WithNote(t, "noted") },
		func(t tool.Tool) tool.Tool { return tool.WithDefinitionMetadata(t, map[string]string{"k": "v"}) },
	},
	// Every layer of the call pipeline, each alone around the tool; the run's whole
	// pipeline is checked in internal/run.
	"internal/toolcall.Tool": {
		decorators.ErrorMapping,
		func(t tool.Tool) tool.Tool { return approveAll{run.RequireApproval(t, time.Minute)} },
		decorators.OutputBound(decorators.Bounds{MaxTextBytes: 1024, MaxArtifactBytes: 1024}),
		func(t tool.Tool) tool.Tool {
			return decorators.ConditionalReplan(t, func(context.Context, decorators.ReplanContext) (*decorators.ReplanDecision, error) { return nil, nil })
		},
		decorators.PublishToBlackboard,
		func(t tool.Tool) tool.Tool {
			return decorators.SinkArtifacts(t, decorators.Selector{}, &decorators.ListSink{}, "list")
		},
		func(t tool.Tool) tool.Tool { return decorators.TrackAssets(t, decorators.Selector{}) },
		decorators.EventPublishing,
		func(t tool.Tool) tool.Tool { return decorators.Telemetry(tracing())(t) },
		agentic.Chain,
		func(t tool.Tool) tool.Tool {
			wrap, _ := tenantService().TenantView("acme")
			return wrap(t)
		},
		func(t tool.Tool) tool.Tool {
			b := agentic.NewBindings(func() []string { return []string{"T"} }, nil)
			b.OfferIn(context.Background(), tool.Entry{TypeName: "T", JSON: []byte(`{}`)})
			return withBindings{agentic.Method(t, "T"), b}
		},
		func(t tool.Tool) tool.Tool { return (&decorators.Chain{}).Decorate(t) },
	},
	"internal/run.localTool": {func(t tool.Tool) tool.Tool {
		ts, _, err := localService(t).GroupTools(context.Background(), "local")
		if err != nil || len(ts) != 1 {
			panic(fmt.Sprint(ts, err))
		}
		return ts[0]
	}},
	"internal/router.bound": {func(t tool.Tool) tool.Tool { return router.Bound(t, toolcall.NewState([]byte("s"))) }},
	"pkg/toolctx.oneShot":   {func(t tool.Tool) tool.Tool { return toolctx.OneShotPerLoop(t, "advice") }},
	"internal/examplegroups.delayed": {func(t tool.Tool) tool.Tool {
		return examplegroups.WithDelay(time.Millisecond, []tool.Tool{t})[0]
	}},
	"internal/agentic.method": {func(t tool.Tool) tool.Tool {
		b := agentic.NewBindings(func() []string { return []string{"T"} }, nil)
		b.OfferIn(context.Background(), tool.Entry{TypeName: "T", JSON: []byte(`{}`)})
		return withBindings{agentic.Method(t, "T"), b}
	}},
	"internal/agentic.wrappedFacade": {func(t tool.Tool) tool.Tool {
		return agenticWrapper(agentic.Spec{Name: "a", Description: "A.", Tools: []string{"probe"}})(probeFacade{tool.Of(t.Definition().Name, "box", nil), t})
	}},
	"internal/agentic.recording": {agenticWrapper(agentic.Spec{Name: "a", Description: "A.", Tools: []string{"probe"}})},
	"internal/agentic.lockedTool": {agenticWrapper(agentic.Spec{Name: "a", Description: "A.", Kind: agentic.KindPlaybook,
		Locks: []agentic.Lock{{Tool: "probe", When: "true"}}})},
	"internal/agentic.boundTool": {agenticWrapper(agentic.Spec{Name: "a", Description: "A.", Kind: agentic.KindStateMachine, Initial: "S",
		States: []agentic.State{{Name: "S", Tools: []agentic.StateTool{{Tool: "probe", TransitionsTo: "S"}}}}})},
	"internal/agentic.globalTool": {agenticWrapper(agentic.Spec{Name: "a", Description: "A.", Kind: agentic.KindStateMachine, Initial: "S",
		Tools: []string{"probe"}, States: []agentic.State{{Name: "S", Tools: []agentic.StateTool{{Tool: "other"}}}}})},
}

// tenantService is a run service whose tenant acme may use the math group: what wraps
// the tools of acme's MCP sessions.
func tenantService() *run.Service {
	cfg := config.Default()
	cfg.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"math"}}}
	model, err := scripted.New(scripted.Script{Name: "s", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		panic(err)
	}
	s, err := run.New(run.Options{Router: router.New(router.Options{}), Providers: map[string]llm.Provider{"scripted": model},
		DefaultProvider: "scripted", Config: cfg})
	if err != nil {
		panic(err)
	}
	return s
}

// localService is a run service that serves t in its in-process group "local".
func localService(t tool.Tool) *run.Service {
	model, err := scripted.New(scripted.Script{Name: "s", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		panic(err)
	}
	s, err := run.New(run.Options{Router: router.New(router.Options{}), Providers: map[string]llm.Provider{"scripted": model},
		DefaultProvider: "scripted", Config: config.Default(), Groups: map[string]run.Group{"local": {Tools: []tool.Tool{t}}}})
	if err != nil {
		panic(err)
	}
	return s
}

// agenticWrapper is the wrapper an agentic tool of spec puts around its sub-tool named
// probe, as its nested loop gets it.
func agenticWrapper(spec agentic.Spec) func(tool.Tool) tool.Tool {
	return func(probe tool.Tool) tool.Tool {
		other := tool.New("other", "other", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text(""), nil })
		ts, err := agentic.Compile([]agentic.Spec{spec}, []string{spec.Name}, agenticCatalog{"probe": probe, "other": other})
		if err != nil {
			panic(err)
		}
		n := &capturingNester{}
		if _, err := ts[0].Call(agentic.WithNester(context.Background(), n), `{}`); err != nil {
			panic(err)
		}
		for _, t := range n.tools {
			if t.Definition().Name == "probe" {
				return t
			}
		}
		panic("no probe among the nested loop's tools")
	}
}

// approveAll calls its tool in a context that approves every call, as a run's approver
// does once a call is approved.
type approveAll struct{ tool.Tool }

func (w approveAll) Delegate() tool.Tool { return w.Tool }
func (w approveAll) Call(ctx context.Context, input string) (tool.Result, error) {
	return w.Tool.Call(run.ApproveAll(ctx), input)
}

// withBindings calls its tool with bindings in the context, as a run's loop does.
type withBindings struct {
	tool.Tool
	b *agentic.Bindings
}

func (w withBindings) Delegate() tool.Tool { return w.Tool }
func (w withBindings) Call(ctx context.Context, input string) (tool.Result, error) {
	return w.Tool.Call(agentic.WithBindings(ctx, w.b), input)
}

// probeFacade is a facade whose calls go to the probe, so that a wrapper of facades can
// be checked like the others.
type probeFacade struct {
	tool.Facade
	probe tool.Tool
}

func (p probeFacade) Definition() tool.Definition { return p.probe.Definition() }
func (p probeFacade) Metadata() tool.Metadata     { return p.probe.Metadata() }
func (p probeFacade) Delegate() tool.Tool         { return p.probe }
func (p probeFacade) Call(ctx context.Context, input string) (tool.Result, error) {
	return p.probe.Call(ctx, input)
}

type agenticCatalog map[string]tool.Tool

func (c agenticCatalog) Tool(name string) (tool.Tool, bool) { t, ok := c[name]; return t, ok }
func (c agenticCatalog) Group(string) ([]tool.Tool, bool)   { return nil, false }
func (c agenticCatalog) Serves(name string) bool            { _, ok := c[name]; return ok }

// capturingNester keeps the tools of the loop it is asked to run, and runs none.
type capturingNester struct{ tools []tool.Tool }

func (n *capturingNester) Decorate(t tool.Tool) tool.Tool { return t }
func (n *capturingNester) RunLoop(_ context.Context, l agentic.Loop) (*loop.Result, error) {
	n.tools = l.Tools
	return &loop.Result{}, nil
}

func TestEveryWrapperIsKnown(t *testing.T) {
	found := findWrappers(t)
	var missing, stale []string
	for _, w := range found {
		if _, ok := wrappers[w]; !ok {
			missing = append(missing, w)
		}
	}
	for w := range wrappers {
		if !contains(found, w) {
			stale = append(stale, w)
		}
	}
	if len(missing) > 0 {
		t.Errorf("tool wrappers without a forwarding check: %v — add them to the table in this file", missing)
	}
	if len(stale) > 0 {
		t.Errorf("table entries that name no wrapper type (renamed or removed?): %v", stale)
	}
	if len(found) < 4 {
		t.Errorf("found only %v: the scan is broken", found)
	}
}

type probeKey struct{}

func TestEveryWrapperForwardsContext(t *testing.T) {
	bag := toolctx.MustOf("tenantId", "acme", "Trace ID", "a\r\nb")
	info := tool.CallInfo{RunID: "run-1", LoopID: "loop-1", CallID: "call-1"}
	schema := schema.Params(schema.String("q", "query"))
	for name, builds := range wrappers {
		for i, build := range builds {
			var got struct {
				bag   toolctx.Context
				info  tool.CallInfo
				probe any
				input string
			}
			probe := tool.New("probe", "probes", schema, func(ctx context.Context, input string) (tool.Result, error) {
				got.bag = toolctx.FromContext(ctx)
				got.info, _ = tool.CallInfoFrom(ctx)
				got.probe = ctx.Value(probeKey{})
				got.input = input
				return tool.Text("ok"), nil
			}, tool.ReturnDirect(), tool.Idempotent(), tool.Timeout(7*time.Second))
			w := build(probe)
			if tool.Unwrap(w) != probe {
				t.Errorf("%s #%d does not expose its delegate", name, i)
			}
			want := probe.Metadata()
			if name == "pkg/toolctx.oneShot" {
				// It marks the delegate's metadata once per loop, for the worker to register.
				want.OncePerLoop, want.OnceAdvice = true, "advice"
			}
			if diff := cmp.Diff(want, w.Metadata()); diff != "" {
				t.Errorf("%s #%d changes metadata (-delegate +wrapper):\n%s", name, i, diff)
			}
			if !w.Definition().InputSchema.Equal(schema) {
				t.Errorf("%s #%d changes the input schema", name, i)
			}
			ctx := toolctx.NewContext(context.Background(), bag)
			ctx = toolcall.WithCallInfo(ctx, info)
			ctx = context.WithValue(ctx, probeKey{}, "here")
			res, err := w.Call(ctx, `{"q":"x"}`)
			if err != nil || res.Content != "ok" {
				t.Errorf("%s #%d: Call = %+v, %v", name, i, res, err)
				continue
			}
			if !got.bag.Equal(bag.With(toolctx.LoopIDKey, info.LoopID)) || got.info != info || got.probe != "here" || got.input != `{"q":"x"}` {
				t.Errorf("%s #%d delivered bag %v, info %+v, value %v, input %q", name, i, got.bag, got.info, got.probe, got.input)
			}
		}
	}
}

// findWrappers parses the module's non-test Go files and returns the types that have a
// Delegate method (directly or through an embedded type of their package) and are tools
// (they have a Call method, or embed a tool).
func findWrappers(t *testing.T) []string {
	t.Helper()
	root := moduleRoot(t)
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" {
			return filepath.SkipDir
		}
		pkgs, err := parseDir(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, files := range pkgs {
			for _, n := range wrappersOf(files) {
				out = append(out, filepath.ToSlash(rel)+"."+n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// parseDir parses the non-test Go files of a directory, by package name.
func parseDir(path string) (map[string][]*ast.File, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(path, "*.go"))
	if err != nil {
		return nil, err
	}
	pkgs := map[string][]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			return nil, err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	return pkgs, nil
}

// typeInfo is what wrappersOf learns of a type: its methods and what it embeds.
type typeInfo struct {
	methods    map[string]bool
	embeds     []string
	embedsTool bool
}

// wrappersOf are the types of a package's files that are tool wrappers: they have a
// Delegate method (directly or through an embedded type of the package) and are tools
// (a Call method, or an embedded tool).
func wrappersOf(files []*ast.File) []string {
	types := map[string]*typeInfo{}
	get := func(n string) *typeInfo {
		if types[n] == nil {
			types[n] = &typeInfo{methods: map[string]bool{}}
		}
		return types[n]
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if id, ok := rt.(*ast.Ident); ok {
					get(id.Name).methods[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							addEmbeds(get(ts.Name.Name), st)
						}
					}
				}
			}
		}
	}
	var has func(n, m string, depth int) bool
	has = func(n, m string, depth int) bool {
		ti := types[n]
		if ti == nil || depth > 5 {
			return false
		}
		if ti.methods[m] {
			return true
		}
		for _, e := range ti.embeds {
			if has(e, m, depth+1) {
				return true
			}
		}
		return false
	}
	var out []string
	for n, ti := range types {
		if has(n, "Delegate", 0) && (has(n, "Call", 0) || ti.embedsTool) {
			out = append(out, n)
		}
	}
	return out
}

// addEmbeds records the types a struct embeds, and whether one is a Tool.
func addEmbeds(ti *typeInfo, st *ast.StructType) {
	for _, field := range st.Fields.List {
		if len(field.Names) > 0 {
			continue
		}
		ft := field.Type
		if s, ok := ft.(*ast.StarExpr); ok {
			ft = s.X
		}
		switch x := ft.(type) {
		case *ast.Ident:
			if x.Name == "Tool" {
				ti.embedsTool = true
			}
			ti.embeds = append(ti.embeds, x.Name)
		case *ast.SelectorExpr:
			if x.Sel.Name == "Tool" {
				ti.embedsTool = true
			}
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// tracing returns a Telemetry with a real SDK tracer, so the traced wrapper starts real
// spans while it forwards the call.
func tracing() *telemetry.Telemetry {
	tel, err := telemetry.FromProviders(sdktrace.NewTracerProvider(), nil, telemetry.Options{})
	if err != nil {
		panic(err)
	}
	return tel
}
