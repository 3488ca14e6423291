package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/devca"
)

// runCLI runs a command line that dials nothing, or dials as the arguments say.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, stderr bytes.Buffer
	err := run(testContext(t), args, &out, &stderr)
	if stderr.Len() > 0 {
		t.Logf("toolmesh %q wrote to stderr:\n%s", args, stderr.String())
	}
	return out.String(), err
}

// writeToken writes a token (and its newline, as toolmesh token > file does) to a file.
func writeToken(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The development token flow: toolmesh certs writes a signing key and its key set and
// prints the auth.jwt that uses them; a token toolmesh token mints with it is accepted by
// an orchestrator verifying against that key set, sent with -token-file (or
// TOOLMESH_TOKEN_FILE); a token for another audience, an expired one and none are
// refused as UNAUTHENTICATED.
func TestDevelopmentTokens(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "certs", "-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, jwksFile := filepath.Join(dir, "jwt-signing-key.pem"), filepath.Join(dir, "jwks.json")
	wantConfig := "auth:\n  jwt: {jwks_file: " + jwksFile + `, issuer: "https://toolmesh.local/dev", audience: toolmesh}`
	if !strings.Contains(out, wantConfig) || !strings.Contains(out, "toolmesh token -key "+keyFile+" -tenant acme > tok") {
		t.Errorf("toolmesh certs printed:\n%s\nwant the auth.jwt config:\n%s", out, wantConfig)
	}

	o := startOrchestratorWith(t, adderScript(), func(c *config.Config) {
		c.Auth.JWT = config.JWT{JWKSFile: jwksFile, Issuer: devIssuer, Audience: devAudience}
		c.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"math"}}}
	})
	mint := func(args ...string) string {
		t.Helper()
		tok, err := runCLI(t, append([]string{"token", "-key", keyFile}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(tok, ".") != 2 || !strings.HasSuffix(tok, "\n") {
			t.Fatalf("toolmesh token printed %q", tok)
		}
		return writeToken(t, tok)
	}
	acme := mint("-tenant", "acme")
	out, err = o.run(t, "-token-file", acme, "tools")
	if err != nil || !strings.Contains(out, "add ") {
		t.Errorf("tools as acme: %v\n%s", err, out)
	}
	out, err = o.run(t, "-token-file", acme, "run", "-tool", "add", "add 2 and 3")
	if err != nil || !strings.Contains(out, "The sum is 5.") {
		t.Errorf("a run as acme: %v\n%s", err, out)
	}
	t.Setenv("TOOLMESH_TOKEN_FILE", acme)
	if _, err := o.run(t, "tools"); err != nil {
		t.Errorf("tools with TOOLMESH_TOKEN_FILE: %v", err)
	}
	t.Setenv("TOOLMESH_TOKEN_FILE", "")

	// The key toolmesh certs wrote, read back, for a token toolmesh token cannot make.
	k, err := devca.ReadSigningKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := k.Sign(devca.TokenClaims{Issuer: devIssuer, Audience: devAudience, Tenant: "acme", IssuedAt: time.Now().Add(-2 * time.Hour), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"another audience", mint("-tenant", "acme", "-audience", "billing"), "audience"},
		{"another issuer", mint("-tenant", "acme", "-issuer", "https://elsewhere"), "issuer"},
		{"expired", writeToken(t, expired), "expired"},
		{"another tenant claim", mint("-tenant", "acme", "-tenant-claim", "org"), `no "tenant" claim`},
	} {
		_, err := o.run(t, "-token-file", tc.file, "tools")
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a token of %s: %v, want UNAUTHENTICATED mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := o.run(t, "tools"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := o.run(t, "-token-file", mint("-tenant", "globex"), "tools"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a tenant the orchestrator does not serve: %v, want PERMISSION_DENIED", err)
	}
}

// A token goes only to loopback in the clear, and its file is checked before anything
// is dialled; toolmesh token refuses what would make a token the orchestrator refuses.
func TestTokenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCLI(t, "certs", "-dir", dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "jwt-signing-key.pem")
	tok := writeToken(t, "eyJ.a.b\n")
	big := writeToken(t, strings.Repeat("a", cli.MaxTokenFileBytes+1))
	for _, tc := range []struct {
		args     []string
		sentinel error
		contains string
	}{
		{args: []string{"-addr", "orchestrator.example:7070", "-token-file", tok, "tools"}, sentinel: cli.ErrTokenInClear},
		{args: []string{"-token-file", big, "tools"}, contains: "larger than 16384 bytes"},
		{args: []string{"-token-file", filepath.Join(dir, "none"), "tools"}, contains: "-token-file: open"},
		{args: []string{"token", "-key", key}, contains: "-tenant is required"},
		{args: []string{"token", "-key", key, "-tenant", "acme", "-ttl", "0s"}, contains: "-ttl must be between 1s and 720h0m0s"},
		{args: []string{"token", "-key", key, "-tenant", "acme", "-ttl", "721h"}, contains: "-ttl must be between"},
		{args: []string{"token", "-key", key, "-tenant", "acme", "-audience", ""}, contains: "an issuer and an audience"},
		{args: []string{"token", "-key", key, "-tenant", "acme", "-subject", ""}, contains: "-subject is required"},
		{args: []string{"token", "-key", filepath.Join(dir, "ca.pem"), "-tenant", "acme"}, contains: `-key: the signing key`},
		{args: []string{"token", "-key", key, "-tenant", "acme", "extra"}, contains: "unexpected arguments"},
	} {
		out, err := runCLI(t, tc.args...)
		switch {
		case err == nil:
			t.Errorf("%q: no error (output %q)", tc.args, out)
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%q: %v, want %v", tc.args, err, tc.sentinel)
		case tc.contains != "" && !strings.Contains(err.Error(), tc.contains):
			t.Errorf("%q: %v, want it to mention %q", tc.args, err, tc.contains)
		}
	}
}
