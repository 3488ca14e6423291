package tool

import (
	"context"
	"maps"
	"time"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// Option configures a tool built by New or Func.
type Option func(*config)

type config struct {
	meta    Metadata
	defMeta map[string]string
}

// ReturnDirect makes the tool's result the final answer of the loop.
func ReturnDirect() Option { return func(c *config) { c.meta.ReturnDirect = true } }

// Idempotent lets the router re-send a call whose outcome is unknown.
func Idempotent() Option { return func(c *config) { c.meta.Idempotent = true } }

// RequiresApproval makes every call of the tool wait for a person's approval before it
// is sent: the run pauses, its client sees an approval request, and a denial reaches the
// model as an error result. For destructive or costly tools.
func RequiresApproval() Option { return func(c *config) { c.meta.RequiresApproval = true } }

// Timeout bounds one call of the tool.
func Timeout(d time.Duration) Option { return func(c *config) { c.meta.Timeout = d } }

// NeedsBlackboard declares blackboard types the tool reads: every call receives the
// newest object of each on its Blackboard.
func NeedsBlackboard(typeNames ...string) Option {
	return func(c *config) { c.meta.Needs = append(c.meta.Needs, typeNames...) }
}

// ReportsProgress declares that the tool reports progress while it runs (see Progress).
func ReportsProgress() Option { return func(c *config) { c.meta.ReportsProgress = true } }

// MethodOf makes the tool a method of the domain type typeName: the orchestrator offers
// it once a tool of the run returned an object of that type as an artifact (the last one
// returned is bound), and every call carries that object as its receiver, on any
// replica (see ReceiverFrom). A method that changes the object returns the new value
// with SetReceiver, and it replaces the binding.
func MethodOf(typeName string) Option { return func(c *config) { c.meta.ReceiverType = typeName } }

// DefinitionMetadata merges application metadata into the tool's definition; later
// entries overwrite earlier ones. The model never sees it.
func DefinitionMetadata(m map[string]string) Option {
	return func(c *config) {
		if len(m) == 0 {
			return
		}
		if c.defMeta == nil {
			c.defMeta = map[string]string{}
		}
		maps.Copy(c.defMeta, m)
	}
}

// funcTool is a tool made from a function.
type funcTool struct {
	def  Definition
	meta Metadata
	fn   func(ctx context.Context, input string) (Result, error)
}

// New returns a tool that calls fn with the raw JSON arguments.
//
// fn reports ordinary failures either as an error Result or as a returned error; a
// returned error becomes ErrorFrom(err) so that the model can react to it, unless it is
// a Signal, which is returned as the error for the loop to act on. A panic in fn is
// not recovered here: the worker SDK and the orchestrator, which run every call, turn
// it into an error Result with Code CodePanic and log it with its stack.
func New(name, description string, input schema.Schema, fn func(ctx context.Context, input string) (Result, error), opts ...Option) Tool {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return &funcTool{
		def:  Definition{Name: name, Description: description, InputSchema: input, Metadata: c.defMeta},
		meta: c.meta,
		fn:   fn,
	}
}

func (t *funcTool) Definition() Definition {
	d := t.def
	d.Metadata = maps.Clone(d.Metadata) // callers may change their copy
	return d
}

func (t *funcTool) Metadata() Metadata { return t.meta }

func (t *funcTool) Call(ctx context.Context, input string) (Result, error) {
	res, err := t.fn(ctx, input)
	if err != nil {
		if _, ok := AsSignal(err); ok {
			return Result{}, err
		}
		return ErrorFrom(err), nil
	}
	return res, nil
}
