package tool

import "context"

type validatedKey struct{}

// WithValidated records in ctx that input is canonical arguments already validated
// against the called tool's own input schema, so the tool need not validate them again.
// The worker SDK and the orchestrator's loop validate every call before they dispatch it;
// validating twice was a sizeable part of a call's cost.
func WithValidated(ctx context.Context, input string) context.Context {
	return context.WithValue(ctx, validatedKey{}, input)
}

// Validated reports whether ctx records input as validated (see WithValidated).
func Validated(ctx context.Context, input string) bool {
	v, ok := ctx.Value(validatedKey{}).(string)
	return ok && v == input
}
