package ctxconv_test

import (
	"fmt"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func Example() {
	run := toolctx.MustOf("tenantId", "acme", "authToken", "xyz", "correlationId", "c-1")
	interaction := toolctx.MustOf("tenantId", "override", "locale", "en")
	c := run.Merge(interaction).With(toolctx.LoopIDKey, "loop-1")
	fmt.Println(c)

	for _, conv := range []ctxconv.Converter{
		ctxconv.PassThrough(),
		ctxconv.None(),
		ctxconv.AllowKeys("tenantId", "locale"),
		ctxconv.DenyKeys("authToken"),
		ctxconv.Secured(ctxconv.PassThrough(), "authToken"),
		ctxconv.Secured(ctxconv.AllowKeys("tenantId", "authToken"), "authToken"),
		ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context {
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
