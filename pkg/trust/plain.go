package trust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// HTTPSConfig is the TLS configuration of a client of an ordinary HTTPS server (an MCP
// server, say): the server is verified by host name, against the CA bundle in caFile
// (the system's roots when empty); with certFile and keyFile the client presents that
// certificate, read again when its files change. No SPIFFE ID is required of either side.
func HTTPSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("trust: the CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("trust: the CA bundle %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
		return cfg, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("trust: a client certificate needs both its certificate and its key")
	}
	kp := &keyPair{cert: certFile, key: keyFile}
	if err := kp.reload(); err != nil {
		return nil, err
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.current(), nil }
	return cfg, nil
}

// keyPair is a certificate and key from files, read again (at most once a second) when
// they change; a pair that fails to load keeps the last good one.
type keyPair struct {
	cert, key string
	mu        sync.Mutex
	pair      *tls.Certificate
	stamp     [2]fileStamp
	checked   time.Time
}

func (k *keyPair) stamps() [2]fileStamp {
	var out [2]fileStamp
	for i, p := range []string{k.cert, k.key} {
		if fi, err := os.Stat(p); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

func (k *keyPair) reload() error {
	stamp := k.stamps()
	pair, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return fmt.Errorf("trust: the certificate %s and key %s: %w", k.cert, k.key, err)
	}
	k.pair, k.stamp = &pair, stamp
	return nil
}

func (k *keyPair) current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) >= time.Second {
		k.checked = time.Now()
		if k.stamps() != k.stamp {
			_ = k.reload()
		}
	}
	return k.pair
}
