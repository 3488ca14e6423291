package trust_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// TestVerifyWantsAnX509SVID: a peer certificate that chains to the bundle and carries a
// SPIFFE ID is still refused when it is not an X509-SVID — a CA certificate, one that may
// sign certificates, one with two SPIFFE IDs — and for the wrong usage.
func TestVerifyWantsAnX509SVID(t *testing.T) {
	ca, err := devca.NewCA("toolmesh.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ok, err := ca.Issue("/worker/a", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Write(dir, "a", ok)
	if err != nil {
		t.Fatal(err)
	}
	s, err := trust.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(mod func(*x509.Certificate)) [][]byte {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse("spiffe://toolmesh.test/worker/b")
		tmpl := &x509.Certificate{SerialNumber: devca.Serial(), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{u}}
		mod(tmpl)
		der, err := ca.Sign(tmpl, &key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return [][]byte{der}
	}
	if id, err := trust.Verify(s, issue(func(*x509.Certificate) {}), x509.ExtKeyUsageClientAuth); err != nil || id.String() != "spiffe://toolmesh.test/worker/b" {
		t.Fatalf("an X509-SVID: %v, %v", id, err)
	}
	for _, tc := range []struct {
		name  string
		mod   func(*x509.Certificate)
		usage x509.ExtKeyUsage
		want  string
	}{
		{"a CA certificate", func(c *x509.Certificate) {
			c.IsCA, c.BasicConstraintsValid, c.KeyUsage = true, true, x509.KeyUsageDigitalSignature|x509.KeyUsageCertSign
		}, x509.ExtKeyUsageClientAuth, "CA"},
		{"a certificate signer", func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageCertSign }, x509.ExtKeyUsageClientAuth, "KeyCertSign"},
		{"two SPIFFE IDs", func(c *x509.Certificate) {
			u, _ := url.Parse("spiffe://toolmesh.test/worker/c")
			c.URIs = append(c.URIs, u)
		}, x509.ExtKeyUsageClientAuth, "URI SAN"},
		{"a client certificate serving", func(*x509.Certificate) {}, x509.ExtKeyUsageServerAuth, "usage"},
	} {
		if _, err := trust.Verify(s, issue(tc.mod), tc.usage); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: verify = %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}

// TestVerifyBindsCAsToTheirTrustDomain: in a bundle holding two domains' CAs, each CA
// vouches for its own domain only; a CA that names no domain vouches for any.
func TestVerifyBindsCAsToTheirTrustDomain(t *testing.T) {
	own, err := devca.NewCA("own.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	partner, err := devca.NewCA("partner.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	leaf, err := own.Issue("/orchestrator", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := own.Write(dir, "me", leaf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.CA, append(own.CertPEM(), partner.CertPEM()...), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := trust.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain := func(ca *devca.CA, path string) [][]byte {
		l, err := ca.Issue(path, time.Now().Add(-time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(l.CertPEM)
		return [][]byte{b.Bytes}
	}
	if _, err := trust.Verify(s, chain(partner, "/worker/x"), x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("the partner CA's own identity: %v", err)
	}
	if _, err := trust.Verify(s, chain(own, "/worker/math"), x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("our CA's identity: %v", err)
	}
	// The partner CA minting an identity of our domain.
	forged := issueIn(t, partner, "spiffe://own.test/worker/math")
	if _, err := trust.Verify(s, forged, x509.ExtKeyUsageClientAuth); err == nil {
		t.Error("the partner CA vouched for an identity in our trust domain")
	}
}

// issueIn has ca sign a leaf for id, whatever ca's own trust domain.
func issueIn(t *testing.T, ca *devca.CA, id string) [][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(id)
	tmpl := &x509.Certificate{SerialNumber: devca.Serial(), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{u}}
	der, err := ca.Sign(tmpl, &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{der}
}
