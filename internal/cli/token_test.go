package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/cli"
)

// A token file holds one token: whitespace around it is trimmed; an empty file, one of
// several lines or control characters, one over 16 KiB and a missing one are refused.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "tok")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ content, want string }{
		{"eyJ.a.b\n", "eyJ.a.b"},
		{"  eyJ.a.b \r\n\n", "eyJ.a.b"},
		{strings.Repeat("a", cli.MaxTokenFileBytes), strings.Repeat("a", cli.MaxTokenFileBytes)},
	} {
		got, err := cli.ReadToken(write(tc.content))
		if err != nil || got != tc.want {
			t.Errorf("ReadToken(%.20q) = %.20q, %v; want %.20q", tc.content, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ content, want string }{
		{"", "empty"},
		{" \n\t", "empty"},
		{"eyJ.a.b\nsecond", "one line of printable ASCII (byte 7 is not)"},
		{"eyJ\x00.a", "one line of printable ASCII"},
		{"jeton-é", "one line of printable ASCII"},
		{strings.Repeat("a", cli.MaxTokenFileBytes+1), "larger than 16384 bytes"},
	} {
		if _, err := cli.ReadToken(write(tc.content)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadToken(%.20q): %v, want it to contain %q", tc.content, err, tc.want)
		}
	}
	if _, err := cli.ReadToken(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "-token-file: ") {
		t.Errorf("a missing file: %v", err)
	}
}

// A token goes in the clear only to loopback.
func TestCheckTokenTransport(t *testing.T) {
	for _, tc := range []struct {
		addr string
		tls  bool
		ok   bool
	}{
		{"127.0.0.1:7070", false, true},
		{"localhost:7070", false, true},
		{"[::1]:7070", false, true},
		{"127.8.9.10:1", false, true},
		{"orchestrator.example:7070", false, false},
		{"10.0.0.1:7070", false, false},
		{"dns:///orchestrator:7070", false, false},
		{"orchestrator.example:7070", true, true},
	} {
		err := cli.CheckTokenTransport(tc.addr, tc.tls)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, cli.ErrTokenInClear)) {
			t.Errorf("CheckTokenTransport(%q, tls %v) = %v", tc.addr, tc.tls, err)
		}
	}
}
