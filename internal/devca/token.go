package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// SigningKey is an EC P-256 key that signs development bearer tokens (ES256), which an
// orchestrator verifies against the key set JWKS makes (auth.jwt): for development
// (toolmesh certs, toolmesh token) and tests. Production tokens come from the identity
// provider.
type SigningKey struct {
	// Kid names the key in its key set and in the tokens it signs: its JWK thumbprint
	// (RFC 7638), so that the same key always has the same kid.
	Kid string
	key *ecdsa.PrivateKey
}

// NewSigningKey makes a signing key.
func NewSigningKey() (*SigningKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return signingKey(k)
}

// ReadSigningKey reads a P-256 private key from a PEM file (PKCS #8 or SEC 1).
func ReadSigningKey(path string) (*SigningKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the signing key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("the signing key %s is not PEM", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("the signing key %s is a PEM %q block, not a private key", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("the signing key %s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("the signing key %s is not an EC P-256 key", path)
	}
	return signingKey(ec)
}

func signingKey(k *ecdsa.PrivateKey) (*SigningKey, error) {
	x, y, err := coordinates(&k.PublicKey)
	if err != nil {
		return nil, err
	}
	// The thumbprint hashes the required members in lexical order, without whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"P-256","kty":"EC","x":"` + x + `","y":"` + y + `"}`))
	return &SigningKey{Kid: base64.RawURLEncoding.EncodeToString(sum[:]), key: k}, nil
}

// coordinates are the base64url x and y of a P-256 public key.
func coordinates(pub *ecdsa.PublicKey) (x, y string, _ error) {
	pt, err := pub.Bytes() // 0x04 || x || y
	if err != nil {
		return "", "", fmt.Errorf("the signing key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(pt[1:33]), base64.RawURLEncoding.EncodeToString(pt[33:]), nil
}

// JWKS is the JSON Web Key Set of the key's public half, named by Kid.
func (k *SigningKey) JWKS() []byte {
	x, y, _ := coordinates(&k.key.PublicKey) // the key was checked when made
	b, _ := json.MarshalIndent(map[string]any{"keys": []map[string]string{
		{"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": k.Kid, "x": x, "y": y},
	}}, "", "  ")
	return append(b, '\n')
}

// Write writes the key as dir/jwt-signing-key.pem (PKCS #8, readable by its owner only)
// and its key set as dir/jwks.json, each replaced by a rename, and returns their paths.
func (k *SigningKey) Write(dir string) (keyFile, jwksFile string, _ error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.key)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	keyFile, jwksFile = filepath.Join(dir, "jwt-signing-key.pem"), filepath.Join(dir, "jwks.json")
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := writeFile(jwksFile, k.JWKS(), 0o644); err != nil {
		return "", "", err
	}
	return keyFile, jwksFile, nil
}

// TokenClaims are what a development token says.
type TokenClaims struct {
	Issuer, Audience, Subject string
	// TenantClaim names the claim Tenant goes in ("tenant" when empty), as
	// auth.jwt.tenant_claim does; no such claim when Tenant is empty.
	TenantClaim, Tenant string
	// IssuedAt is when the token starts being valid (now when zero); it expires TTL
	// later.
	IssuedAt time.Time
	TTL      time.Duration
}

// Sign returns a token of c signed with the key (ES256, its kid in the header).
func (k *SigningKey) Sign(c TokenClaims) (string, error) {
	if c.TTL <= 0 {
		return "", errors.New("a token needs a positive lifetime")
	}
	if c.Issuer == "" || c.Audience == "" {
		return "", errors.New("a token needs an issuer and an audience")
	}
	iat := c.IssuedAt
	if iat.IsZero() {
		iat = time.Now()
	}
	claims := jwt.MapClaims{"iss": c.Issuer, "aud": c.Audience, "iat": iat.Unix(), "nbf": iat.Unix(), "exp": iat.Add(c.TTL).Unix()}
	if c.Subject != "" {
		claims["sub"] = c.Subject
	}
	if c.Tenant != "" {
		name := c.TenantClaim
		if name == "" {
			name = "tenant"
		}
		if _, taken := claims[name]; taken {
			return "", fmt.Errorf("the tenant claim %q is a registered claim", name)
		}
		claims[name] = c.Tenant
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = k.Kid
	return tok.SignedString(k.key)
}
