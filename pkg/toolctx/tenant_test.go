package toolctx_test

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// TestTenantKey: FromContext shows the run's verified tenant under TenantKey beside the
// loop id; a bag entry under TenantKey is never what it shows, Carried (what crosses to a
// worker) holds neither, and converters never forward the key.
func TestTenantKey(t *testing.T) {
	if toolctx.TenantKey != "toolmesh.tenant" || !toolctx.IsReserved(toolctx.TenantKey) {
		t.Fatalf("TenantKey = %q; want the reserved toolmesh.tenant", toolctx.TenantKey)
	}
	c := toolctx.MustOf("tenant_id", "globex", toolctx.TenantKey, "globex")
	base := toolcall.WithCallInfo(context.Background(), tool.CallInfo{LoopID: "loop-1"})
	for _, tc := range []struct {
		name, tenant string
		want         toolctx.Context
	}{
		{"a verified tenant", "acme", toolctx.MustOf("tenant_id", "globex", toolctx.LoopIDKey, "loop-1", toolctx.TenantKey, "acme")},
		{"no tenant", "", toolctx.MustOf("tenant_id", "globex", toolctx.LoopIDKey, "loop-1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := base
			if tc.tenant != "" {
				ctx = toolinternal.WithTenant(ctx, tc.tenant)
			}
			ctx = toolctx.NewContext(ctx, c)
			if got := toolctx.FromContext(ctx); !got.Equal(tc.want) {
				t.Errorf("FromContext = %v, want %v", got, tc.want)
			}
			if got := toolcall.Carried(ctx); !got.Equal(toolctx.MustOf("tenant_id", "globex")) {
				t.Errorf("Carried = %v, want the client's entries alone", got)
			}
			for _, conv := range []ctxconv.Converter{ctxconv.PassThrough(), ctxconv.AllowKeys(toolctx.TenantKey, "tenant_id")} {
				if got := conv.Convert(toolctx.FromContext(ctx)); got.Contains(toolctx.TenantKey) {
					t.Errorf("%v forwarded %s: %v", conv, toolctx.TenantKey, got)
				}
			}
		})
	}
	// Without a bag, the tenant still shows.
	if got := toolctx.FromContext(toolinternal.WithTenant(context.Background(), "acme")); !got.Equal(toolctx.MustOf(toolctx.TenantKey, "acme")) {
		t.Errorf("FromContext without a bag = %v", got)
	}
}
