package tool_test

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestTypedToolTrustsValidatedArguments: a typed tool skips its own validation only for
// the exact arguments the context records as validated.
func TestTypedToolTrustsValidatedArguments(t *testing.T) {
	type in struct {
		A int `json:"a"`
	}
	add := tool.MustFunc("inc", "increments", func(_ context.Context, x in) (int, error) { return x.A + 1, nil })
	// Arguments that violate the schema (a is required) but decode fine: only validation
	// refuses them, so the result tells whether it ran.
	const noA = `{}`
	if res, _ := add.Call(context.Background(), noA); !res.IsError() {
		t.Fatalf("unvalidated call = %+v, want the schema error", res)
	}
	ctx := toolinternal.WithValidated(context.Background(), noA)
	if res, _ := add.Call(ctx, noA); res.IsError() || res.Content != "1" {
		t.Errorf("validated call = %+v, want validation skipped", res)
	}
	if res, _ := add.Call(ctx, `{"a":"x"}`); !res.IsError() {
		t.Errorf("other arguments than the validated ones were not validated: %+v", res)
	}
	if !toolinternal.Validated(ctx, noA) || toolinternal.Validated(context.Background(), noA) {
		t.Error("Validated reports wrongly")
	}
}
