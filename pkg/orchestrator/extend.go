package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/anthropic"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Converter decides what of a call's ToolCallContext a tool group receives (as gRPC
// metadata for its workers, as _meta for an MCP server). It sees the whole context but
// the engine's reserved keys (the loop id and the tenant travel in fields of their own),
// and what it returns under them is dropped; the config's context.secrets and the
// well-known credential keys are always removed from what it returns.
type Converter interface {
	Convert(toolctx.Context) toolctx.Context
}

// ConverterFunc is a Converter written as a function: it may drop, rename or compute
// entries (the time of the request, a header derived from the caller's tenant).
type ConverterFunc func(toolctx.Context) toolctx.Context

// Convert calls f on c without its reserved keys, and drops reserved keys from the
// result.
func (f ConverterFunc) Convert(c toolctx.Context) toolctx.Context {
	return f(c.WithoutReserved()).WithoutReserved()
}

// Layer is a step of the program's own in the pipeline every tool call of a run goes
// through (docs/process.md lists the built-in layers, in order). For is asked once for
// each tool a run offers; it returns what the layer does around that tool's calls, or nil
// where the layer has nothing to do for it.
type Layer struct {
	// Name names the layer in errors and in the pipeline's listing; it must differ from
	// every other layer's.
	Name string
	// After is the built-in layer this one follows (BuiltinLayers); empty is
	// DefaultPlace. Layers placed after the same built-in layer keep their order.
	After string
	For   func(t tool.Tool) Interceptor
}

// DefaultPlace is where a layer goes when it names none: after "events", so that its
// calls and refusals are traced and counted in the run's history, and before "one-shot",
// the artifact rules, replanning and the output bound, so that it sees a result as the
// tool returned it.
const DefaultPlace = run.DefaultPlace

// BuiltinLayers are the names of the built-in layers of the call pipeline, outermost
// first: the places a Layer may name.
func BuiltinLayers() []string { return run.BuiltinLayers() }

// Interceptor runs around a call: it may look at the call, refuse it (return a result
// without calling next: tool.Error("…") is what the model reads), change the result next
// returns, or pass it through. It calls next at most once: a second call does not run
// the tool again but answers with an error result. An error it returns is a control
// signal (tool.Signal) only; any other error, and a panic, become an error result the
// model reads.
type Interceptor func(ctx context.Context, c Call, next func(context.Context) (tool.Result, error)) (tool.Result, error)

// Call is what an interceptor sees of a tool call.
type Call struct {
	// Tool is the tool called (its definition and metadata).
	Tool tool.Tool
	// Name is the name the model called; Input its validated arguments (JSON).
	Name, Input string
	// Info is the call's identity: run, loop, call id and iteration.
	Info tool.CallInfo
	// Context is the call's ToolCallContext, before any group's converter.
	Context toolctx.Context
	// Tenant is the run's verified tenant; empty without tenants.
	Tenant string
}

// GroupOf is the tool group of a tool served by workers, an MCP server or an in-process
// group; false for the orchestrator's own tools (a facade's guide, agentic tools).
func GroupOf(t tool.Tool) (string, bool) {
	g, ok := tool.As[decorators.Grouped](t)
	if !ok {
		return "", false
	}
	return g.Group(), true
}

func (l Layer) placed() run.Placed {
	return run.Placed{After: l.After, Layer: toolcall.Layer{Name: l.Name, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		ic := l.For(t)
		if ic == nil {
			return nil
		}
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				return l.intercept(ctx, ic, c, next)
			}
		}
	}}}
}

// intercept runs one call through an interceptor: the rest of the pipeline runs at most
// once (a second call answers with an error result and does not run the tool again), a
// panic of the interceptor becomes an error result with code PANIC, and an error that
// is not a control signal becomes an error result.
func (l Layer) intercept(ctx context.Context, ic Interceptor, c *toolcall.Call, next toolcall.Handler) (res tool.Result, err error) {
	view := Call{Tool: c.Tool, Name: c.Name, Input: c.Input, Info: c.Info, Context: c.Bag, Tenant: c.Tenant}
	ran := false
	defer func() {
		if p := recover(); p != nil {
			if c.Log != nil {
				c.Log.ErrorContext(ctx, "a layer panicked", "layer", l.Name, "tool", c.Name, "panic", fmt.Sprint(p))
			}
			res, err = tool.ErrorWithCode(tool.CodePanic, fmt.Sprintf("tool '%s' failed in the orchestrator's layer '%s'", c.Name, l.Name)), nil
		}
	}()
	res, err = ic(ctx, view, func(ctx context.Context) (tool.Result, error) {
		if ran {
			return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("the orchestrator's layer '%s' called tool '%s' twice; it ran once", l.Name, c.Name)), nil
		}
		ran = true
		return next(ctx, c)
	})
	if _, signal := tool.AsSignal(err); err != nil && !signal {
		return tool.ErrorFrom(err), nil
	}
	return res, err
}

// DefaultFormatter is how the blackboard group's tools show an entry when Options has no
// Formatter: its "content" or "infoString" field when it is an object with one, else its
// JSON.
func DefaultFormatter(e tool.Entry) string { return process.DefaultFormatter(e) }

// Sink receives the artifacts an artifact rule of the config or of a request sends to
// it by its name (groups.<role>.artifacts, tools.<name>.artifacts,
// RunRequest.artifact_sinks). An error fails the call, and the model reads it.
type Sink func(ctx context.Context, a Artifact) error

// Artifact is what a tool returned that a rule sends to a sink: its type name and its
// JSON (after the rule's transform) or, for a blob, its data and media type
// (Entry.IsBlob), and the call it came from.
type Artifact struct {
	Entry tool.Entry
	// Tool is the tool's name; CallID and LoopID name the call.
	Tool, CallID, LoopID string
}

func (s Sink) sink() decorators.Sink {
	return decorators.SinkFunc(func(ctx context.Context, c decorators.Capture) error {
		return s(ctx, Artifact{Entry: c.Entry, Tool: c.Tool, CallID: c.CallID, LoopID: c.LoopID})
	})
}

// Strategy changes the tools a loop offers after a call, beside unfolding: the tools of
// Add join (run through the call pipeline, named once), those named in Remove leave. It
// runs after every call of every loop, nested loops included, after the facades have
// unfolded. A resumed run replays its loops, so a strategy must decide from what it is
// shown, not from the time or a counter of its own. A strategy that fails changes
// nothing; the run goes on.
type Strategy func(ctx context.Context, after AfterCall) (add, remove []tool.Tool, err error)

// AfterCall is the call a Strategy decides after.
type AfterCall struct {
	// Tool is the tool called; Input its arguments; Result what it returned and Content
	// the text the model reads of it.
	Tool    tool.Tool
	Input   string
	Result  tool.Result
	Content string
	// Iteration is the model call whose tool calls are being run, from 1.
	Iteration int
	// Current is the loop's tools before this change, in the order the model sees them.
	Current []tool.Tool
}

func (s Strategy) strategy() loop.Strategy {
	return loop.StrategyFunc(func(ctx context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		add, remove, err := s(ctx, AfterCall{Tool: ic.Tool, Input: ic.Input, Result: ic.Result, Content: ic.Content, Iteration: ic.Iteration, Current: ic.Current})
		return loop.Injection{Add: add, Remove: remove}, err
	})
}

// Group is a tool group served in the orchestrator's own process: runs ask for it by its
// role, as for a worker's group, and tenant grants, artifact rules and the config's
// groups.<role> settings (a facade, usage notes) apply to it. Its calls are journaled as
// a worker's are: after a crash, a call in flight runs again only when its tool is
// idempotent (tool.Metadata.Idempotent); otherwise the model reads that its outcome is
// unknown.
type Group struct {
	Description, UsageNotes string
	Tools                   []tool.Tool
}

// MCPTool is what a filter of an MCP group's tools sees of one.
type MCPTool struct {
	Name, Description string
	// Annotations are the server's hints: title, read_only, destructive, idempotent,
	// open_world; a hint the server does not give is absent.
	Annotations map[string]any
}

func mcpFilter(f func(MCPTool) bool) func(mcp.ToolInfo) bool {
	return func(t mcp.ToolInfo) bool {
		return f(MCPTool{Name: t.Name, Description: t.Description, Annotations: t.Annotations})
	}
}

// Provider is a model provider a program adds under a name of its own (Options.Providers):
// runs choose it with "<name>/<model>".
type Provider struct{ p llm.Provider }

// ProviderOptions configure a provider of a model API: its key, its base URL (empty: the
// API's own; for OpenAI any compatible server, such as vLLM, Ollama or LiteLLM), the
// model of runs that name none, and MaxRetries, MaxTokens and Timeout as provider.openai
// and provider.anthropic have them (zero: their defaults).
type ProviderOptions struct {
	APIKey, BaseURL, DefaultModel string
	MaxRetries, MaxTokens         int
	Timeout                       time.Duration
}

// OpenAI returns a provider of the OpenAI chat completions API.
func OpenAI(o ProviderOptions) (Provider, error) {
	return provider(openai.New(openai.Options{APIKey: o.APIKey, BaseURL: o.BaseURL, DefaultModel: o.DefaultModel,
		MaxRetries: o.MaxRetries, Timeout: o.Timeout, MaxTokens: o.MaxTokens}))
}

// Anthropic returns a provider of Anthropic's messages API.
func Anthropic(o ProviderOptions) (Provider, error) {
	return provider(anthropic.New(anthropic.Options{APIKey: o.APIKey, BaseURL: o.BaseURL, DefaultModel: o.DefaultModel,
		MaxRetries: o.MaxRetries, Timeout: o.Timeout, MaxTokens: o.MaxTokens}))
}

func provider[P llm.Provider](p P, err error) (Provider, error) {
	if err != nil {
		return Provider{}, fmt.Errorf("orchestrator: %w", err)
	}
	return Provider{p}, nil
}

// Scripted returns the scripted provider of a script file: a deterministic model for
// tests and demonstrations (docs/configuration.md describes the file).
func Scripted(path string) (Provider, error) {
	p, err := scripted.Load(path)
	if err != nil {
		return Provider{}, fmt.Errorf("orchestrator: %w", err)
	}
	p.Keep(0)
	return Provider{p}, nil
}
