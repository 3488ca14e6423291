package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/logtest"
)

// testKey is an ES256 signing key and the kid its key set names it by.
type testKey struct {
	kid string
	key *ecdsa.PrivateKey
}

func newTestKey(t *testing.T, kid string) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, key: k}
}

// jwksOf is the JSON Web Key Set of the public halves of keys.
func jwksOf(t *testing.T, keys ...testKey) []byte {
	t.Helper()
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for _, k := range keys {
		pt, err := k.key.PublicKey.Bytes() // 0x04 || x || y
		if err != nil {
			t.Fatal(err)
		}
		set.Keys = append(set.Keys, map[string]string{"kty": "EC", "crv": "P-256", "kid": k.kid, "use": "sig",
			"x": base64.RawURLEncoding.EncodeToString(pt[1:33]), "y": base64.RawURLEncoding.EncodeToString(pt[33:])})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// token is a token of k for tenant acme, of issuer i and audience a, valid for an hour.
func (k testKey) token(t *testing.T) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "u", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = k.kid
	raw, err := tok.SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// idp serves a key set at /jwks.json that a test changes, and counts the requests.
type idp struct {
	srv      *httptest.Server
	mu       sync.Mutex
	body     []byte
	header   http.Header
	wait     func() // called once, by the next request, before it is answered
	requests atomic.Int64
}

func startIDP(t *testing.T, useTLS bool, body []byte) *idp {
	t.Helper()
	p := &idp{body: body}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if r.URL.Path != "/jwks.json" {
			http.NotFound(w, r)
			return
		}
		p.mu.Lock()
		body, header, wait := p.body, p.header, p.wait
		p.wait = nil
		p.mu.Unlock()
		if wait != nil {
			wait()
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		_, _ = w.Write(body)
	})
	p.srv = httptest.NewUnstartedServer(h)
	p.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes a test fails on purpose
	if useTLS {
		p.srv.StartTLS()
	} else {
		p.srv.Start()
	}
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) serve(body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.body = body
}

// config is the auth.jwt of the key set at p, with the server's certificate as ca_file
// when it serves TLS.
func (p *idp) config(t *testing.T) config.JWT {
	t.Helper()
	cfg := config.JWT{JWKSURL: p.srv.URL + "/jwks.json", Issuer: "i", Audience: "a"}
	if p.srv.TLS != nil {
		ca := filepath.Join(t.TempDir(), "idp-ca.pem")
		if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.CAFile = ca
	}
	return cfg
}

// clock is a time a test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// remoteTokens verifies against the key set at p, on a clock the test moves, logging
// into the returned buffer.
func remoteTokens(t *testing.T, p *idp) (*tokens, *remoteKeys, *clock, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	ts, err := newTokens(p.config(t), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r := ts.keys.(*remoteKeys)
	c := &clock{t: time.Now()}
	r.mu.Lock()
	r.now = c.now
	r.mu.Unlock()
	return ts, r, c, logs
}

// The key set at a URL, over TLS with a private CA or plain http on loopback: fetched at
// start; a token of a key the identity provider added verifies at once (its unknown kid
// fetches the set again); a key it removed no longer verifies after the next refresh.
func TestJWKSURLFollowsRotation(t *testing.T) {
	for _, useTLS := range []bool{true, false} {
		t.Run(map[bool]string{true: "https", false: "http on loopback"}[useTLS], func(t *testing.T) {
			k1, k2 := newTestKey(t, "k1"), newTestKey(t, "k2")
			p := startIDP(t, useTLS, jwksOf(t, k1))
			ts, r, c, _ := remoteTokens(t, p)
			if tn, who, err := ts.verify(k1.token(t)); err != nil || tn != "acme" || who != "i#u" {
				t.Fatalf("a token of the served key: %q, %q, %v", tn, who, err)
			}
			if n := p.requests.Load(); n != 1 {
				t.Errorf("%d requests at start, want 1", n)
			}

			p.serve(jwksOf(t, k1, k2)) // the identity provider adds k2
			c.add(jwksLackingGap)
			if _, _, err := ts.verify(k2.token(t)); err != nil {
				t.Errorf("a token of the added key: %v", err)
			}
			if n := p.requests.Load(); n != 2 {
				t.Errorf("%d requests after the unknown kid, want 2", n)
			}

			p.serve(jwksOf(t, k2)) // and removes k1, saying to fetch again in 2 minutes
			p.mu.Lock()
			p.header = http.Header{"Cache-Control": {"public, max-age=120"}}
			p.mu.Unlock()
			if err := r.refresh(t.Context(), "test"); err != nil {
				t.Fatal(err)
			}
			r.mu.Lock()
			next := r.next
			r.mu.Unlock()
			if next != 2*time.Minute {
				t.Errorf("the next fetch in %s, want the max-age of 2m", next)
			}
			if _, _, err := ts.verify(k1.token(t)); err == nil || !strings.Contains(err.Error(), `no key "k1"`) {
				t.Errorf("a token of the removed key: %v, want it refused", err)
			}
			if _, _, err := ts.verify(k2.token(t)); err != nil {
				t.Errorf("a token of the kept key: %v", err)
			}
		})
	}
}

// Tokens with kids the set lacks fetch it again at most once per jwksLackingGap, however
// many come; those of another issuer never do.
func TestJWKSURLUnknownKidsAreRateLimited(t *testing.T) {
	k1 := newTestKey(t, "k1")
	p := startIDP(t, false, jwksOf(t, k1))
	ts, _, c, _ := remoteTokens(t, p)
	c.add(jwksLackingGap)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if _, _, err := ts.verify(newTestKey(t, fmt.Sprintf("random-%d", i)).token(t)); err == nil {
				t.Error("a token of a key nobody published verified")
			}
		})
	}
	wg.Wait()
	if n := p.requests.Load(); n != 2 {
		t.Errorf("%d requests for 50 unknown kids, want 2 (the start and one)", n)
	}
	c.add(jwksLackingGap - time.Second)
	_, _, _ = ts.verify(newTestKey(t, "again").token(t))
	if n := p.requests.Load(); n != 2 {
		t.Errorf("%d requests within the gap, want 2", n)
	}
	c.add(time.Second)
	_, _, _ = ts.verify(newTestKey(t, "later").token(t))
	if n := p.requests.Load(); n != 3 {
		t.Errorf("%d requests after the gap, want 3", n)
	}

	c.add(jwksLackingGap)
	stranger := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "elsewhere", "aud": "a", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	stranger.Header["kid"] = "theirs"
	raw, err := stranger.SignedString(k1.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ts.verify(raw); err == nil {
		t.Error("a token of another issuer verified")
	}
	if n := p.requests.Load(); n != 3 {
		t.Errorf("%d requests after a token of another issuer, want still 3", n)
	}
}

// A token whose kid the set lacks while a fetch is in progress waits for that fetch
// instead of starting another.
func TestJWKSURLUnknownKidWaitsForTheFetchInProgress(t *testing.T) {
	k1, k2 := newTestKey(t, "k1"), newTestKey(t, "k2")
	p := startIDP(t, false, jwksOf(t, k1))
	ts, r, c, _ := remoteTokens(t, p)
	c.add(jwksLackingGap)
	arrived, release := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.wait = func() { close(arrived); <-release }
	p.body = jwksOf(t, k1, k2)
	p.mu.Unlock()
	refreshed := make(chan error, 1)
	go func() { refreshed <- r.refresh(context.Background(), "test") }()
	<-arrived
	verified := make(chan error, 1)
	go func() { _, _, err := ts.verify(k2.token(t)); verified <- err }()
	close(release)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	if err := <-verified; err != nil {
		t.Errorf("a token of the key the fetch in progress brought: %v", err)
	}
	if n := p.requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2 (the start and the one in progress)", n)
	}
}

// A fetch that fails or brings no key set keeps the last good set, and says so in the
// log; at start the same is an error naming the key.
func TestJWKSURLBadFetchKeepsKeys(t *testing.T) {
	k1 := newTestKey(t, "k1")
	huge := append([]byte(`{"keys":[],"pad":"`), bytes.Repeat([]byte("x"), maxJWKSBytes)...)
	huge = append(huge, `"}`...)
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"oversized body", huge, "larger than 1048576 bytes"},
		{"bad JSON", []byte(`{"keys": [`), "not a JSON Web Key Set"},
		{"no keys", []byte(`{"keys": []}`), "no keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startIDP(t, false, jwksOf(t, k1))
			ts, r, _, logs := remoteTokens(t, p)
			p.serve(tc.body)
			if err := r.refresh(t.Context(), "test"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refresh: %v, want it to contain %q", err, tc.want)
			}
			if _, _, err := ts.verify(k1.token(t)); err != nil {
				t.Errorf("a token of the last good set: %v", err)
			}
			if !strings.Contains(logs.String(), "the last good one is kept") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log:\n%s\nwant the failure and that the keys are kept", logs)
			}
			r.mu.Lock()
			next := r.next
			r.mu.Unlock()
			if next != jwksRetry {
				t.Errorf("the next fetch in %s, want %s", next, jwksRetry)
			}
			_, err := newTokens(p.config(t), nil)
			if err == nil || !strings.Contains(err.Error(), "auth.jwt.jwks_url "+p.srv.URL+"/jwks.json: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("starting with it: %v", err)
			}
		})
	}
}

// The key set must be there at start: an unreachable URL, an error status, a server
// whose certificate the CA bundle does not vouch for, a missing CA file are errors
// naming the key.
func TestJWKSURLStartFails(t *testing.T) {
	p := startIDP(t, false, nil)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	tlsIDP := startIDP(t, true, jwksOf(t, newTestKey(t, "k")))
	for _, tc := range []struct {
		name string
		cfg  config.JWT
		want string
	}{
		{"unreachable", config.JWT{JWKSURL: gone.URL + "/jwks.json"}, "auth.jwt.jwks_url " + gone.URL + "/jwks.json: "},
		{"not found", config.JWT{JWKSURL: p.srv.URL + "/nope"}, "HTTP status 404 Not Found"},
		{"unknown CA", config.JWT{JWKSURL: tlsIDP.srv.URL + "/jwks.json"}, "certificate signed by unknown authority"},
		{"missing CA file", config.JWT{JWKSURL: tlsIDP.srv.URL + "/jwks.json", CAFile: filepath.Join(t.TempDir(), "none.pem")}, "auth.jwt.ca_file: "},
		{"a CA file without certificates", config.JWT{JWKSURL: tlsIDP.srv.URL + "/jwks.json", CAFile: writeTemp(t, "junk")}, "auth.jwt.ca_file: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Issuer, tc.cfg.Audience = "i", "a"
			_, err := newTokens(tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A redirect is followed only to https (or http on loopback).
func TestJWKSURLRedirects(t *testing.T) {
	k := newTestKey(t, "k")
	p := startIDP(t, false, jwksOf(t, k))
	hop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := p.srv.URL + "/jwks.json"
		if r.URL.Path == "/away" {
			target = "http://example.com/jwks.json"
		}
		http.Redirect(w, r, target, http.StatusFound)
	}))
	t.Cleanup(hop.Close)
	if _, err := newTokens(config.JWT{JWKSURL: hop.URL + "/here", Issuer: "i", Audience: "a"}, nil); err != nil {
		t.Errorf("a redirect on loopback: %v", err)
	}
	if _, err := newTokens(config.JWT{JWKSURL: hop.URL + "/away", Issuer: "i", Audience: "a"}, nil); err == nil || !strings.Contains(err.Error(), "not https") {
		t.Errorf("a redirect to plain http elsewhere: %v", err)
	}
}

func TestCacheMaxAge(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   time.Duration
	}{
		{nil, 0},
		{[]string{"public, max-age=300"}, 5 * time.Minute},
		{[]string{"public", "Max-Age=\"60\""}, time.Minute},
		{[]string{"max-age=0"}, 0},
		{[]string{"max-age=-5"}, 0},
		{[]string{"max-age=junk"}, 0},
		{[]string{"max-age=9999999999"}, jwksMaxMaxAge},
		{[]string{"max-age=300, no-cache"}, 0},
		{[]string{"no-store"}, 0},
	} {
		if got := cacheMaxAge(tc.values); got != tc.want {
			t.Errorf("cacheMaxAge(%q) = %s, want %s", tc.values, got, tc.want)
		}
	}
}

// roundTrip serves a key set fetch without a network, so that the refresh loop can run
// on synctest's clock.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The refresh loop fetches the set every refresh interval, sooner when a response's
// max-age says so (never under a minute), after jwksRetry when a fetch failed, and
// stops with its context.
func TestJWKSURLRefreshLoop(t *testing.T) {
	k := newTestKey(t, "k")
	set := jwksOf(t, k)
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var fetches []time.Duration // since the start
		maxAge, fail := "", false
		start := time.Now()
		r := &remoteKeys{url: "https://idp.test/jwks.json", every: 5 * time.Minute, log: slog.New(slog.DiscardHandler), now: time.Now,
			client: &http.Client{Transport: roundTrip(func(req *http.Request) (*http.Response, error) {
				mu.Lock()
				defer mu.Unlock()
				fetches = append(fetches, time.Since(start))
				if fail {
					return nil, fmt.Errorf("the identity provider is down")
				}
				h := http.Header{}
				if maxAge != "" {
					h.Set("Cache-Control", "max-age="+maxAge)
				}
				return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: h, Body: io.NopCloser(bytes.NewReader(set)), Request: req}, nil
			})}}
		r.req, _ = url.Parse(r.url)
		if err := r.refresh(t.Context(), "start"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.run(ctx) }()
		at := func(d time.Duration, setup func()) {
			time.Sleep(d - time.Since(start))
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if setup != nil {
				setup()
			}
		}
		at(5*time.Minute+time.Second, func() { maxAge = "10" }) // the periodic fetch; the next says max-age 10 s
		at(10*time.Minute+time.Second, func() { maxAge = "120" })
		// max-age=10 is held to a minute: the next fetch at 11m.
		at(11*time.Minute+time.Second, func() { fail = true })
		// max-age=120: the next at 13m, which fails; retried after jwksRetry, and then
		// every refresh interval again.
		at(13*time.Minute+time.Second, func() { fail = false; maxAge = "" })
		at(13*time.Minute+jwksRetry+5*time.Minute+time.Second, nil)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{0, 5 * time.Minute, 10 * time.Minute, 11 * time.Minute, 13 * time.Minute, 13*time.Minute + jwksRetry, 18*time.Minute + jwksRetry}
		if fmt.Sprint(fetches) != fmt.Sprint(want) {
			t.Errorf("fetches at %v, want %v", fetches, want)
		}
		if len(r.current()) != 1 {
			t.Errorf("the key set has %d keys after the failure, want the last good one", len(r.current()))
		}
	})
}
