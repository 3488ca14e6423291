package toolctx_test

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func Example_converters() {
	run := toolctx.MustOf("tenantId", "acme", "authToken", "xyz", "correlationId", "c-1")
	interaction := toolctx.MustOf("tenantId", "override", "locale", "en")
	c := toolctx.Effective(run, interaction).With(toolctx.LoopIDKey, "loop-1")
	fmt.Println(c)

	for _, conv := range []toolctx.Converter{
		toolctx.PassThrough(),
		toolctx.None(),
		toolctx.AllowKeys("tenantId", "locale"),
		toolctx.DenyKeys("authToken"),
		toolctx.Secured(toolctx.PassThrough(), "authToken"),
		toolctx.Secured(toolctx.AllowKeys("tenantId", "authToken"), "authToken"),
		toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			return toolctx.MustOf("tenant", c.GetOr("tenantId", "unknown"))
		}),
	} {
		fmt.Printf("%v\n\t%v\n", conv, conv.Convert(c))
	}
	// Output:
	// ToolCallContext({authToken=xyz, correlationId=c-1, locale=en, tenantId=override, toolmesh.loop_id=loop-1})
	// pass-through
	// 	ToolCallContext({authToken=xyz, correlationId=c-1, locale=en, tenantId=override})
	// none
	// 	ToolCallContext({})
	// allow-keys(tenantId, locale)
	// 	ToolCallContext({locale=en, tenantId=override})
	// deny-keys(authToken)
	// 	ToolCallContext({correlationId=c-1, locale=en, tenantId=override})
	// secured(pass-through, secrets: authToken)
	// 	ToolCallContext({correlationId=c-1, locale=en, tenantId=override})
	// secured(allow-keys(tenantId, authToken), secrets: authToken)
	// 	ToolCallContext({authToken=xyz, tenantId=override})
	// custom
	// 	ToolCallContext({tenant=override})
}

func ExampleFromContext() {
	// The orchestrator (or the worker SDK) puts the bag into the call's context ...
	ctx := toolctx.NewContext(context.Background(), toolctx.MustOf("tenantId", "acme"))

	// ... and a tool function reads it; the model never sees it.
	tenant := toolctx.FromContext(ctx).GetOr("tenantId", "default")
	fmt.Println(tenant)
	// Output: acme
}
