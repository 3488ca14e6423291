package mcp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// TestGroupCredentials: a group's own credentials (Options.Credentials) travel in _meta
// under their key, replacing the client's value, and in the session's headers, one
// session per caller; a call without them, or whose converter drops them, is not sent;
// the tools are listed for a caller without them (a run taken over).
func TestGroupCredentials(t *testing.T) {
	url, st := httpServer(t)
	creds := func(ctx context.Context) (map[string]string, map[string]string, error) {
		sub := toolinternal.SubjectFrom(ctx)
		if sub == "" {
			return nil, nil, errors.New("no caller token to exchange")
		}
		return map[string]string{"user_token": "for-" + sub}, map[string]string{"Authorization": "Bearer for-" + sub}, nil
	}
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}, Credentials: creds,
		Converter: ctxconv.Secured(ctxconv.AllowKeys("user_token", "tenantId"))})
	if _, err := g.Tools(testCtx(t)); err != nil {
		t.Fatalf("listing without the caller's token: %v", err)
	}
	bag := toolctx.MustOf("user_token", "client-forged", "tenantId", "acme")
	for _, sub := range []string{"alice", "bob", "alice"} {
		ctx := toolctx.NewContext(toolinternal.WithSubject(testCtx(t), sub), bag)
		if res := call(t, ctx, byName(t, g, "echo"), `{"text":"x"}`); res.IsError() {
			t.Fatalf("%s: %v", sub, res)
		}
		if got := st.lastMeta(); got["user_token"] != "for-"+sub || got["tenantId"] != "acme" {
			t.Errorf("%s: _meta %v, want user_token for-%s", sub, got, sub)
		}
	}
	st.mu.Lock()
	auths := append([]string(nil), st.auths...)
	st.mu.Unlock()
	if len(auths) != 3 || !strings.HasSuffix(auths[0], " Bearer for-alice") || !strings.HasSuffix(auths[1], " Bearer for-bob") ||
		auths[2] != auths[0] || strings.Fields(auths[0])[0] == strings.Fields(auths[1])[0] {
		t.Errorf("sessions and Authorization of the calls: %q; want alice's session again for her second call, bob's own", auths)
	}

	res := call(t, toolctx.NewContext(testCtx(t), bag), byName(t, g, "echo"), `{"text":"x"}`)
	if !res.IsError() || !strings.Contains(res.Content, "no caller token to exchange") {
		t.Errorf("a call without the caller's token: %v", res)
	}
	dropping := newGroup(t, mcp.Options{Server: mcp.Server{Name: "test", URL: url}, Credentials: creds, Converter: ctxconv.Secured(ctxconv.PassThrough())})
	ctx := toolctx.NewContext(toolinternal.WithSubject(testCtx(t), "alice"), bag)
	if res := call(t, ctx, byName(t, dropping, "echo"), `{"text":"x"}`); !res.IsError() || !strings.Contains(res.Content, `does not forward its credential "user_token"`) {
		t.Errorf("a converter that drops the credential: %v", res)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.auths) != 3 {
		t.Errorf("the server saw %d calls, want the 3 that had credentials", len(st.auths))
	}
}
