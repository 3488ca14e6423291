package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// idp is a small OAuth 2.1 authorization server for the tests, on a real socket: the
// metadata of RFC 8414, dynamic client registration (RFC 7591), the authorization code
// grant with PKCE (S256 only) and resource indicators (RFC 8707), and its key set. Its
// one user signs in at once (no login page): an authorization request redirects back
// with a code. Its access tokens are ES256 JWTs for the resource the client asked for,
// naming the user, its tenant and the scopes granted.
type idp struct {
	t      *testing.T
	issuer string
	key    *ecdsa.PrivateKey
	// user is who signs in, tenant its tenant claim; scopes the scopes it may be
	// granted (a request for others is granted the ones it may have).
	user, tenant string
	scopes       []string

	mu      sync.Mutex
	clients map[string][]string // client id → redirect URIs
	codes   map[string]idpCode
	issued  []jwt.MapClaims
}

type idpCode struct {
	client, redirect, challenge, resource, scope string
	expires                                      time.Time
}

// startIdP starts an authorization server whose user is user of tenant, who may be
// granted scopes.
func startIdP(t *testing.T, user, tenant string, scopes ...string) *idp {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &idp{t: t, issuer: "http://" + lis.Addr().String(), key: key, user: user, tenant: tenant, scopes: scopes,
		clients: map[string][]string{}, codes: map[string]idpCode{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", p.metadata)
	mux.HandleFunc("GET /.well-known/openid-configuration", p.metadata)
	mux.HandleFunc("GET /jwks.json", p.jwks)
	mux.HandleFunc("POST /register", p.register)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// tokens are the claims of the access tokens it issued.
func (p *idp) tokens() []jwt.MapClaims {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.issued)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// oauthError answers with an OAuth error (RFC 6749 5.2).
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func (p *idp) metadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": p.issuer, "authorization_endpoint": p.issuer + "/authorize", "token_endpoint": p.issuer + "/token",
		"registration_endpoint": p.issuer + "/register", "jwks_uri": p.issuer + "/jwks.json",
		"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code"},
		"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"none"},
		"scopes_supported": p.scopes, "authorization_response_iss_parameter_supported": true,
		"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"ES256"},
	})
}

func (p *idp) jwks(w http.ResponseWriter, _ *http.Request) {
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	pad := func(b []byte) []byte { return append(make([]byte, 32-len(b)), b...) }
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": "idp-1", "use": "sig",
		"alg": "ES256", "x": b64(pad(p.key.X.Bytes())), "y": b64(pad(p.key.Y.Bytes()))}}})
}

func (p *idp) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
		AuthMethod   string   `json:"token_endpoint_auth_method"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		oauthError(w, http.StatusBadRequest, "invalid_client_metadata", "redirect_uris are required")
		return
	}
	for _, u := range req.RedirectURIs {
		if pu, err := url.Parse(u); err != nil || pu.Scheme != "http" || !strings.HasPrefix(pu.Host, "127.0.0.1:") && !strings.HasPrefix(pu.Host, "localhost:") {
			oauthError(w, http.StatusBadRequest, "invalid_redirect_uri", "a redirect URI must be a loopback http URL: "+u)
			return
		}
	}
	id := randomString()
	p.mu.Lock()
	p.clients[id] = req.RedirectURIs
	p.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"client_id": id, "client_id_issued_at": time.Now().Unix(),
		"redirect_uris": req.RedirectURIs, "token_endpoint_auth_method": "none",
		"grant_types": []string{"authorization_code"}, "response_types": []string{"code"}})
}

// authorize signs the user in at once and redirects back with a code; a request it
// cannot trust (an unknown client or redirect URI) gets an error page, not a redirect.
func (p *idp) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	redirects, known := p.clients[q.Get("client_id")]
	p.mu.Unlock()
	if !known || !slices.Contains(redirects, q.Get("redirect_uri")) {
		http.Error(w, "unknown client or redirect URI", http.StatusBadRequest)
		return
	}
	back, _ := url.Parse(q.Get("redirect_uri"))
	answer := back.Query()
	answer.Set("iss", p.issuer)
	if s := q.Get("state"); s != "" {
		answer.Set("state", s)
	}
	switch {
	case q.Get("response_type") != "code":
		answer.Set("error", "unsupported_response_type")
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		answer.Set("error", "invalid_request")
		answer.Set("error_description", "PKCE with S256 is required")
	case q.Get("resource") == "":
		answer.Set("error", "invalid_target")
		answer.Set("error_description", "a resource indicator is required")
	default:
		code := randomString()
		p.mu.Lock()
		p.codes[code] = idpCode{client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"),
			resource: q.Get("resource"), scope: p.grant(q.Get("scope")), expires: time.Now().Add(time.Minute)}
		p.mu.Unlock()
		answer.Set("code", code)
	}
	back.RawQuery = answer.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// grant is the scopes of requested the user may have.
func (p *idp) grant(requested string) string {
	var out []string
	for _, s := range strings.Fields(requested) {
		if slices.Contains(p.scopes, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

func (p *idp) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "only authorization_code")
		return
	}
	f := r.PostForm
	p.mu.Lock()
	c, ok := p.codes[f.Get("code")]
	delete(p.codes, f.Get("code")) // a code is used once
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case !ok || time.Now().After(c.expires) || c.client != f.Get("client_id") || c.redirect != f.Get("redirect_uri"):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown, used or expired code, or another client's")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "the code verifier does not match the challenge")
		return
	case f.Get("resource") != "" && f.Get("resource") != c.resource:
		oauthError(w, http.StatusBadRequest, "invalid_target", "another resource than the one authorized")
		return
	}
	claims := jwt.MapClaims{"iss": p.issuer, "aud": c.resource, "sub": p.user, "tenant": p.tenant, "client_id": c.client,
		"scope": c.scope, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "idp-1"
	raw, err := tok.SignedString(p.key)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	p.mu.Lock()
	p.issued = append(p.issued, claims)
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": raw, "token_type": "Bearer", "expires_in": 3600, "scope": c.scope})
}

func randomString() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sign issues a token with claims directly (for clients of the gRPC API, which do not
// sign in through the authorization code flow).
func (p *idp) sign(claims jwt.MapClaims) string {
	p.t.Helper()
	claims["iss"] = p.issuer
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "idp-1"
	raw, err := tok.SignedString(p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	return raw
}
