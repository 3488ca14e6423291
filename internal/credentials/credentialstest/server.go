// Package credentialstest is a token endpoint for tests: an OAuth 2.0 Token Exchange
// (RFC 8693) server over real HTTP that checks what a client sends — the grant type, the
// subject token and its type, the audience, the client's authentication — and issues
// signed JWTs for the audience asked, or refuses as RFC 6749 says.
//
// It imports nothing of toolmesh.
package credentialstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Exchange is one exchange the server granted.
type Exchange struct {
	// Subject is the subject token's sub claim (or the token itself when it is no JWT),
	// Audience the audience asked, Token what was issued.
	Subject, Audience, Resource, Scope, Token string
}

// Server is a token endpoint. Set its fields before the first request.
type Server struct {
	// URL is the token endpoint's.
	URL string
	// ClientID and ClientSecret are the only client credentials it takes; Post says the
	// client sends them in the form (client_secret_post), else in a Basic header.
	ClientID, ClientSecret string
	Post                   bool
	// Audiences are the audiences it issues tokens for; another is invalid_target.
	Audiences []string
	// Verify checks a subject token and returns its subject; nil takes any token,
	// reading its sub claim unverified.
	Verify func(token string) (string, error)

	// Calls counts the requests; Key signs the tokens.
	Calls atomic.Int64
	Key   *ecdsa.PrivateKey

	mu        sync.Mutex
	expiresIn time.Duration
	granted   []Exchange
	fail      int    // the status of the next refusals (0: none)
	failBody  string // their body
	failTimes int    // how many (negative: all)
	srv       *httptest.Server
}

// Start starts a server on a loopback port; Close stops it.
func Start(clientID, clientSecret string, audiences ...string) *Server {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	s := &Server{ClientID: clientID, ClientSecret: clientSecret, Audiences: audiences, expiresIn: time.Hour, Key: key}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/oauth2/token"
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// FailNext makes the next n requests (n < 0: all) fail with status and an RFC 6749 error
// body of code and description.
func (s *Server) FailNext(n, status int, code, description string) {
	b, _ := json.Marshal(map[string]string{"error": code, "error_description": description})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail, s.failBody, s.failTimes = status, string(b), n
}

// SetExpiresIn sets the lifetime of the tokens issued next (default 1h).
func (s *Server) SetExpiresIn(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expiresIn = d
}

// Granted are the exchanges granted so far.
func (s *Server) Granted() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.granted)
}

func (s *Server) refuse(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.Calls.Add(1)
	s.mu.Lock()
	if s.failTimes != 0 {
		if s.failTimes > 0 {
			s.failTimes--
		}
		status, body := s.fail, s.failBody
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		return
	}
	s.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		s.refuse(w, http.StatusBadRequest, "invalid_request", "a token request is a form POST")
		return
	}
	if err := r.ParseForm(); err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	id, secret, basic := r.BasicAuth()
	if s.Post {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		basic = false
	} else if r.PostForm.Has("client_secret") {
		basic = false
	}
	if (!s.Post && !basic) || id != s.ClientID || secret != s.ClientSecret {
		w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
		s.refuse(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return
	}
	f := r.PostForm
	switch {
	case f.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
		s.refuse(w, http.StatusBadRequest, "unsupported_grant_type", "only token exchange")
		return
	case f.Get("subject_token") == "":
		s.refuse(w, http.StatusBadRequest, "invalid_request", "no subject_token")
		return
	case f.Get("subject_token_type") != "urn:ietf:params:oauth:token-type:access_token":
		s.refuse(w, http.StatusBadRequest, "invalid_request", "subject_token_type must be an access token")
		return
	case !slices.Contains(s.Audiences, f.Get("audience")):
		s.refuse(w, http.StatusBadRequest, "invalid_target", fmt.Sprintf("audience %q is not served", f.Get("audience")))
		return
	}
	sub, err := s.subject(f.Get("subject_token"))
	if err != nil {
		s.refuse(w, http.StatusBadRequest, "invalid_grant", "the subject token is not valid: "+err.Error())
		return
	}
	s.issue(w, Exchange{Subject: sub, Audience: f.Get("audience"), Resource: f.Get("resource"), Scope: f.Get("scope")})
}

func (s *Server) subject(tok string) (string, error) {
	if s.Verify != nil {
		return s.Verify(tok)
	}
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		return tok, nil //nolint:nilerr // not a JWT: the token names itself
	}
	sub, _ := claims["sub"].(string)
	return sub, nil
}

func (s *Server) issue(w http.ResponseWriter, x Exchange) {
	now := time.Now()
	n := s.Calls.Load()
	s.mu.Lock()
	life := s.expiresIn
	s.mu.Unlock()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": s.URL, "sub": x.Subject, "aud": x.Audience, "iat": now.Unix(), "exp": now.Add(life).Unix(),
		"jti": fmt.Sprintf("x-%d-%d", now.UnixNano(), n), "act": map[string]string{"sub": s.ClientID}, "scope": x.Scope,
	}).SignedString(s.Key)
	if err != nil {
		s.refuse(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	x.Token = tok
	s.mu.Lock()
	s.granted = append(s.granted, x)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": tok, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
		"token_type": "Bearer", "expires_in": int(life / time.Second),
	})
}
