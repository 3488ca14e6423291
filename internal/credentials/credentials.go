// Package credentials gives tool groups credentials of their own for each call: a token
// exchanged for the caller's (OAuth 2.0 Token Exchange, RFC 8693) at a token endpoint
// with the orchestrator's client credentials, kept until shortly before it expires, or a
// tenant's secrets read from files (Kubernetes Secrets mounted per tenant), read again
// when they change. A Set holds every group's; the router and the MCP groups ask it for
// a call's, which go to that group alone, as context entries its converter forwards or
// as an MCP session's headers. Nothing here logs, journals or puts on a span a token or
// a secret; its errors are written for the model to read and hold neither.
//
// It imports internal/config and internal/toolinternal only.
package credentials

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// Errors of a call's credentials.
var (
	// ErrNoSubject: the group exchanges the caller's token and the call has none.
	ErrNoSubject = errors.New("no caller token to exchange")
	// ErrExchange: the token endpoint could not be reached or refused the exchange.
	ErrExchange = errors.New("token exchange failed")
	// ErrNoSecret: the tenant has no secret for the group.
	ErrNoSecret = errors.New("no credentials for this tenant")
)

// Delivery is what one call carries to one group besides the run's context.
type Delivery struct {
	// Context are ToolCallContext entries, which pass the group's converter (it must
	// forward them).
	Context map[string]string
	// Headers are HTTP headers of an MCP group's session.
	Headers map[string]string
}

// Set is the credentials of every group that has some. The zero Set (or nil) has none.
type Set struct {
	groups map[string]*source
}

// source is one group's: an exchanger or a secret store, and where each value goes.
type source struct {
	exchange         *Exchanger
	exchangeKey      string
	exchangeHeader   string
	secrets          *SecretStore
	secretKeys       map[string]string // file → context key
	secretHeaders    map[string]string // file → header
	secretFilesOrder []string
}

// FromConfig builds the credentials of the groups of cfg (groups.<role>.token_exchange,
// groups.<role>.secrets); nil when none has any. It reads every client secret file, and
// a CA file, so that a mistake fails the start naming its key.
func FromConfig(cfg config.Config, log *slog.Logger) (*Set, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{groups: map[string]*source{}}
	for role := range cfg.Groups {
		if x := cfg.ExchangeFor(role); x != nil {
			key := "groups." + role + ".token_exchange"
			client, err := endpointClient(x.CAFile)
			if err != nil {
				return nil, fmt.Errorf("%s.ca_file: %w", key, err)
			}
			e, err := NewExchanger(ExchangeOptions{Group: role, TokenEndpoint: x.TokenEndpoint, ClientID: x.ClientID,
				ClientSecretFile: x.ClientSecretFile, ClientAuth: x.ClientAuth, Audience: x.Audience, Resource: x.Resource,
				Scope: x.Scope, RequestedTokenType: x.RequestedTokenType, SubjectTokenType: x.SubjectTokenType,
				Timeout: x.Timeout.D(), RefreshBefore: x.RefreshBefore.D(), MaxCached: x.MaxCached, Client: client,
				Logger: log.With("component", "token exchange")})
			if err != nil {
				return nil, fmt.Errorf("%s.client_secret_file: %w", key, err)
			}
			s.groups[role] = &source{exchange: e, exchangeKey: x.ContextKey, exchangeHeader: x.Header}
		}
		if sc := cfg.SecretsFor(role); sc != nil {
			st, err := NewSecretStore(SecretOptions{Group: role, Dir: sc.Dir, Reload: sc.ReloadInterval.D(),
				Logger: log.With("component", "secret store")})
			if err != nil {
				return nil, fmt.Errorf("groups.%s.secrets.dir: %w", role, err)
			}
			src := &source{secrets: st, secretKeys: sc.ContextKeys, secretHeaders: sc.Headers}
			for f := range sc.ContextKeys {
				src.secretFilesOrder = append(src.secretFilesOrder, f)
			}
			for f := range sc.Headers {
				if _, ok := sc.ContextKeys[f]; !ok {
					src.secretFilesOrder = append(src.secretFilesOrder, f)
				}
			}
			slices.Sort(src.secretFilesOrder)
			s.groups[role] = src
		}
	}
	if len(s.groups) == 0 {
		return nil, nil
	}
	return s, nil
}

// Has reports whether group has credentials.
func (s *Set) Has(group string) bool {
	if s == nil {
		return false
	}
	_, ok := s.groups[group]
	return ok
}

// For is what the call in ctx carries to group: nothing for a group without
// credentials; for one with, its token for the caller (toolinternal.SubjectFrom) or its
// tenant's secrets (toolinternal.TenantFrom). The error, when there are none, is written
// for the model (the call is not sent) and holds no secret.
func (s *Set) For(ctx context.Context, group string) (Delivery, error) {
	if s == nil {
		return Delivery{}, nil
	}
	src, ok := s.groups[group]
	if !ok {
		return Delivery{}, nil
	}
	var d Delivery
	put := func(m *map[string]string, k, v string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	if src.exchange != nil {
		tok, err := src.exchange.Token(ctx, toolinternal.SubjectFrom(ctx))
		if err != nil {
			return Delivery{}, err
		}
		if src.exchangeKey != "" {
			put(&d.Context, src.exchangeKey, tok)
		}
		if src.exchangeHeader != "" {
			put(&d.Headers, src.exchangeHeader, "Bearer "+tok)
		}
		return d, nil
	}
	tenant := toolinternal.TenantFrom(ctx)
	for _, file := range src.secretFilesOrder {
		v, err := src.secrets.Get(ctx, tenant, file)
		if err != nil {
			return Delivery{}, err
		}
		if k := src.secretKeys[file]; k != "" {
			put(&d.Context, k, v)
		}
		if h := src.secretHeaders[file]; h != "" {
			put(&d.Headers, h, v)
		}
	}
	return d, nil
}

// ContextFor is For's context entries, for a worker group.
func (s *Set) ContextFor(ctx context.Context, group string) (map[string]string, error) {
	d, err := s.For(ctx, group)
	return d.Context, err
}

// endpointClient is the HTTP client of a token endpoint: it follows no redirect (a form
// with the client's secret must not go elsewhere), and trusts caFile's roots when set.
func endpointClient(caFile string) (*http.Client, error) {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c.Transport = t
	return c, nil
}

// redact takes the secrets out of s (a message an endpoint wrote, an error that may
// quote a request).
func redact(s string, secrets ...string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// printable is s with control characters and non-ASCII dropped, cut to max bytes: what an
// endpoint says is quoted to the model and in logs.
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return -1
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// endpointHost is the scheme and host of an endpoint, for logs.
func endpointHost(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Scheme + "://" + p.Host
	}
	return ""
}

// jwtExpiry is the exp claim of a token that is a JWT, read without verifying it: the
// caller's token was verified when it arrived; an issued one is the endpoint's word.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > MaxTokenBytes {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil || c.Exp == nil || *c.Exp <= 0 || *c.Exp > 1e11 {
		return time.Time{}, false
	}
	return time.Unix(int64(*c.Exp), 0), true
}

// fileID tells a file's versions apart: a file replaced (a Kubernetes Secret's atomic
// swap of its ..data link points it to a new file) has another inode, a file rewritten in
// place another size or modification time.
type fileID struct {
	dev, ino uint64
	size     int64
	mod      time.Time
}

// statID is the identity of the file path leads to (links followed).
func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: fi.Size(), mod: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino //nolint:unconvert // Dev's type differs by platform
	}
	return id, nil
}
