package credentials_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolmesh/toolmesh/internal/credentials"
	"github.com/toolmesh/toolmesh/internal/credentials/credentialstest"
)

// subjectToken is an unsigned-looking JWT whose sub is sub and which expires at exp:
// the exchanger reads its exp, the test server its sub.
func subjectToken(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString([]byte("test-key-not-a-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clock is a settable clock.
type clock struct{ now atomic.Int64 }

func newClock() *clock                   { c := &clock{}; c.now.Store(time.Now().UnixNano()); return c }
func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }
func secretFileOf(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(p, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newExchanger is an exchanger of group billing against srv, logging into log.
func newExchanger(t *testing.T, srv *credentialstest.Server, secret string, log *bytes.Buffer, mod func(*credentials.ExchangeOptions)) *credentials.Exchanger {
	t.Helper()
	o := credentials.ExchangeOptions{Group: "billing", TokenEndpoint: srv.URL, ClientID: srv.ClientID, ClientSecretFile: secretFileOf(t, secret),
		Audience: "billing-api", Scope: "billing.read"}
	if log != nil {
		o.Logger = slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if mod != nil {
		mod(&o)
	}
	e, err := credentials.NewExchanger(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExchangeOncePerCaller(t *testing.T) {
	for _, post := range []bool{false, true} {
		srv := credentialstest.Start("toolmesh", "client-s3cret-value", "billing-api")
		srv.Post = post
		t.Cleanup(srv.Close)
		e := newExchanger(t, srv, "client-s3cret-value", nil, func(o *credentials.ExchangeOptions) {
			if post {
				o.ClientAuth = "client_secret_post"
			}
		})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		alice := subjectToken(t, "alice", time.Now().Add(time.Hour))
		var wg sync.WaitGroup
		toks := make([]string, 50)
		errs := make([]error, 50)
		for i := range toks {
			wg.Go(func() { toks[i], errs[i] = e.Token(ctx, alice) })
		}
		wg.Wait()
		for i := range toks {
			if errs[i] != nil || toks[i] != toks[0] {
				t.Fatalf("post=%v: call %d: %q, %v; want the first call's token", post, i, toks[i], errs[i])
			}
		}
		if n := srv.Calls.Load(); n != 1 {
			t.Errorf("post=%v: 50 calls for one caller reached the token endpoint %d times, want 1", post, n)
		}
		bob, err := e.Token(ctx, subjectToken(t, "bob", time.Now().Add(time.Hour)))
		if err != nil || bob == toks[0] {
			t.Fatalf("post=%v: bob's token %q, %v: want one of his own", post, bob, err)
		}
		g := srv.Granted()
		if len(g) != 2 || g[0].Subject != "alice" || g[1].Subject != "bob" || g[0].Audience != "billing-api" || g[0].Scope != "billing.read" {
			t.Errorf("post=%v: granted %+v", post, g)
		}
		claims := jwt.MapClaims{}
		if _, err := jwt.ParseWithClaims(toks[0], claims, func(*jwt.Token) (any, error) { return &srv.Key.PublicKey, nil }, jwt.WithAudience("billing-api")); err != nil || claims["sub"] != "alice" {
			t.Errorf("post=%v: the token issued for alice: %v %v", post, claims, err)
		}
	}
}

func TestExchangeAgainBeforeExpiry(t *testing.T) {
	srv := credentialstest.Start("toolmesh", "sec-ret-1", "billing-api")
	t.Cleanup(srv.Close)
	srv.SetExpiresIn(2 * time.Minute)
	clk := newClock()
	e := newExchanger(t, srv, "sec-ret-1", nil, func(o *credentials.ExchangeOptions) { o.Now, o.RefreshBefore = clk.Now, 30*time.Second })
	ctx := t.Context()
	sub := subjectToken(t, "alice", time.Now().Add(time.Hour))
	first, err := e.Token(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(89 * time.Second)
	if tok, _ := e.Token(ctx, sub); tok != first || srv.Calls.Load() != 1 {
		t.Fatalf("31s before expiry: %d exchanges, same token %v; want the kept token", srv.Calls.Load(), tok == first)
	}
	clk.Advance(2 * time.Second)
	if tok, _ := e.Token(ctx, sub); tok == first || srv.Calls.Load() != 2 {
		t.Fatalf("29s before expiry: %d exchanges, same token %v; want a new exchange", srv.Calls.Load(), tok == first)
	}
	// A caller's token that expires first bounds how long the exchanged one is kept.
	short := subjectToken(t, "carol", clk.Now().Add(10*time.Second))
	if _, err := e.Token(ctx, short); err != nil {
		t.Fatal(err)
	}
	clk.Advance(11 * time.Second)
	if _, err := e.Token(ctx, short); err != nil || srv.Calls.Load() != 4 {
		t.Errorf("after the caller's token expired: %d exchanges (%v), want 4", srv.Calls.Load(), err)
	}
}

func TestExchangeCacheIsBounded(t *testing.T) {
	srv := credentialstest.Start("toolmesh", "sec-ret-1", "billing-api")
	t.Cleanup(srv.Close)
	e := newExchanger(t, srv, "sec-ret-1", nil, func(o *credentials.ExchangeOptions) { o.MaxCached = 3 })
	for i := range 10 {
		if _, err := e.Token(t.Context(), subjectToken(t, string(rune('a'+i)), time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Cached(); n != 3 {
		t.Errorf("Cached() = %d after 10 callers, want the bound 3", n)
	}
}

func TestExchangeFailures(t *testing.T) {
	srv := credentialstest.Start("toolmesh", "the-client-secret", "billing-api")
	t.Cleanup(srv.Close)
	var log bytes.Buffer
	sub := subjectToken(t, "alice", time.Now().Add(time.Hour))
	cases := []struct {
		name string
		prep func() *credentials.Exchanger
		want []string
	}{
		{"refused", func() *credentials.Exchanger {
			srv.FailNext(1, 400, "invalid_grant", "subject token "+sub+" has expired")
			return newExchanger(t, srv, "the-client-secret", &log, nil)
		}, []string{"refused to exchange the caller's token: invalid_grant (subject token [redacted] has expired)", "sign in again"}},
		{"wrong client secret", func() *credentials.Exchanger { return newExchanger(t, srv, "not-the-secret", &log, nil) },
			[]string{"invalid_client", "an operator must fix it"}},
		{"unknown audience", func() *credentials.Exchanger {
			return newExchanger(t, srv, "the-client-secret", &log, func(o *credentials.ExchangeOptions) { o.Audience = "payroll" })
		}, []string{"invalid_target"}},
		{"server error", func() *credentials.Exchanger {
			srv.FailNext(1, 502, "", "")
			return newExchanger(t, srv, "the-client-secret", &log, nil)
		}, []string{"refused to exchange the caller's token (HTTP 502)"}},
		{"unreachable", func() *credentials.Exchanger {
			return newExchanger(t, srv, "the-client-secret", &log, func(o *credentials.ExchangeOptions) { o.TokenEndpoint = "http://127.0.0.1:1/token" })
		}, []string{"cannot be reached"}},
	}
	for _, c := range cases {
		e := c.prep()
		_, err := e.Token(t.Context(), sub)
		if !errors.Is(err, credentials.ErrExchange) {
			t.Errorf("%s: %v, want ErrExchange", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		for _, secret := range []string{sub, "the-client-secret", "not-the-secret"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error quotes a secret: %q", c.name, err)
			}
		}
	}
	for _, secret := range []string{sub, "the-client-secret", "not-the-secret"} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log holds a secret:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), `"error":"invalid_grant"`) {
		t.Errorf("the log does not say why the exchange was refused:\n%s", log.String())
	}
	if _, err := newExchanger(t, srv, "the-client-secret", nil, nil).Token(t.Context(), ""); !errors.Is(err, credentials.ErrNoSubject) || !strings.Contains(err.Error(), "sign in and run the request again") {
		t.Errorf("no subject: %v", err)
	}
}
