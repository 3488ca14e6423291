package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// TestTenantInMeta: a call of a run with a verified tenant sends it to the MCP server as
// _meta "io.toolmesh/tenant", whatever the converter keeps; a context entry of that name
// (a client's) never travels, whether or not the run has a tenant.
func TestTenantInMeta(t *testing.T) {
	url, st := httpServer(t)
	forged := toolctx.MustOf("io.toolmesh/tenant", "globex", "io.toolmesh/other", "x", "tenantId", "globex")
	for _, tc := range []struct {
		name   string
		conv   ctxconv.Converter
		tenant string
		want   map[string]any // without progressToken
	}{
		{"pass-through", ctxconv.PassThrough(), "acme", map[string]any{"io.toolmesh/tenant": "acme", "tenantId": "globex"}},
		{"allow-keys naming the key", ctxconv.AllowKeys("io.toolmesh/tenant"), "acme", map[string]any{"io.toolmesh/tenant": "acme"}},
		{"none", ctxconv.None(), "acme", map[string]any{"io.toolmesh/tenant": "acme"}},
		{"no tenant", ctxconv.PassThrough(), "", map[string]any{"tenantId": "globex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}, Converter: tc.conv})
			ctx := toolcall.WithCallInfo(testCtx(t), tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c"})
			if tc.tenant != "" {
				ctx = toolinternal.WithTenant(ctx, tc.tenant)
			}
			call(t, toolctx.NewContext(ctx, forged), byName(t, g, "echo"), `{"text":"x"}`)
			got := st.lastMeta()
			delete(got, "progressToken")
			if len(got) != len(tc.want) {
				t.Fatalf("_meta %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("_meta[%s] = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestServeTenant: a call through toolmesh's MCP endpoint carries the tenant the session
// was verified as, shown under toolctx.TenantKey; what the caller's _meta says under that
// key or under toolmesh's own _meta keys is dropped.
func TestServeTenant(t *testing.T) {
	show := tool.New("show", "Shows its context.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		b, err := json.Marshal(map[string]any{"bag": toolctx.FromContext(ctx).Map(), "tenant": toolinternal.TenantFrom(ctx)})
		return tool.Text(string(b)), err
	})
	for _, tc := range []struct {
		name   string
		tenant string
		want   string
	}{
		{"a verified tenant", "acme", `{"bag":{"tenantId":"globex","toolmesh.tenant":"acme"},"tenant":"acme"}`},
		{"no tenant", "", `{"bag":{"tenantId":"globex"},"tenant":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(mcp.NewHandler(mcp.ServeOptions{
				Catalog: func(context.Context) []tool.Tool { return []tool.Tool{show} },
				Tenant:  func(context.Context) string { return tc.tenant },
			}))
			t.Cleanup(srv.Close)
			ctx := testCtx(t)
			session, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = session.Close() })
			res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "show", Arguments: map[string]any{},
				Meta: sdk.Meta{"io.toolmesh/tenant": "globex", toolctx.TenantKey: "globex", "tenantId": "globex"}})
			if err != nil || res.IsError || len(res.Content) != 1 {
				t.Fatalf("call: %v %v", res, err)
			}
			var got, want any
			if err := json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(tc.want), &want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the tool saw (-want +got):\n%s", diff)
			}
		})
	}
}

// headerRT sets headers on every request.
type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestServeHeaderWinsOverMeta: a context entry taken from a configured header (a gateway
// in front sets it) is never the client's _meta: with the header, the header's value
// reaches the tool whatever _meta says; without it, a _meta entry of that name is dropped.
func TestServeHeaderWinsOverMeta(t *testing.T) {
	show := tool.New("show", "Shows its context.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		b, err := json.Marshal(toolctx.FromContext(ctx).Map())
		return tool.Text(string(b)), err
	})
	srv := httptest.NewServer(mcp.NewHandler(mcp.ServeOptions{
		Catalog:        func(context.Context) []tool.Tool { return []tool.Tool{show} },
		ContextHeaders: []string{"X-Tenant-Id"},
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name    string
		headers headerRT
		want    string
	}{
		{"the gateway's header", headerRT{"X-Tenant-Id": "acme"}, `{"other":"kept","x-tenant-id":"acme"}`},
		{"no header", headerRT{}, `{"other":"kept"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			transport := &sdk.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1, HTTPClient: &http.Client{Transport: tc.headers}}
			session, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx, transport, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = session.Close() })
			res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "show", Arguments: map[string]any{},
				Meta: sdk.Meta{"x-tenant-id": "globex", "other": "kept"}})
			if err != nil || res.IsError || len(res.Content) != 1 {
				t.Fatalf("call: %v %v", res, err)
			}
			if got := res.Content[0].(*sdk.TextContent).Text; got != tc.want {
				t.Errorf("the tool saw %s, want %s", got, tc.want)
			}
		})
	}
}
