package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/toolmesh/toolmesh/pkg/trust"
)

// TLSFlags are the mutual-TLS flags of a command: its certificate files and the identity
// of the orchestrator it talks to.
type TLSFlags struct {
	files   trust.Files
	peer    string
	reload  time.Duration
	peerFor string
}

// AddTLSFlags defines -tls-ca, -tls-cert, -tls-key and peerFlag (the SPIFFE IDs, comma
// separated, the other side must prove) on fs.
func AddTLSFlags(fs *flag.FlagSet, peerFlag, peerWhat string) *TLSFlags {
	f := &TLSFlags{peerFor: peerFlag}
	fs.StringVar(&f.files.CA, "tls-ca", "", "PEM CA bundle: turns mutual TLS on (with -tls-cert and -tls-key)")
	fs.StringVar(&f.files.Cert, "tls-cert", "", "PEM certificate chain with a SPIFFE ID URI SAN (toolmesh certs makes development ones)")
	fs.StringVar(&f.files.Key, "tls-key", "", "PEM private key of -tls-cert")
	fs.DurationVar(&f.reload, "tls-reload", time.Second, "how often the certificate files are checked for a change")
	fs.StringVar(&f.peer, peerFlag, "", peerWhat+" (SPIFFE IDs, comma separated), required with mutual TLS")
	return f
}

// Load returns the Source and the peer identities; nil when no TLS flag was given.
func (f *TLSFlags) Load(log *slog.Logger) (*trust.Source, []spiffeid.ID, error) {
	if !f.files.Configured() {
		if f.peer != "" {
			return nil, nil, fmt.Errorf("-%s needs -tls-ca, -tls-cert and -tls-key", f.peerFor)
		}
		return nil, nil, nil
	}
	var ids []spiffeid.ID
	for _, s := range strings.Split(f.peer, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := trust.ParseID(s)
		if err != nil {
			return nil, nil, fmt.Errorf("-%s: %w", f.peerFor, err)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("mutual TLS needs -%s", f.peerFor)
	}
	src, err := trust.Load(f.files, log)
	if err != nil {
		return nil, nil, err
	}
	src.Watch(f.reload)
	return src, ids, nil
}
