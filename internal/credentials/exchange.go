package credentials

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// GrantTokenExchange is the grant type of RFC 8693.
const GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"

// Bounds of what an exchange reads and keeps.
const (
	// MaxTokenBytes bounds a subject token and an issued one.
	MaxTokenBytes = 16 << 10
	// maxResponseBytes bounds the token endpoint's answer.
	maxResponseBytes = 64 << 10
	// maxSecretBytes bounds the client secret file.
	maxSecretBytes = 4 << 10
	// maxDescriptionBytes bounds the endpoint's error_description a message quotes.
	maxDescriptionBytes = 256
)

// ExchangeOptions configure an Exchanger: one tool group's token exchange.
type ExchangeOptions struct {
	// Group is the tool group the tokens are for (in messages and logs).
	Group string
	// TokenEndpoint is the authorization server's token endpoint.
	TokenEndpoint string
	// ClientID, and the secret in ClientSecretFile, authenticate the orchestrator, as
	// ClientAuth says ("client_secret_basic", the default, or "client_secret_post"). The
	// file is read again when it changes.
	ClientID, ClientSecretFile, ClientAuth string
	// Audience, Resource and Scope are the request's (each omitted when empty).
	Audience, Resource, Scope string
	// RequestedTokenType and SubjectTokenType are token type URIs (default: access
	// token).
	RequestedTokenType, SubjectTokenType string
	// Timeout bounds one exchange (default 10s).
	Timeout time.Duration
	// RefreshBefore is how long before a token expires a call exchanges again (default
	// 30s).
	RefreshBefore time.Duration
	// MaxCached bounds the tokens kept (default 4096).
	MaxCached int
	// Client makes the requests (default: a client that follows no redirect).
	Client *http.Client
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Exchanger exchanges callers' tokens for tokens of one group, keeping each until
// shortly before it expires; concurrent calls for one caller's token share one
// exchange. It is safe for concurrent use.
type Exchanger struct {
	opts   ExchangeOptions
	log    *slog.Logger
	flight singleflight.Group

	mu     sync.Mutex
	cache  map[[32]byte]cached
	secret secretFile
}

// cached is an exchanged token and when to exchange again.
type cached struct {
	token     string
	refreshAt time.Time
}

// NewExchanger returns an exchanger; it reads the client secret once, so that a missing
// file fails the start.
func NewExchanger(opts ExchangeOptions) (*Exchanger, error) {
	if opts.TokenEndpoint == "" || opts.ClientID == "" || opts.ClientSecretFile == "" {
		return nil, errors.New("credentials: an exchanger needs a token endpoint, a client id and a client secret file")
	}
	if opts.ClientAuth == "" {
		opts.ClientAuth = "client_secret_basic"
	}
	if opts.RequestedTokenType == "" {
		opts.RequestedTokenType = "urn:ietf:params:oauth:token-type:access_token"
	}
	if opts.SubjectTokenType == "" {
		opts.SubjectTokenType = "urn:ietf:params:oauth:token-type:access_token"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.RefreshBefore <= 0 {
		opts.RefreshBefore = 30 * time.Second
	}
	if opts.MaxCached <= 0 {
		opts.MaxCached = 4096
	}
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Exchanger{opts: opts, log: opts.Logger.With("group", opts.Group), cache: map[[32]byte]cached{}, secret: secretFile{path: opts.ClientSecretFile}}
	if _, err := e.secret.read(); err != nil {
		return nil, err
	}
	return e, nil
}

// Token is the group's token for the caller whose bearer token is subject: the one kept
// for it, or one exchanged now. Its error says, without any secret, why there is none.
func (e *Exchanger) Token(ctx context.Context, subject string) (string, error) {
	if subject == "" {
		return "", fmt.Errorf("%w: group '%s' acts for the caller with a token exchanged for the caller's own, and this call has none: the caller authenticated without a bearer token, or the run was taken over by another orchestrator, which does not keep callers' tokens. Tell the user this tool needs them to sign in and run the request again", ErrNoSubject, e.opts.Group)
	}
	if len(subject) > MaxTokenBytes {
		return "", fmt.Errorf("%w: the caller's token is %d bytes; at most %d are exchanged", ErrExchange, len(subject), MaxTokenBytes)
	}
	key := sha256.Sum256([]byte(subject))
	if tok, ok := e.cached(key); ok {
		return tok, nil
	}
	ch := e.fly(ctx, key, subject)
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", fmt.Errorf("%w: gave up waiting for the token service: %w", ErrExchange, ctx.Err())
	}
}

// fly joins the exchange for key under way, or starts one. A caller that missed the
// cache just before a flight that ended filled it finds the token there and does not
// exchange again.
func (e *Exchanger) fly(ctx context.Context, key [32]byte, subject string) <-chan singleflight.Result {
	return e.flight.DoChan(string(key[:]), func() (any, error) {
		if tok, ok := e.cached(key); ok {
			return tok, nil
		}
		// The exchange outlives a caller that gives up: others may wait for it.
		xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.Timeout)
		defer cancel()
		return e.exchange(xctx, key, subject)
	})
}

// cached is the token kept for key while it is not due for a refresh.
func (e *Exchanger) cached(key [32]byte) (string, bool) {
	now := e.opts.Now()
	e.mu.Lock()
	c, ok := e.cache[key]
	e.mu.Unlock()
	if ok && now.Before(c.refreshAt) {
		return c.token, true
	}
	return "", false
}

// exchange asks the token endpoint for the group's token and keeps it.
func (e *Exchanger) exchange(ctx context.Context, key [32]byte, subject string) (string, error) {
	secret, err := e.secret.read()
	if err != nil {
		e.log.ErrorContext(ctx, "token exchange impossible: the client secret cannot be read", "error", err.Error())
		return "", fmt.Errorf("%w: the orchestrator's credentials for the token service of group '%s' cannot be read; an operator must fix them", ErrExchange, e.opts.Group)
	}
	form := url.Values{
		"grant_type":           {GrantTokenExchange},
		"subject_token":        {subject},
		"subject_token_type":   {e.opts.SubjectTokenType},
		"requested_token_type": {e.opts.RequestedTokenType},
	}
	for k, v := range map[string]string{"audience": e.opts.Audience, "resource": e.opts.Resource, "scope": e.opts.Scope} {
		if v != "" {
			form.Set(k, v)
		}
	}
	if e.opts.ClientAuth == "client_secret_post" {
		form.Set("client_id", e.opts.ClientID)
		form.Set("client_secret", secret)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.opts.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrExchange, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if e.opts.ClientAuth != "client_secret_post" {
		// RFC 6749 section 2.3.1: each part form-encoded before the Basic encoding.
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(e.opts.ClientID)+":"+url.QueryEscape(secret))))
	}
	start := e.opts.Now()
	resp, err := e.opts.Client.Do(req)
	if err != nil {
		msg := redact(err.Error(), subject, secret)
		e.log.WarnContext(ctx, "token exchange failed: the token service cannot be reached", "endpoint", endpointHost(e.opts.TokenEndpoint), "error", msg)
		return "", fmt.Errorf("%w: the token service of group '%s' cannot be reached; try again later", ErrExchange, e.opts.Group)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil || len(body) > maxResponseBytes {
		e.log.WarnContext(ctx, "token exchange failed: unreadable answer", "endpoint", endpointHost(e.opts.TokenEndpoint), "status", resp.StatusCode)
		return "", fmt.Errorf("%w: the token service of group '%s' answered something unreadable; try again later", ErrExchange, e.opts.Group)
	}
	if resp.StatusCode != http.StatusOK {
		return "", e.refused(ctx, resp.StatusCode, body, subject, secret)
	}
	tok, expiresIn, err := parseIssued(resp.Header.Get("Content-Type"), body)
	if err != nil {
		e.log.WarnContext(ctx, "token exchange failed: the answer is not a token", "endpoint", endpointHost(e.opts.TokenEndpoint), "error", err.Error())
		return "", fmt.Errorf("%w: the token service of group '%s' answered without a usable token; an operator must look at it", ErrExchange, e.opts.Group)
	}
	e.keep(key, tok, e.refreshAt(start, expiresIn, tok, subject))
	e.log.DebugContext(ctx, "token exchanged", "expires_in", expiresIn.String())
	return tok, nil
}

// refused turns the token endpoint's refusal (RFC 6749 section 5.2) into an error the
// model reads and a log line, neither holding a secret.
func (e *Exchanger) refused(ctx context.Context, status int, body []byte, subject, secret string) error {
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal(body, &oe)
	code := printable(redact(oe.Error, subject, secret), 64)
	desc := printable(redact(oe.Description, subject, secret), maxDescriptionBytes)
	e.log.WarnContext(ctx, "token exchange refused", "endpoint", endpointHost(e.opts.TokenEndpoint), "status", status, "error", code, "error_description", desc)
	if code == "" {
		return fmt.Errorf("%w: the token service of group '%s' refused to exchange the caller's token (HTTP %d)", ErrExchange, e.opts.Group, status)
	}
	msg := fmt.Sprintf("%v: the token service of group '%s' refused to exchange the caller's token: %s", ErrExchange, e.opts.Group, code)
	if desc != "" {
		msg += " (" + desc + ")"
	}
	switch code {
	case "invalid_grant", "invalid_token":
		msg += ". The user's sign-in may have expired: ask them to sign in again"
	case "invalid_target", "invalid_scope", "unauthorized_client", "invalid_client":
		msg += ". This is the orchestrator's configuration, not the user's: an operator must fix it"
	}
	return &refusal{code: code, msg: msg}
}

// refusal is the token endpoint's refusal; errors.Is(err, ErrExchange) holds.
type refusal struct{ code, msg string }

func (r *refusal) Error() string        { return r.msg }
func (r *refusal) Is(target error) bool { return target == ErrExchange }

// parseIssued reads a token response (RFC 8693 section 2.2.1).
func parseIssued(contentType string, body []byte) (string, time.Duration, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt != "application/json" {
		return "", 0, fmt.Errorf("content type %q, want application/json", contentType)
	}
	var r struct {
		AccessToken     string   `json:"access_token"`
		IssuedTokenType string   `json:"issued_token_type"`
		TokenType       string   `json:"token_type"`
		ExpiresIn       *float64 `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return "", 0, fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case r.AccessToken == "":
		return "", 0, errors.New("no access_token")
	case len(r.AccessToken) > MaxTokenBytes:
		return "", 0, fmt.Errorf("an access_token of %d bytes; at most %d", len(r.AccessToken), MaxTokenBytes)
	case strings.ContainsFunc(r.AccessToken, func(c rune) bool { return c <= ' ' || c > '~' }):
		return "", 0, errors.New("an access_token with characters a header cannot carry")
	case r.ExpiresIn != nil && (*r.ExpiresIn < 0 || *r.ExpiresIn > 1e7):
		return "", 0, fmt.Errorf("expires_in %g", *r.ExpiresIn)
	}
	var in time.Duration = -1 // unknown
	if r.ExpiresIn != nil {
		in = time.Duration(*r.ExpiresIn * float64(time.Second))
	}
	return r.AccessToken, in, nil
}

// refreshAt is when to exchange again for a token issued at issued: RefreshBefore before
// it expires (half its life, for a short one), and never after the caller's own token
// expires. A token whose lifetime nobody says is not kept.
func (e *Exchanger) refreshAt(issued time.Time, expiresIn time.Duration, tok, subject string) time.Time {
	if expiresIn < 0 {
		if exp, ok := jwtExpiry(tok); ok {
			expiresIn = exp.Sub(issued)
		} else {
			return issued
		}
	}
	margin := e.opts.RefreshBefore
	if margin > expiresIn/2 {
		margin = expiresIn / 2
	}
	at := issued.Add(expiresIn - margin)
	if exp, ok := jwtExpiry(subject); ok && exp.Before(at) {
		at = exp
	}
	return at
}

// keep records a token, making room by dropping the tokens due for refresh, then those
// due soonest.
func (e *Exchanger) keep(key [32]byte, tok string, refreshAt time.Time) {
	now := e.opts.Now()
	if !now.Before(refreshAt) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.cache[key]; !ok && len(e.cache) >= e.opts.MaxCached {
		for k, c := range e.cache {
			if !now.Before(c.refreshAt) {
				delete(e.cache, k)
			}
		}
		for len(e.cache) >= e.opts.MaxCached {
			var soonest [32]byte
			first := true
			for k, c := range e.cache {
				if first || c.refreshAt.Before(e.cache[soonest].refreshAt) {
					soonest, first = k, false
				}
			}
			delete(e.cache, soonest)
		}
	}
	e.cache[key] = cached{token: tok, refreshAt: refreshAt}
}

// Cached is the number of tokens kept.
func (e *Exchanger) Cached() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.cache)
}

// secretFile is the client secret, read again when its file changes.
type secretFile struct {
	path string
	mu   sync.Mutex
	id   fileID
	val  string
}

func (s *secretFile) read() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := statID(s.path)
	if err != nil {
		return "", err
	}
	if id == s.id && s.val != "" {
		return s.val, nil
	}
	v, err := readBounded(s.path, maxSecretBytes)
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", fmt.Errorf("%s is empty", s.path)
	}
	s.id, s.val = id, v
	return v, nil
}

// readBounded reads a small file, without the line end a file usually ends with.
func readBounded(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) > max {
		return "", fmt.Errorf("%s is over %d bytes", path, max)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
