package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// MaxTokenFileBytes bounds a bearer token file, as the orchestrator bounds a token.
const MaxTokenFileBytes = 16 << 10

// ReadToken reads the bearer token in the file at path: one line of printable ASCII
// (whitespace around it is trimmed), at most MaxTokenFileBytes.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("-token-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("-token-file %s: %w", path, err)
	}
	if len(b) > MaxTokenFileBytes {
		return "", fmt.Errorf("-token-file %s: larger than %d bytes; a bearer token is smaller", path, MaxTokenFileBytes)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("-token-file %s: empty", path)
	}
	if i := strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
		return "", fmt.Errorf("-token-file %s: the token must be one line of printable ASCII (byte %d is not)", path, i)
	}
	return tok, nil
}

// ErrTokenInClear refuses to send a bearer token without TLS off loopback.
var ErrTokenInClear = errors.New("a bearer token is sent only over TLS (-tls-ca, -tls-cert, -tls-key) or to a loopback address")

// CheckTokenTransport reports whether a bearer token may go to addr: over TLS anywhere,
// in plaintext only to a loopback host (localhost, 127.0.0.0/8, ::1).
func CheckTokenTransport(addr string, tls bool) error {
	if tls {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%w; %s is neither", ErrTokenInClear, addr)
}
