package trust

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// CallTokenHeader is the metadata key of the token the orchestrator mints for each call
// it sends a worker.
const CallTokenHeader = "tm-call-token"

// CallClaims are what a call token vouches for: which worker (its audience) may run which
// tool for which run, for which tenant (when the run's tenant was verified), until when
// (no later than the call's deadline).
type CallClaims struct {
	Tool   string `json:"tool"`
	RunID  string `json:"run_id,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	jwt.RegisteredClaims
}

// A call token is reused for the calls of one run to one tool on one worker while it
// has at least tokenReuseMargin left and expires no later than the call's deadline:
// signing (and verifying) a token per call cost more than the rest of the call.
const (
	tokenReuseMargin = 2 * time.Second
	maxCachedTokens  = 4096
)

type tokenKey struct{ audience, tool, run, tenant string }

type cachedToken struct {
	raw string
	exp time.Time
}

// tokenCache holds minted or verified tokens, bounded: when full it is emptied.
type tokenCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (c *tokenCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *tokenCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedTokens {
		c.m = make(map[K]V)
	}
	c.m[k] = v
}

func method(key any) (jwt.SigningMethod, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey, *ecdsa.PublicKey:
		var bits int
		if p, ok := k.(*ecdsa.PrivateKey); ok {
			bits = p.Curve.Params().BitSize
		} else {
			bits = k.(*ecdsa.PublicKey).Curve.Params().BitSize
		}
		switch bits {
		case 256:
			return jwt.SigningMethodES256, nil
		case 384:
			return jwt.SigningMethodES384, nil
		case 521:
			return jwt.SigningMethodES512, nil
		}
	case *rsa.PrivateKey, *rsa.PublicKey:
		return jwt.SigningMethodPS256, nil
	case ed25519.PrivateKey, ed25519.PublicKey:
		return jwt.SigningMethodEdDSA, nil
	}
	return nil, fmt.Errorf("trust: a %T key cannot sign call tokens", key)
}

// MintCallToken signs claims for the worker audience with the current certificate's
// key: the worker verifies it with the certificate the handshake showed it. It expires at
// deadline; a token minted for an earlier call of the same run, tool and worker is given
// again while it expires no later than deadline and not within two seconds.
func (s *Source) MintCallToken(audience string, claims CallClaims, deadline time.Time) (string, error) {
	k := tokenKey{audience, claims.Tool, claims.RunID, claims.Tenant}
	now := time.Now()
	if c, ok := s.minted.get(k); ok && !c.exp.After(deadline) && c.exp.Sub(now) >= tokenReuseMargin {
		return c.raw, nil
	}
	raw, err := s.mint(audience, claims, deadline)
	if err == nil {
		s.minted.put(k, cachedToken{raw: raw, exp: deadline.Truncate(time.Second)})
	}
	return raw, err
}

func (s *Source) mint(audience string, claims CallClaims, deadline time.Time) (string, error) {
	cert, _ := s.current()
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return "", errors.New("trust: the certificate's key cannot sign")
	}
	m, err := method(signer)
	if err != nil {
		return "", err
	}
	now := time.Now()
	claims.Issuer = s.ID().String()
	claims.Audience = jwt.ClaimStrings{audience}
	claims.IssuedAt = jwt.NewNumericDate(now)
	claims.ExpiresAt = jwt.NewNumericDate(deadline)
	tok := jwt.NewWithClaims(m, claims)
	// The signing certificate travels with the token: a worker whose connection was
	// made before this orchestrator's certificate rotated still verifies it, by the
	// identity both certificates carry.
	tok.Header["x5c"] = []string{base64.StdEncoding.EncodeToString(cert.Leaf.Raw)}
	return tok.SignedString(signer)
}

// verified are tokens VerifyCallToken accepted, by token and the certificate that
// presented them, until they expire.
var verified tokenCache[verifiedKey, CallClaims]

type verifiedKey struct {
	raw  string
	cert [32]byte
}

// VerifyCallToken checks a call token: signed by the key of the certificate it carries,
// which must chain to this Source's CA bundle and carry the identity of the caller (the
// certificate the TLS handshake of ctx verified); for audience, for tool, not expired.
// It returns the claims. A token it accepted from the same caller's certificate is not
// verified again until it expires.
func (s *Source) VerifyCallToken(ctx context.Context, raw, audience, tool string) (CallClaims, error) {
	var claims CallClaims
	if raw == "" {
		return claims, errors.New("the call carries no call token")
	}
	cert, ok := PeerCert(ctx)
	if !ok {
		return claims, errors.New("the call came without a certificate")
	}
	vk := verifiedKey{raw: raw, cert: sha256.Sum256(cert.Raw)}
	if c, ok := verified.get(vk); ok && c.ExpiresAt != nil && time.Now().Before(c.ExpiresAt.Time) &&
		slices.Contains(c.Audience, audience) && c.Tool == tool {
		return c, nil
	}
	issuer, ok := PeerID(ctx)
	if !ok {
		return claims, errors.New("the caller's certificate has no SPIFFE ID")
	}
	_, err := jwt.ParseWithClaims(raw, &claims, func(tok *jwt.Token) (any, error) {
		chain, _ := tok.Header["x5c"].([]any)
		if len(chain) != 1 {
			return nil, errors.New("the token carries no signing certificate")
		}
		b64, _ := chain[0].(string)
		der, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, errors.New("the token's signing certificate is not base64")
		}
		id, err := s.verify([][]byte{der}, x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, fmt.Errorf("the token's signing certificate: %w", err)
		}
		if id != issuer {
			return nil, fmt.Errorf("the token was signed by %s, not by the caller %s", id, issuer)
		}
		signing, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		want, err := method(signing.PublicKey)
		if err != nil {
			return nil, err
		}
		if tok.Method.Alg() != want.Alg() {
			return nil, fmt.Errorf("the token is signed with %s; its certificate's key signs %s", tok.Method.Alg(), want.Alg())
		}
		return signing.PublicKey, nil
	}, jwt.WithValidMethods([]string{"ES256", "ES384", "ES512", "PS256", "EdDSA"}), jwt.WithAudience(audience), jwt.WithIssuer(issuer.String()),
		jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	if err != nil {
		return claims, fmt.Errorf("the call token is not valid: %w", err)
	}
	if claims.Tool != tool {
		return claims, fmt.Errorf("the call token is for tool %q, not %q", claims.Tool, tool)
	}
	verified.put(vk, claims)
	return claims, nil
}
