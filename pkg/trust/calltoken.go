package trust

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// CallTokenHeader is the metadata key of the token the orchestrator mints for each call
// it sends a worker.
const CallTokenHeader = "tm-call-token"

// CallClaims are what a call token vouches for: which worker (its audience) may run which
// tool for which run, for which tenant (when the run's tenant was verified), until when
// (the call's deadline).
type CallClaims struct {
	Tool   string `json:"tool"`
	RunID  string `json:"run_id,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	jwt.RegisteredClaims
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
// key: the worker verifies it with the certificate the handshake showed it.
func (s *Source) MintCallToken(audience string, claims CallClaims, deadline time.Time) (string, error) {
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
	return jwt.NewWithClaims(m, claims).SignedString(signer)
}

// VerifyCallToken checks a call token against the caller's certificate (the one the TLS
// handshake of ctx verified): signed by its key, issued by its identity, for audience,
// for tool, not expired. It returns the claims.
func VerifyCallToken(ctx context.Context, raw, audience, tool string) (CallClaims, error) {
	var claims CallClaims
	if raw == "" {
		return claims, errors.New("the call carries no call token")
	}
	cert, ok := PeerCert(ctx)
	if !ok {
		return claims, errors.New("the call came without a certificate")
	}
	issuer, ok := PeerID(ctx)
	if !ok {
		return claims, errors.New("the caller's certificate has no SPIFFE ID")
	}
	want, err := method(cert.PublicKey)
	if err != nil {
		return claims, err
	}
	_, err = jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return cert.PublicKey, nil },
		jwt.WithValidMethods([]string{want.Alg()}), jwt.WithAudience(audience), jwt.WithIssuer(issuer.String()),
		jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	if err != nil {
		return claims, fmt.Errorf("the call token is not valid: %w", err)
	}
	if claims.Tool != tool {
		return claims, fmt.Errorf("the call token is for tool %q, not %q", claims.Tool, tool)
	}
	return claims, nil
}
