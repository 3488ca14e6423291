package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Bounds of the fetches of a key set URL (auth.jwt.jwks_url).
const (
	// jwksFetchTimeout bounds one fetch, connection and body included.
	jwksFetchTimeout = 10 * time.Second
	// jwksLackingGap is the least time between fetches for tokens whose kid the set
	// lacks: a flood of tokens with made-up kids costs the identity provider one request
	// per gap, however many there are.
	jwksLackingGap = 10 * time.Second
	// jwksRetry is how soon a failed fetch is tried again (the refresh interval, when
	// that is shorter).
	jwksRetry = 30 * time.Second
	// A response's Cache-Control max-age may bring the next refresh forward, not to less
	// than a minute; a longer max-age than the refresh interval changes nothing.
	jwksMinMaxAge = time.Minute
	jwksMaxMaxAge = 24 * time.Hour
	// jwksMaxRedirects bounds the redirects a fetch follows, each to https (or http on
	// a loopback host) as the URL itself.
	jwksMaxRedirects = 3
)

// remoteKeys is the key set at a URL: fetched at start, again every refresh interval
// (run), and for a token whose kid it lacks (lacking). A fetch that fails, or brings
// something that is not a key set, keeps the last good set, and is logged.
type remoteKeys struct {
	url    string // redacted, for messages
	req    *url.URL
	client *http.Client
	every  time.Duration
	log    *slog.Logger
	now    func() time.Time

	fetching sync.Mutex // held by the one fetch in progress

	mu       sync.Mutex
	keys     map[string]any
	fetched  time.Time     // when the last fetch began, good or not
	inFlight bool          // a fetch is in progress
	next     time.Duration // from fetched to the next periodic fetch
}

// newRemoteKeys fetches the key set of cfg.JWKSURL; an error names the key and says why.
func newRemoteKeys(cfg config.JWT, log *slog.Logger) (*remoteKeys, error) {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil {
		return nil, fmt.Errorf("auth.jwt.jwks_url: %w", err)
	}
	client, err := jwksClient(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &remoteKeys{url: u.Redacted(), req: u, client: client, every: cfg.Refresh(), log: log, now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
	defer cancel()
	if err := r.refresh(ctx, reasonStart); err != nil {
		return nil, fmt.Errorf("auth.jwt.jwks_url %s: %w", r.url, err)
	}
	return r, nil
}

// reasonStart is the reason of the fetch at start, in the log.
const reasonStart = "start"

// jwksClient is the HTTP client of the key set fetches: its own transport (the
// system's roots, or those of caFile), no connection kept between fetches minutes
// apart, and no redirect to plaintext.
func jwksClient(caFile string) (*http.Client, error) {
	tc, err := trust.HTTPSConfig(caFile, "", "")
	if err != nil {
		return nil, fmt.Errorf("auth.jwt.ca_file: %w", err)
	}
	return &http.Client{
		Timeout: jwksFetchTimeout,
		Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			TLSClientConfig:        tc,
			TLSHandshakeTimeout:    jwksFetchTimeout,
			ResponseHeaderTimeout:  jwksFetchTimeout,
			MaxResponseHeaderBytes: 64 << 10,
			DisableKeepAlives:      true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > jwksMaxRedirects {
				return fmt.Errorf("more than %d redirects", jwksMaxRedirects)
			}
			if req.URL.Scheme != "https" && (req.URL.Scheme != "http" || !config.LoopbackHost(req.URL.Hostname())) {
				return fmt.Errorf("a redirect to %s, which is not https", req.URL.Redacted())
			}
			return nil
		},
	}, nil
}

func (r *remoteKeys) current() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys
}

// lacking fetches the set again for a kid it lacks, unless a fetch began less than
// jwksLackingGap ago; a fetch in progress is waited for.
func (r *remoteKeys) lacking(kid string) map[string]any {
	r.mu.Lock()
	skip := !r.inFlight && r.now().Sub(r.fetched) < jwksLackingGap
	r.mu.Unlock()
	if skip {
		return r.current()
	}
	r.fetching.Lock()
	defer r.fetching.Unlock()
	r.mu.Lock()
	_, got := r.keys[kid]
	recent := r.now().Sub(r.fetched) < jwksLackingGap // another caller's fetch, just ended
	r.mu.Unlock()
	if !got && !recent {
		// The fetch serves every caller waiting on it, not only this one: it has its
		// own deadline.
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		defer cancel()
		_ = r.refreshLocked(ctx, "unknown kid")
	}
	return r.current()
}

// run fetches the set again every refresh interval (or sooner, as a response's max-age
// says, or after a failure) until ctx ends.
func (r *remoteKeys) run(ctx context.Context) {
	for {
		r.mu.Lock()
		wait := r.next - r.now().Sub(r.fetched)
		r.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue // a fetch for a kid may have come in between
		}
		_ = r.refresh(ctx, "refresh interval")
		if ctx.Err() != nil {
			return
		}
	}
}

// refresh fetches the set and, when it is good, replaces the current one; a failure
// keeps the current set, is logged and is returned.
func (r *remoteKeys) refresh(ctx context.Context, why string) error {
	r.fetching.Lock()
	defer r.fetching.Unlock()
	return r.refreshLocked(ctx, why)
}

// refreshLocked is refresh with r.fetching held.
func (r *remoteKeys) refreshLocked(ctx context.Context, why string) error {
	r.mu.Lock()
	r.fetched, r.inFlight = r.now(), true
	r.mu.Unlock()
	keys, maxAge, err := r.fetch(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight = false
	if err != nil {
		r.next = min(r.every, jwksRetry)
		if r.keys != nil {
			r.log.Warn("fetching the key set of auth.jwt.jwks_url failed; the last good one is kept",
				"url", r.url, "reason", why, "keys", len(r.keys), "retry_in", r.next.String(), "error", err.Error())
		}
		return err
	}
	r.keys, r.next = keys, r.every
	if maxAge > 0 {
		r.next = min(r.every, max(maxAge, jwksMinMaxAge))
	}
	level := slog.LevelDebug
	if why == reasonStart {
		level = slog.LevelInfo // once, so that an operator sees where the keys come from
	}
	r.log.Log(ctx, level, "fetched the key set of auth.jwt.jwks_url", "url", r.url, "reason", why, "keys", len(keys), "next_in", r.next.String())
	return nil
}

// errJWKSTooLarge is a key set response over maxJWKSBytes.
var errJWKSTooLarge = fmt.Errorf("the key set is larger than %d bytes", maxJWKSBytes)

// fetch GETs the key set and parses it; maxAge is the response's Cache-Control max-age
// (0 without one).
func (r *remoteKeys) fetch(ctx context.Context) (_ map[string]any, maxAge time.Duration, _ error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.req.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("HTTP status %s", resp.Status)
	}
	if resp.ContentLength > maxJWKSBytes {
		return nil, 0, errJWKSTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the response: %w", err)
	}
	if len(b) > maxJWKSBytes {
		return nil, 0, errJWKSTooLarge
	}
	keys, skipped, err := parseJWKSSkipping(b)
	if err != nil {
		return nil, 0, err
	}
	if len(skipped) > 0 {
		r.log.Warn("keys of auth.jwt.jwks_url skipped: tokens they signed are refused", "url", r.url, "skipped", strings.Join(skipped, "; "))
	}
	return keys, cacheMaxAge(resp.Header.Values("Cache-Control")), nil
}

// cacheMaxAge is the max-age of Cache-Control values, clamped to at most
// jwksMaxMaxAge; 0 without one, or with no-store or no-cache.
func cacheMaxAge(values []string) time.Duration {
	var age time.Duration
	for _, v := range values {
		for d := range strings.SplitSeq(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store", "no-cache":
				return 0
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(arg, `"`), 10, 64)
				if err == nil && n > 0 {
					age = time.Duration(min(n, int64(jwksMaxMaxAge/time.Second))) * time.Second
				}
			}
		}
	}
	return age
}
