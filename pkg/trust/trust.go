// Package trust is toolmesh's mutual TLS: every process holds an X.509 certificate whose
// URI SAN is a SPIFFE ID (spiffe://trust-domain/path), the identity the others authorise
// it by; certificates and the CA bundle come from PEM files, read again when they change,
// so that rotating them drops no call.
//
// A Source holds a process's certificate and CA bundle. ServerCredentials and
// ClientCredentials turn it into gRPC transport credentials: a server that asks for (or
// requires) a client certificate chaining to the bundle, a client that accepts a server
// only when its certificate chains to the bundle and carries an identity it expects (not
// a host name: an address that points at another service fails the handshake, before any
// header is sent). PeerID tells a handler who called.
package trust

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Files names the PEM files of a process's identity.
type Files struct {
	// CA is the bundle of CA certificates peers' certificates must chain to.
	CA string
	// Cert is the process's certificate chain (leaf first), Key its private key.
	Cert, Key string
}

// Configured reports whether any file is named.
func (f Files) Configured() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

func (f Files) check() error {
	var missing []string
	for _, x := range []struct{ name, path string }{{"CA bundle", f.CA}, {"certificate", f.Cert}, {"private key", f.Key}} {
		if x.path == "" {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("trust: mutual TLS needs a CA bundle, a certificate and a private key; missing: %v", missing)
	}
	return nil
}

// Source is a process's certificate and CA bundle, from Files, reloaded when they change
// (Watch).
type Source struct {
	files Files
	log   *slog.Logger

	mu    sync.RWMutex
	cert  *tls.Certificate
	leaf  *x509.Certificate
	pool  *x509.CertPool
	cas   []*x509.Certificate // the bundle's certificates, the authorities of any trust domain
	id    spiffeid.ID
	stamp [3]fileStamp

	// rotated is closed when the certificate changes, and replaced by a new channel.
	rotated chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	// minted are the call tokens MintCallToken made, for reuse.
	minted tokenCache[tokenKey, cachedToken]
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Load reads files; an error names the file and what is wrong with it.
func Load(files Files, log *slog.Logger) (*Source, error) {
	if err := files.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Source{files: files, log: log, stop: make(chan struct{}), rotated: make(chan struct{})}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again; on an error the Source keeps what it had.
func (s *Source) Reload() error {
	stamp := s.stamps()
	caPEM, err := os.ReadFile(s.files.CA)
	if err != nil {
		return fmt.Errorf("trust: the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("trust: the CA bundle %s holds no PEM certificate", s.files.CA)
	}
	cas, err := parseCertificates(caPEM)
	if err != nil {
		return fmt.Errorf("trust: the CA bundle %s: %w", s.files.CA, err)
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("trust: the certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("trust: the certificate %s: %w", s.files.Cert, err)
	}
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return fmt.Errorf("trust: the certificate %s carries no SPIFFE ID (a spiffe:// URI SAN): %w", s.files.Cert, err)
	}
	cert.Leaf = leaf
	s.mu.Lock()
	changed := s.leaf != nil && !bytes.Equal(s.leaf.Raw, leaf.Raw)
	s.cert, s.leaf, s.pool, s.cas, s.id, s.stamp = &cert, leaf, pool, cas, id, stamp
	if changed {
		close(s.rotated)
		s.rotated = make(chan struct{})
	}
	s.mu.Unlock()
	if changed {
		s.log.Info("certificate reloaded", "spiffe_id", id.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func (s *Source) stamps() [3]fileStamp {
	var out [3]fileStamp
	for i, p := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		if fi, err := os.Stat(p); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

// Watch reloads the files every interval when they changed, until Close. A file caught
// half-written fails to load and is tried again at the next interval.
func (s *Source) Watch(interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			s.mu.RLock()
			old := s.stamp
			s.mu.RUnlock()
			if s.stamps() == old {
				continue
			}
			if err := s.Reload(); err != nil {
				s.log.Warn("certificate files changed but cannot be loaded; keeping the current ones", "error", err.Error())
			}
		}
	}()
}

// Close stops Watch.
func (s *Source) Close() { s.stopOnce.Do(func() { close(s.stop) }) }

// Rotated returns a channel that is closed when the certificate changes after this
// call (Reload, Watch). Connections already made keep the certificate of their
// handshake: a process that must show the new one, as a worker to the orchestrator that
// ends its lease when its certificate expires, makes new connections.
func (s *Source) Rotated() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rotated
}

// ID is the identity of the current certificate.
func (s *Source) ID() spiffeid.ID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id
}

func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert, s.pool
}

// verify checks a peer's chain against the current bundle, for usage, and returns the
// peer's identity.
func (s *Source) verify(raw [][]byte, usage x509.ExtKeyUsage) (spiffeid.ID, error) {
	if len(raw) == 0 {
		return spiffeid.ID{}, errors.New("trust: the peer presented no certificate")
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return spiffeid.ID{}, fmt.Errorf("trust: the peer's certificate: %w", err)
		}
		certs = append(certs, c)
	}
	id, err := x509svid.IDFromCert(certs[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust: the peer's certificate carries no SPIFFE ID: %w", err)
	}
	s.mu.RLock()
	pool, cas := s.pool, s.cas
	s.mu.RUnlock()
	// go-spiffe verifies the chain to the authorities of the peer's trust domain and
	// that the leaf is an X509-SVID: not a CA, a signing key, one SPIFFE ID. The usage
	// the peer's side of the handshake needs is checked too.
	if _, _, err := x509svid.Verify(certs, x509bundle.FromX509Authorities(id.TrustDomain(), authoritiesOf(cas, id.TrustDomain()))); err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust: the peer's certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust: the peer's certificate: %w", err)
	}
	return id, nil
}

// authoritiesOf are the CA certificates of the bundle that may vouch for td: those that
// name td with a SPIFFE ID (spiffe://td, as SPIRE's and toolmesh's development CAs do),
// and those that name no trust domain at all (a bundle for one domain need not say
// which). A CA of another domain in the same bundle cannot vouch for an identity in td.
func authoritiesOf(cas []*x509.Certificate, td spiffeid.TrustDomain) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range cas {
		named, ours := false, false
		for _, u := range c.URIs {
			if u.Scheme != "spiffe" {
				continue
			}
			named = true
			if ctd, err := spiffeid.TrustDomainFromURI(u); err == nil && ctd == td {
				ours = true
			}
		}
		if ours || !named {
			out = append(out, c)
		}
	}
	return out
}

// parseCertificates reads every CERTIFICATE block of a PEM bundle.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// ServerTLS is the TLS configuration of a server: it presents the current certificate
// and asks for a client certificate, which must chain to the bundle when presented;
// with require, a client without one fails the handshake. Without require, PeerID tells
// a handler whether the caller presented one (a kubelet's health probe does not).
func (s *Source) ServerTLS(require bool) *tls.Config {
	auth := tls.RequestClientCert
	if require {
		auth = tls.RequireAnyClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: auth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _ := s.current()
			return c, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return nil // RequireAnyClientCert refused it already when required
			}
			_, err := s.verify(raw, x509.ExtKeyUsageClientAuth)
			return err
		},
		NextProtos: []string{"h2"},
	}
}

// ClientTLS is the TLS configuration of a client: it presents the current certificate
// and accepts a server whose certificate chains to the bundle and whose identity allow
// accepts (nil: any identity).
func (s *Source) ClientTLS(allow func(spiffeid.ID) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := s.current()
			return c, nil
		},
		// The server is verified below, by the bundle and its SPIFFE ID, not by host name.
		InsecureSkipVerify: true, //nolint:gosec // VerifyPeerCertificate verifies the chain and the identity
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			id, err := s.verify(raw, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if allow != nil {
				if err := allow(id); err != nil {
					return fmt.Errorf("trust: the server is %s: %w", id, err)
				}
			}
			return nil
		},
		NextProtos: []string{"h2"},
	}
}

// ServerCredentials are gRPC server credentials over ServerTLS(require).
func (s *Source) ServerCredentials(require bool) credentials.TransportCredentials {
	return credentials.NewTLS(s.ServerTLS(require))
}

// ClientCredentials are gRPC client credentials that accept only a server whose
// identity is want (the zero ID: any identity the bundle vouches for).
func (s *Source) ClientCredentials(want spiffeid.ID) credentials.TransportCredentials {
	var allow func(spiffeid.ID) error
	if !want.IsZero() {
		allow = Expect(want)
	}
	return credentials.NewTLS(s.ClientTLS(allow))
}

// Expect accepts exactly want.
func Expect(want spiffeid.ID) func(spiffeid.ID) error {
	return func(got spiffeid.ID) error {
		if got != want {
			return fmt.Errorf("want %s", want)
		}
		return nil
	}
}

// PeerID is the identity of the caller of a gRPC handler: false when the call came
// without TLS or without a client certificate. Certificates reach a handler only once
// the handshake verified them (ServerTLS).
func PeerID(ctx context.Context) (spiffeid.ID, bool) {
	c, ok := PeerCert(ctx)
	if !ok {
		return spiffeid.ID{}, false
	}
	id, err := x509svid.IDFromCert(c)
	return id, err == nil
}

// PeerCert is the caller's leaf certificate, if it presented one.
func PeerCert(ctx context.Context) (*x509.Certificate, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, false
	}
	return info.State.PeerCertificates[0], true
}

// ParseID parses a SPIFFE ID (spiffe://trust-domain/path).
func ParseID(s string) (spiffeid.ID, error) {
	id, err := spiffeid.FromString(s)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust: %q is not a SPIFFE ID (spiffe://trust-domain/path): %w", s, err)
	}
	return id, nil
}
