package devca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolmesh/toolmesh/internal/devca"
)

// publicKeyOf reads the only key of a key set, checking its members.
func publicKeyOf(t *testing.T, jwks []byte) (string, *ecdsa.PublicKey) {
	t.Helper()
	var set struct {
		Keys []struct{ Kty, Crv, Use, Alg, Kid, X, Y string } `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 {
		t.Fatalf("%d keys in %s", len(set.Keys), jwks)
	}
	k := set.Keys[0]
	if k.Kty != "EC" || k.Crv != "P-256" || k.Use != "sig" || k.Alg != "ES256" || k.Kid == "" {
		t.Fatalf("key %+v", k)
	}
	x, errX := base64.RawURLEncoding.DecodeString(k.X)
	y, errY := base64.RawURLEncoding.DecodeString(k.Y)
	if errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
		t.Fatalf("coordinates %q, %q", k.X, k.Y)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		t.Fatal(err)
	}
	return k.Kid, pub
}

// A signing key written and read again keeps its kid; its tokens verify against its key
// set, carry the claims asked for and expire when asked.
func TestSigningKey(t *testing.T) {
	dir := t.TempDir()
	k, err := devca.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile, jwksFile, err := k.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 || filepath.Base(keyFile) != "jwt-signing-key.pem" {
		t.Errorf("the key file %s: %v, %v", keyFile, fi.Mode(), err)
	}
	jwks, err := os.ReadFile(jwksFile)
	if err != nil {
		t.Fatal(err)
	}
	kid, pub := publicKeyOf(t, jwks)
	again, err := devca.ReadSigningKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if again.Kid != k.Kid || kid != k.Kid {
		t.Errorf("kids %q (read again) and %q (key set), want %q", again.Kid, kid, k.Kid)
	}
	iat := time.Now().Truncate(time.Second)
	raw, err := again.Sign(devca.TokenClaims{Issuer: "https://toolmesh.local/dev", Audience: "toolmesh", Subject: "dev", Tenant: "acme", TenantClaim: "org", IssuedAt: iat, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuer("https://toolmesh.local/dev"), jwt.WithAudience("toolmesh"), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatal(err)
	}
	if tok.Header["kid"] != k.Kid || claims["org"] != "acme" || claims["sub"] != "dev" || claims["exp"] != float64(iat.Add(time.Hour).Unix()) {
		t.Errorf("header %v, claims %v", tok.Header, claims)
	}
	expired, err := k.Sign(devca.TokenClaims{Issuer: "i", Audience: "a", IssuedAt: time.Now().Add(-2 * time.Hour), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwt.Parse(expired, func(*jwt.Token) (any, error) { return pub, nil }); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a token past its lifetime: %v", err)
	}
	for _, c := range []devca.TokenClaims{{Issuer: "i", Audience: "a"}, {Audience: "a", TTL: time.Hour}, {Issuer: "i", TTL: time.Hour}, {Issuer: "i", Audience: "a", TTL: time.Hour, Tenant: "t", TenantClaim: "exp"}} {
		if _, err := k.Sign(c); err == nil {
			t.Errorf("Sign(%+v) signed", c)
		}
	}
}

// ReadSigningKey takes PKCS #8 and SEC 1 P-256 keys and refuses anything else, saying
// what it found.
func TestReadSigningKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	sec1, _ := x509.MarshalECPrivateKey(p256)
	pk8, _ := x509.MarshalPKCS8PrivateKey(p384)
	if _, err := devca.ReadSigningKey(write("sec1.pem", "EC PRIVATE KEY", sec1)); err != nil {
		t.Errorf("a SEC 1 key: %v", err)
	}
	for _, tc := range []struct{ path, want string }{
		{write("p384.pem", "PRIVATE KEY", pk8), "not an EC P-256 key"},
		{write("cert.pem", "CERTIFICATE", []byte("x")), `a PEM "CERTIFICATE" block`},
		{write("junk.pem", "PRIVATE KEY", []byte("x")), "junk.pem"},
		{filepath.Join(dir, "none.pem"), "no such file"},
	} {
		if _, err := devca.ReadSigningKey(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadSigningKey(%s): %v, want it to contain %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "text.pem"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devca.ReadSigningKey(filepath.Join(dir, "text.pem")); err == nil || !strings.Contains(err.Error(), "is not PEM") {
		t.Errorf("a file that is not PEM: %v", err)
	}
}

// A development signing key and its key set: the orchestrator verifies its tokens with
// auth.jwt.jwks_file pointing at jwks.json.
func ExampleSigningKey() {
	k, err := devca.NewSigningKey()
	if err != nil {
		panic(err)
	}
	raw, err := k.Sign(devca.TokenClaims{Issuer: "https://toolmesh.local/dev", Audience: "toolmesh", Subject: "dev", Tenant: "acme", TTL: time.Hour})
	if err != nil {
		panic(err)
	}
	tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if err != nil {
		panic(err)
	}
	var set struct {
		Keys []struct{ Kid string } `json:"keys"`
	}
	if err := json.Unmarshal(k.JWKS(), &set); err != nil {
		panic(err)
	}
	fmt.Println(tok.Method.Alg(), tok.Header["kid"] == set.Keys[0].Kid, tok.Claims.(jwt.MapClaims)["tenant"])
	// Output: ES256 true acme
}
