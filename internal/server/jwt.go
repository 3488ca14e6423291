package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolmesh/toolmesh/internal/config"
)

// tokens verifies clients' bearer tokens against the key set of auth.jwt: a file
// (jwks_file) or a URL (jwks_url).
type tokens struct {
	cfg  config.JWT
	keys keySource
}

// keySource is where the verification keys come from.
type keySource interface {
	// current is the key set, by kid ("" for a key without one).
	current() map[string]any
	// lacking is the key set to try again with, for a token of the expected issuer whose
	// kid current lacks: the identity provider may have rotated its keys.
	lacking(kid string) map[string]any
}

// newTokens reads the key set (a URL's is fetched: an error if it cannot be, so that the
// orchestrator does not start refusing every token).
func newTokens(cfg config.JWT, log *slog.Logger) (*tokens, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &tokens{cfg: cfg}
	if cfg.TenantClaim == "" {
		t.cfg.TenantClaim = "tenant"
	}
	var err error
	if cfg.JWKSURL != "" {
		t.keys, err = newRemoteKeys(cfg, log)
	} else {
		t.keys, err = newFileKeys(cfg.JWKSFile, log)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// maxJWKSBytes bounds the key set, file or response.
const maxJWKSBytes = 1 << 20

// fileKeys is a key set file, read again when it changes (checked at most once a
// second).
type fileKeys struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	keys    map[string]any
	mod     time.Time
	checked time.Time
}

func newFileKeys(path string, log *slog.Logger) (*fileKeys, error) {
	f := &fileKeys{path: path, log: log}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fileKeys) load() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("auth.jwt.jwks_file: %w", err)
	}
	if fi.Size() > maxJWKSBytes {
		return fmt.Errorf("auth.jwt.jwks_file: %s is %d bytes; the limit is %d", f.path, fi.Size(), maxJWKSBytes)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("auth.jwt.jwks_file: %w", err)
	}
	keys, skipped, err := parseJWKSSkipping(b)
	if err != nil {
		return fmt.Errorf("auth.jwt.jwks_file %s: %w", f.path, err)
	}
	if len(skipped) > 0 {
		f.log.Warn("keys of auth.jwt.jwks_file skipped: tokens they signed are refused", "file", f.path, "skipped", strings.Join(skipped, "; "))
	}
	f.keys, f.mod = keys, fi.ModTime()
	return nil
}

// current reloads the key set when its file changed (a file caught half-written keeps
// the old keys).
func (f *fileKeys) current() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) >= time.Second {
		f.checked = time.Now()
		if fi, err := os.Stat(f.path); err == nil && !fi.ModTime().Equal(f.mod) {
			_ = f.load()
		}
	}
	return f.keys
}

// lacking is the current set: a file is already checked once a second.
func (f *fileKeys) lacking(string) map[string]any { return f.current() }

// maxTokenBytes bounds a bearer token.
const maxTokenBytes = 16 << 10

// verify checks a token (signature, expiry, issuer, the configured audience) and
// returns its tenant claim and who it names: its issuer and subject.
func (t *tokens) verify(raw string) (tenant, who string, _ error) {
	v, err := t.verifyFor(raw, t.cfg.Audience)
	return v.tenant, v.who, err
}

// verified is what a valid token says: its tenant, who it names (issuer#subject),
// its scopes (the "scope" claim, space-separated, or an "scp" claim, a list or
// space-separated; sorted, one space between) and its claims (a JSON object, for call
// policies).
type verified struct{ tenant, who, scopes, claims string }

// verifyFor is verify with another audience the token must be for: the MCP endpoint's
// resource (mcp_serve.resource).
func (t *tokens) verifyFor(raw, audience string) (verified, error) {
	if len(raw) > maxTokenBytes {
		return verified{}, fmt.Errorf("the bearer token is %d bytes; the limit is %d", len(raw), maxTokenBytes)
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		if k, ok := keyOf(t.keys.current(), kid); ok {
			return k, nil
		}
		// Only a token that claims the expected issuer may send for the keys again (the
		// claims are not verified yet, but a stranger's token does not get that far).
		if iss, _ := claims["iss"].(string); iss == t.cfg.Issuer {
			if k, ok := keyOf(t.keys.lacking(kid), kid); ok {
				return k, nil
			}
		}
		return nil, fmt.Errorf("no key %q in the key set", kid)
	}, jwt.WithIssuer(t.cfg.Issuer), jwt.WithAudience(audience), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384"}), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return verified{}, fmt.Errorf("the bearer token is not valid: %w", err)
	}
	tenant, _ := claims[t.cfg.TenantClaim].(string)
	if tenant == "" {
		return verified{}, fmt.Errorf("the bearer token has no %q claim", t.cfg.TenantClaim)
	}
	// Who the token names: its subject, which a session, a policy and the audit log hold
	// it to (RFC 9068 requires one); without one, every such token would be one caller.
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return verified{}, errors.New(`the bearer token has no "sub" claim (a string naming whom it was issued to)`)
	}
	js, _ := json.Marshal(claims)
	return verified{tenant: tenant, who: t.cfg.Issuer + "#" + sub, scopes: scopesOf(claims), claims: string(js)}, nil
}

// scopesOf is a token's scopes, sorted and joined by one space: its "scope" claim (a
// space-separated string) or its "scp" claim (a list).
func scopesOf(claims jwt.MapClaims) string {
	var out []string
	if s, ok := claims["scope"].(string); ok {
		out = strings.Fields(s)
	} else if s, ok := claims["scp"].(string); ok { // as Microsoft Entra ID issues it
		out = strings.Fields(s)
	} else if list, ok := claims["scp"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), " ")
}

// keyOf is the key of kid, or the only key of a set when the token names none.
func keyOf(keys map[string]any, kid string) (any, bool) {
	if k, ok := keys[kid]; ok {
		return k, true
	}
	if len(keys) == 1 && kid == "" {
		for _, k := range keys {
			return k, true
		}
	}
	return nil, false
}

// parseJWKS reads the RSA and EC signing keys of a JSON Web Key Set. A key it cannot use
// (another type, such as an identity provider's new Ed25519 key; another curve; a small
// or malformed one; a kid already taken) is skipped, so that the others go on verifying
// tokens; a set with no key it can use is refused, with the reason of each.
func parseJWKS(b []byte) (map[string]any, error) {
	keys, _, err := parseJWKSSkipping(b)
	return keys, err
}

// parseJWKSSkipping is parseJWKS that also says which keys it skipped, and why (for the
// log: a token signed by a skipped key is refused with no word of it otherwise).
func parseJWKSSkipping(b []byte) (keys map[string]any, skipped []string, _ error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, nil, errors.New("the key set has no keys")
	}
	keys = map[string]any{}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if _, dup := keys[k.Kid]; dup {
			skipped = append(skipped, fmt.Sprintf("key %d: kid %q appears twice", i, k.Kid))
			continue
		}
		key, err := k.key()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		keys[k.Kid] = key
	}
	if len(keys) == 0 {
		if len(skipped) > 0 {
			return nil, skipped, fmt.Errorf("the key set has no signing keys it can use: %s", strings.Join(skipped, "; "))
		}
		return nil, nil, errors.New("the key set has no signing keys")
	}
	return keys, skipped, nil
}

// jwk is a JSON Web Key as parseJWKS reads it.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// key is k's public key: RSA (n, e) or EC (crv, x, y).
func (k jwk) key() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64Number(k.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64Number(k.E)
		if err != nil || !e.IsInt64() {
			return nil, errors.New("bad exponent")
		}
		if n.BitLen() < 2048 {
			return nil, fmt.Errorf("an RSA key of %d bits; at least 2048", n.BitLen())
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		default:
			return nil, fmt.Errorf("curve %q (P-256 or P-384)", k.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, errX := base64.RawURLEncoding.DecodeString(k.X)
		y, errY := base64.RawURLEncoding.DecodeString(k.Y)
		if errX != nil || errY != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("x and y must be %d-byte base64url coordinates", size)
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("the point is not on %s: %w", k.Crv, err)
		}
		return pub, nil
	default:
		return nil, fmt.Errorf("key type %q (RSA or EC)", k.Kty)
	}
}

// b64Number is the big-endian number of base64url s.
func b64Number(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("bad base64url number %q", s)
	}
	return new(big.Int).SetBytes(b), nil
}
