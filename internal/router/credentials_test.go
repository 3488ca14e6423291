package router

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCredentialsReachTheirGroupOnly: a group's credentials (Options.Credentials) travel
// to its workers only, replacing the client's value of the key, through its converter; a
// call without them, or whose converter drops them, is not sent and says why.
func TestCredentialsReachTheirGroupOnly(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // group → the user_token metadata value it got
	capture := func(group string) func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			mu.Lock()
			seen[group] = strings.Join(md.Get(ctxcodec.MetadataKey("user_token")), ",")
			mu.Unlock()
			return textResponse("ok"), nil
		}
	}
	billing, plain, leaky := startFake(t, capture("billing")), startFake(t, capture("plain")), startFake(t, capture("leaky"))
	r := newRouter(t, Options{
		Converter: func(group string) ctxconv.Converter {
			if group == "billing" {
				return ctxconv.Secured(ctxconv.AllowKeys("user_token"))
			}
			return ctxconv.Secured(ctxconv.PassThrough()) // as the orchestrator builds them: no credential key passes
		},
		Credentials: func(ctx context.Context, group string) (map[string]string, error) {
			if group != "billing" && group != "leaky" {
				return nil, nil
			}
			sub := toolinternal.SubjectFrom(ctx)
			if sub == "" {
				return nil, errors.New("no caller token to exchange")
			}
			return map[string]string{"user_token": "exchanged-for-" + sub}, nil
		},
	})
	mustRegister(t, r, registration("w-billing", billing.addr, "billing", echoTool("bill")))
	mustRegister(t, r, registration("w-plain", plain.addr, "plain", echoTool("note")))
	mustRegister(t, r, registration("w-leaky", leaky.addr, "leaky", echoTool("leak")))

	c := &toolcall.Call{Bag: toolctx.MustOf("user_token", "client-forged")}
	ctx := toolinternal.WithSubject(c.Bind(testContext(t)), "alice")
	for _, name := range []string{"bill", "note"} {
		if res, _ := call(ctx, t, r, name, `{}`); res.IsError() {
			t.Fatalf("%s: %v", name, res)
		}
	}
	if seen["billing"] != "exchanged-for-alice" || seen["plain"] != "" {
		t.Errorf("user_token seen: billing %q, plain %q; want the exchanged token for billing alone", seen["billing"], seen["plain"])
	}

	// The converter of leaky (pass-through) drops a credential key: the call is not sent.
	res, _ := call(ctx, t, r, "leak", `{}`)
	if !res.IsError() || res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, `does not forward its credential "user_token"`) || leaky.calls.Load() != 0 {
		t.Errorf("leak: %v (worker called %d times)", res, leaky.calls.Load())
	}
	// A call without the caller's token (a run taken over) is not sent either.
	res, _ = call(c.Bind(testContext(t)), t, r, "bill", `{}`)
	if !res.IsError() || !strings.Contains(res.Content, "tool 'bill' was not called: no caller token to exchange") || billing.calls.Load() != 1 {
		t.Errorf("bill without a subject: %v (worker called %d times)", res, billing.calls.Load())
	}
}
