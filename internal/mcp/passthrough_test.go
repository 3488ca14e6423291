package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// twoGroups are groups alpha and beta over two servers with the same prompt, the same
// resource and the same template.
func twoGroups(t *testing.T) []*mcp.Group {
	t.Helper()
	return []*mcp.Group{
		newGroup(t, mcp.Options{Server: mcp.Server{Name: "alpha", URL: gatewayServer(t, "alpha")}}),
		newGroup(t, mcp.Options{Server: mcp.Server{Name: "beta", URL: gatewayServer(t, "beta")}}),
	}
}

// TestEndpointResourcesAndPrompts: the endpoint lists the prompts, resources and
// templates of its groups under each group's role, so two groups never collide; a name
// one group serves may be used bare, one both serve must be qualified, and the error
// says how.
func TestEndpointResourcesAndPrompts(t *testing.T) {
	cs := endpoint(t, twoGroups(t), nil, nil)
	ctx := testCtx(t)
	if diff := cmp.Diff([]string{"alpha/greet", "beta/greet"}, promptNames(t, cs)); diff != "" {
		t.Errorf("prompts (-want +got):\n%s", diff)
	}
	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	wantURIs := []string{"toolmesh://alpha/mem://alpha-only", "toolmesh://alpha/mem://doc", "toolmesh://beta/mem://beta-only", "toolmesh://beta/mem://doc"}
	if diff := cmp.Diff(wantURIs, uris); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	tpls, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(tpls.ResourceTemplates) != 2 || tpls.ResourceTemplates[1].URITemplate != "toolmesh://beta/mem://items/{id}" {
		t.Errorf("templates %v %v", tpls, err)
	}

	p, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "beta/greet"})
	if err != nil || p.Messages[0].Content.(*sdk.TextContent).Text != "hello from beta" {
		t.Errorf("beta/greet: %v %v", p, err)
	}
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "greet"}); err == nil || !strings.Contains(err.Error(), `prompt "greet" is served by 2 MCP groups; name one: "alpha/greet", "beta/greet"`) {
		t.Errorf("an ambiguous prompt: %v", err)
	}
	for uri, want := range map[string][2]string{
		"mem://beta-only":                 {"mem://beta-only", "beta mem://beta-only"},
		"toolmesh://alpha/mem://doc":      {"toolmesh://alpha/mem://doc", "alpha mem://doc"},
		"toolmesh://beta/mem://items/7":   {"toolmesh://beta/mem://items/7", "beta mem://items/7"},
		"toolmesh://alpha/mem://items/x9": {"toolmesh://alpha/mem://items/x9", "alpha mem://items/x9"},
	} {
		res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].URI != want[0] || res.Contents[0].Text != want[1] {
			t.Errorf("read %s: %+v %v, want %v", uri, res, err, want)
		}
	}
	for uri, msg := range map[string]string{
		"mem://doc":      `resource "mem://doc" is served by 2 MCP groups; name one: "toolmesh://alpha/mem://doc", "toolmesh://beta/mem://doc"`,
		"mem://items/3":  `resource "mem://items/3" is served by 2 MCP groups`,
		"mem://nowhere":  "not found",
		"toolmesh://x/y": "not found",
	} {
		if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("read %s: %v, want %q", uri, err, msg)
		}
	}
	c, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "alpha/greet"}, Argument: sdk.CompleteParamsArgument{Name: "a", Value: "x"}})
	if err != nil || len(c.Completion.Values) != 1 || c.Completion.Values[0] != "alpha:greet" {
		t.Errorf("completion: %v %v", c, err)
	}
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "toolmesh://alpha/mem://doc"}); err != nil {
		t.Errorf("subscribe: %v", err)
	}
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "toolmesh://alpha/mem://doc"}); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}

// TestEndpointReachesOnlyGrantedGroups: a session offered none of beta's tools (its
// tenant's grants or its token's scopes leave them out) neither lists nor reads beta's
// prompts and resources, qualified or bare.
func TestEndpointReachesOnlyGrantedGroups(t *testing.T) {
	groups := twoGroups(t)
	beta := groups[1]
	cs := endpoint(t, groups, func(tl tool.Tool) bool {
		g, ok := tool.As[interface{ Group() string }](tl)
		return !ok || g.Group() != beta.Role()
	}, nil)
	ctx := testCtx(t)
	if diff := cmp.Diff([]string{"alpha/greet"}, promptNames(t, cs)); diff != "" {
		t.Errorf("prompts (-want +got):\n%s", diff)
	}
	res, err := cs.ListResources(ctx, nil)
	if err != nil || len(res.Resources) != 2 {
		t.Errorf("resources %v %v, want alpha's two", res, err)
	}
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "beta/greet"}); err == nil || !strings.Contains(err.Error(), `unknown prompt "beta/greet"`) {
		t.Errorf("beta's prompt: %v", err)
	}
	for _, uri := range []string{"toolmesh://beta/mem://doc", "mem://beta-only"} {
		if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s: %v, want not found", uri, err)
		}
	}
	if r, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "mem://doc"}); err != nil || r.Contents[0].Text != "alpha mem://doc" {
		t.Errorf("read mem://doc, alpha's alone here: %v %v", r, err)
	}
}

// TestEndpointSubscriptions: a subscription through the endpoint reaches the server once
// however many sessions hold it; the server's notifications/resources/updated reaches
// each subscribed session under the URI it subscribed with; a session's end drops its
// subscriptions, and the server is unsubscribed when none holds the resource.
func TestEndpointSubscriptions(t *testing.T) {
	events := make(chan string, 16)
	s := sdk.NewServer(&sdk.Implementation{Name: "watch", Version: "v1"}, &sdk.ServerOptions{
		SubscribeHandler: func(_ context.Context, r *sdk.SubscribeRequest) error {
			events <- "subscribe " + r.Params.URI
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, r *sdk.UnsubscribeRequest) error {
			events <- "unsubscribe " + r.Params.URI
			return nil
		},
	})
	sdk.AddTool(s, &sdk.Tool{Name: "watch_ping", Description: "Pong."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil, nil
	})
	s.AddResource(&sdk.Resource{Name: "w", URI: "mem://w"}, func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: r.Params.URI, Text: "w"}}}, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "watch", URL: srv.URL}})
	updated := make(chan string, 4)
	opts := &sdk.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI }}
	ctx := testCtx(t)
	next := func(ch chan string) string {
		t.Helper()
		select {
		case e := <-ch:
			return e
		case <-ctx.Done():
			t.Fatal("nothing came")
			return ""
		}
	}
	a, b := endpoint(t, []*mcp.Group{g}, nil, opts), endpoint(t, []*mcp.Group{g}, nil, opts)
	if err := a.Subscribe(ctx, &sdk.SubscribeParams{URI: "mem://w"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(ctx, &sdk.SubscribeParams{URI: "toolmesh://watch/mem://w"}); err != nil {
		t.Fatal(err)
	}
	if e := next(events); e != "subscribe mem://w" {
		t.Errorf("the server saw %q", e)
	}
	if err := s.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: "mem://w"}); err != nil {
		t.Fatal(err)
	}
	got := []string{next(updated), next(updated)}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"mem://w", "toolmesh://watch/mem://w"}, got); diff != "" {
		t.Errorf("updates heard (-want +got):\n%s", diff)
	}
	_ = a.Close()
	_ = b.Close()
	if e := next(events); e != "unsubscribe mem://w" {
		t.Errorf("after the sessions ended the server saw %q", e)
	}
	select {
	case e := <-events:
		t.Errorf("the server saw %q too", e)
	default:
	}
}

// TestPassthroughMetaKeepsProtocolKeys: a request the endpoint passes to a group (a
// prompt, a resource) carries the context the group's converter lets through and the
// tenant in _meta, as a tool call does, but never a context entry under the protocol's
// own prefix or toolmesh's: those keys are not the caller's to set.
func TestPassthroughMetaKeepsProtocolKeys(t *testing.T) {
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "alpha", URL: "http://127.0.0.1:1/"}})
	bag := toolctx.MustOf("user", "ada", "io.modelcontextprotocol/related-task", "forged", "io.toolmesh/tenant", "forged")
	ctx := toolinternal.WithTenant(context.WithValue(testCtx(t), toolinternal.BagKey{}, bag), "acme")
	got := g.Meta(ctx)
	want := map[string]any{"user": "ada", mcp.TenantMetaKey: "acme"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("_meta (-want +got):\n%s", diff)
	}
}
