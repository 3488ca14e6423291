package decorators

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// ReplanContext is what a replan decider sees of a call that returned.
type ReplanContext struct {
	Tool   tool.Definition
	Input  string
	Result tool.Result
	// Artifact is the result's artifact as one entry, a list artifact included (its type
	// name is the list's, such as "[]Customer"); nil for a text or error result, or a blob.
	Artifact *tool.Entry
}

// ReplanDecision is a decider's request to replan.
type ReplanDecision struct {
	Reason string
	// Add is what to put on the blackboard.
	Add []tool.Binding
}

// Decider decides, after a call returned, whether the run should replan: nil means no.
type Decider func(ctx context.Context, rc ReplanContext) (*ReplanDecision, error)

// ReplanLayer runs the call, then asks decide; a decision becomes the
// tool.ReplanRequested signal, which no layer suppresses. A failing decider makes the
// result an error the model reads. deciders gives a tool's decider; nil for none.
func ReplanLayer(deciders func(t tool.Tool) Decider) toolcall.Layer {
	return toolcall.Layer{Name: LayerReplan, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		decide := deciders(t)
		if decide == nil {
			return nil
		}
		def := t.Definition()
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				res, err := next(ctx, c)
				if err != nil || res.IsError() {
					return res, err
				}
				rc := ReplanContext{Tool: def, Input: c.Input, Result: res}
				if raw := artifactJSON(res.Artifact); len(raw) > 0 {
					rc.Artifact = &tool.Entry{TypeName: res.Artifact.TypeName, JSON: raw}
				}
				d, err := decide(ctx, rc)
				if err != nil {
					return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but deciding whether to replan failed: %v. Its result was: %s", rc.Tool.Name, err, res.Content)), nil
				}
				if d == nil {
					return res, nil
				}
				return tool.Result{}, tool.ReplanRequested{Reason: d.Reason, Add: d.Add}
			}
		}
	}}
}

// ConditionalReplan wraps t so that decide can turn a returned call into a replan
// (ReplanLayer).
func ConditionalReplan(t tool.Tool, decide Decider) tool.Tool {
	return layer(ReplanLayer(func(tool.Tool) Decider { return decide }))(t)
}

// artifactBinding is the artifact to add to the blackboard, if the result has one.
func artifactBinding(rc ReplanContext) []tool.Binding {
	if rc.Artifact == nil {
		return nil
	}
	return []tool.Binding{{Entry: *rc.Artifact}}
}

// ReplanAlways wraps t so that every call that returns asks to replan, with the reason
// "<name> replans", adding the artifact (if any) to the blackboard.
func ReplanAlways(t tool.Tool) tool.Tool {
	name := t.Definition().Name
	return ConditionalReplan(t, func(_ context.Context, rc ReplanContext) (*ReplanDecision, error) {
		return &ReplanDecision{Reason: name + " replans", Add: artifactBinding(rc)}, nil
	})
}

// ReplanWhen wraps t so that a call asks to replan when its artifact satisfies typeName
// (any type when empty) and pred; the reason is "<name> replans based on result" and
// the artifact joins the blackboard. No artifact, or one of another type: no replan.
func ReplanWhen(t tool.Tool, typeName string, pred func(tool.Entry) (bool, error)) tool.Tool {
	name := t.Definition().Name
	return ConditionalReplan(t, func(_ context.Context, rc ReplanContext) (*ReplanDecision, error) {
		if rc.Artifact == nil || (typeName != "" && !tool.SatisfiesType(*rc.Artifact, typeName)) {
			return nil, nil
		}
		if pred != nil {
			ok, err := pred(*rc.Artifact)
			if err != nil || !ok {
				return nil, err
			}
		}
		return &ReplanDecision{Reason: name + " replans based on result", Add: artifactBinding(rc)}, nil
	})
}

// ReplanAndAdd wraps t so that a call whose artifact satisfies typeName asks to replan,
// adding what compute makes of the artifact; compute returning false means no replan.
// The reason is "<name> replans based on result".
func ReplanAndAdd(t tool.Tool, typeName string, compute func(tool.Entry) (tool.Entry, bool, error)) tool.Tool {
	name := t.Definition().Name
	return ConditionalReplan(t, func(_ context.Context, rc ReplanContext) (*ReplanDecision, error) {
		if rc.Artifact == nil || (typeName != "" && !tool.SatisfiesType(*rc.Artifact, typeName)) {
			return nil, nil
		}
		v, ok, err := compute(*rc.Artifact)
		if err != nil || !ok {
			return nil, err
		}
		return &ReplanDecision{Reason: name + " replans based on result", Add: []tool.Binding{{Entry: v}}}, nil
	})
}
