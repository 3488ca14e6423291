package toolctx_test

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func ExampleFromContext() {
	// The orchestrator (or the worker SDK) puts the bag into the call's context ...
	ctx := toolctx.NewContext(context.Background(), toolctx.MustOf("tenantId", "acme"))

	// ... and a tool function reads it; the model never sees it.
	tenant := toolctx.FromContext(ctx).GetOr("tenantId", "default")
	fmt.Println(tenant)
	// Output: acme
}
