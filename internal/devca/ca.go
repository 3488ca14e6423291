package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/toolmesh/toolmesh/pkg/trust"
)

// CA is a certificate authority that issues SPIFFE certificates: for development (make
// certs, toolmesh certs) and tests. Production certificates come from the platform's
// issuer (cert-manager, SPIRE).
type CA struct {
	TrustDomain spiffeid.TrustDomain
	cert        *x509.Certificate
	key         *ecdsa.PrivateKey
	certPEM     []byte
}

// NewCA makes a CA for trustDomain valid for lifetime.
func NewCA(trustDomain string, lifetime time.Duration) (*CA, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, fmt.Errorf("trust domain %q: %w", trustDomain, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"toolmesh development"}, CommonName: "toolmesh CA " + td.String()},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		URIs:                  []*url.URL{td.ID().URL()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{TrustDomain: td, cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertPEM is the CA's certificate: the bundle peers verify against.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	ID              spiffeid.ID
	CertPEM, KeyPEM []byte
}

// Issue issues a certificate for the SPIFFE ID trust-domain/path, usable both as a server
// and as a client, valid from notBefore for lifetime (a notBefore in the past and a short
// lifetime make an expired one), for the host names and IP addresses in hosts.
func (ca *CA) Issue(path string, notBefore time.Time, lifetime time.Duration, hosts ...string) (Leaf, error) {
	id, err := spiffeid.FromPath(ca.TrustDomain, path)
	if err != nil {
		return Leaf{}, fmt.Errorf("path %q: %w", path, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"toolmesh development"}, CommonName: id.String()},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URL()},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{ID: id, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})}, nil
}

// Write writes the leaf as dir/name.pem and dir/name-key.pem (the key readable by its
// owner only), with the CA's bundle as dir/ca.pem, and returns the Files. A file is
// replaced by a rename, so that a Source watching it never reads half of it.
func (ca *CA) Write(dir, name string, leaf Leaf) (trust.Files, error) {
	f := trust.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return trust.Files{}, err
	}
	for _, x := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.certPEM, 0o644}, {f.Key, leaf.KeyPEM, 0o600}, {f.Cert, leaf.CertPEM, 0o644}} {
		if err := writeFile(x.path, x.data, x.mode); err != nil {
			return trust.Files{}, err
		}
	}
	return f, nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Sign has the CA sign tmpl for pub as it is, without the checks Issue makes: for tests
// of what a verifier refuses. It returns the certificate's DER.
func (ca *CA) Sign(tmpl *x509.Certificate, pub any) ([]byte, error) {
	return x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
}

// Serial is a random certificate serial number.
func Serial() *big.Int { return serial() }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
