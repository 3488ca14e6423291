package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/logtest"
)

// A key set is read strictly: what it cannot use is refused with the reason.
func TestParseJWKS(t *testing.T) {
	for _, tc := range []struct{ name, js, want string }{
		{"not JSON", `{`, "not a JSON Web Key Set"},
		{"no keys", `{"keys":[]}`, "no keys"},
		{"unknown type", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, `key type "oct"`},
		{"small RSA key", `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`, "at least 2048"},
		{"unknown curve", `{"keys":[{"kty":"EC","crv":"P-521","x":"AQ","y":"AQ"}]}`, `curve "P-521"`},
		{"short coordinates", `{"keys":[{"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}]}`, "32-byte base64url coordinates"},
		{"off the curve", `{"keys":[{"kty":"EC","crv":"P-256","x":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`, "not on P-256"},
		{"bad base64", `{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`, "bad base64url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseJWKS([]byte(tc.js))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Encryption keys are skipped; a set of nothing else has nothing to verify with.
	if _, err := parseJWKS([]byte(`{"keys":[{"kty":"oct","use":"enc"}]}`)); err == nil || !strings.Contains(err.Error(), "no signing keys") {
		t.Errorf("a set with an encryption key only: %v", err)
	}
}

// TestJWKSSkipsKeysItCannotUse: a key it cannot use (an identity provider's new
// Ed25519 key, another curve, a small RSA key, a kid taken twice) is skipped, and the
// others go on verifying; the whole set was refused for it, and tokens of its good keys
// with it (an outage once the provider added an EdDSA key).
func TestJWKSSkipsKeysItCannotUse(t *testing.T) {
	good := newTestKey(t, "good")
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(jwksOf(t, good), &set); err != nil {
		t.Fatal(err)
	}
	set.Keys = append([]map[string]any{
		{"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
		{"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AQ", "y": "AQ"},
		{"kty": "RSA", "kid": "small", "n": "AQAB", "e": "AQAB"},
	}, set.Keys...)
	set.Keys = append(set.Keys, map[string]any{"kty": "EC", "crv": "P-256", "kid": "good", "x": "AQ", "y": "AQ"})
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := parseJWKS(b)
	if err != nil {
		t.Fatalf("parseJWKS: %v", err)
	}
	if _, ok := keys["good"]; !ok || len(keys) != 1 {
		t.Errorf("keys %v, want the good one alone", keys)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged logtest.Buffer
	ts, err := newTokens(config.JWT{JWKSFile: path, Issuer: "i", Audience: "a"}, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if tn, _, err := ts.verify(good.token(t)); err != nil || tn != "acme" {
		t.Errorf("a token of the good key: %q, %v", tn, err)
	}
	// What was skipped is logged: a token signed by it is refused, and the log says why.
	for _, want := range []string{`key type \"OKP\"`, `kid \"good\" appears twice`, "at least 2048"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log does not say %s: %s", want, logged.String())
		}
	}
}

// A key set whose file is replaced is read again: tokens of the new key verify, those
// of the old one no longer do.
func TestTokensFollowTheKeySetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pt, err := k.PublicKey.Bytes() // the uncompressed point: 0x04 || x || y
		if err != nil {
			t.Fatal(err)
		}
		x, y := pt[1:33], pt[33:]
		js := `{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":"` + base64.RawURLEncoding.EncodeToString(x) + `","y":"` + base64.RawURLEncoding.EncodeToString(y) + `"}]}`
		if err := os.WriteFile(path, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		return k
	}
	sign := func(k *ecdsa.PrivateKey) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "u", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k"
		raw, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	old := newKey()
	ts, err := newTokens(config.JWT{JWKSFile: path, Issuer: "i", Audience: "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tn, _, err := ts.verify(sign(old)); err != nil || tn != "acme" {
		t.Fatalf("a token of the key set's key: %q, %v", tn, err)
	}
	cur := newKey()
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	f := ts.keys.(*fileKeys)
	f.mu.Lock()
	f.checked = time.Time{} // as if a second had passed
	f.mu.Unlock()
	if _, _, err := ts.verify(sign(cur)); err != nil {
		t.Errorf("a token of the new key: %v", err)
	}
	if _, _, err := ts.verify(sign(old)); err == nil {
		t.Error("a token of the replaced key still verifies")
	}
}

// TestTokenClaims: a token names its subject (a token without a string "sub" is refused:
// every such token was the same caller, one client using another's MCP session); its
// scopes are "scope" or "scp", a list or space-separated (as Microsoft Entra ID issues
// it; such a token's scopes were ignored).
func TestTokenClaims(t *testing.T) {
	k := newTestKey(t, "k")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwksOf(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := newTokens(config.JWT{JWKSFile: path, Issuer: "i", Audience: "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(extra jwt.MapClaims) string {
		claims := jwt.MapClaims{"iss": "i", "aud": "a", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}
		maps.Copy(claims, extra)
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tok.Header["kid"] = "k"
		raw, err := tok.SignedString(k.key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name        string
		claims      jwt.MapClaims
		who, scopes string
		wantRefusal string
	}{
		{"a subject", jwt.MapClaims{"sub": "u1"}, "i#u1", "", ""},
		{"no subject", jwt.MapClaims{"client_id": "c"}, "", "", `no "sub" claim`},
		{"an empty subject", jwt.MapClaims{"sub": ""}, "", "", `no "sub" claim`},
		{"a numeric subject", jwt.MapClaims{"sub": 12345}, "", "", `no "sub" claim`},
		{"scope", jwt.MapClaims{"sub": "u1", "scope": "b a"}, "i#u1", "a b", ""},
		{"scp, a list", jwt.MapClaims{"sub": "u1", "scp": []string{"b", "a"}}, "i#u1", "a b", ""},
		{"scp, space-separated", jwt.MapClaims{"sub": "u1", "scp": "b a a"}, "i#u1", "a b", ""},
		{"issued now", jwt.MapClaims{"sub": "u1", "iat": time.Now().Unix()}, "i#u1", "", ""},
		{"issued in an hour", jwt.MapClaims{"sub": "u1", "iat": time.Now().Add(time.Hour).Unix()}, "", "", "before issued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ts.verifyFor(sign(tc.claims), "a")
			if tc.wantRefusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantRefusal) {
					t.Errorf("err = %v, want a refusal: %s", err, tc.wantRefusal)
				}
				return
			}
			if err != nil || v.who != tc.who || v.scopes != tc.scopes {
				t.Errorf("who %q, scopes %q, err %v; want %q, %q", v.who, v.scopes, err, tc.who, tc.scopes)
			}
		})
	}
}

// TestJWTAloneRequiresAToken: with auth.jwt and neither TLS nor tenants, a call without a
// token (nor a certificate) is refused as UNAUTHENTICATED, on the API and on the MCP
// endpoint; one with a token is served as its subject. It was served as nobody: an
// operator who set auth.jwt (what toolmesh certs prints) protected nothing, and call
// policies on claims and scopes saw an anonymous caller.
func TestJWTAloneRequiresAToken(t *testing.T) {
	k := newTestKey(t, "k")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwksOf(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Auth.JWT = config.JWT{JWKSFile: path, Issuer: "i", Audience: "a", TenantClaim: "tenant"}
	a, err := newAuthorizer(cfg, slog.New(slog.DiscardHandler), func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "u1", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k"
	raw, err := tok.SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"/toolmesh.v1.OrchestratorService/ListRuns", "MCP POST"} {
		if _, err := a.clientFor(spiffeid.ID{}, false, "", method, true, ""); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a token: %v; want UNAUTHENTICATED", method, err)
		}
		if p, err := a.clientFor(spiffeid.ID{}, false, raw, method, true, ""); err != nil || p.who != "i#u1" {
			t.Errorf("%s with a token: %+v, %v; want it served as i#u1", method, p, err)
		}
	}
}
