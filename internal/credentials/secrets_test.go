package credentials_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/credentials"
	"github.com/toolmesh/toolmesh/internal/credentials/credentialstest"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// k8sSecret writes a tenant's files as a Kubernetes Secret volume holds them: each key a
// link to ..data/<key>, ..data a link to a timestamped directory, swapped at once (a new
// link renamed over the old) on an update.
func k8sSecret(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, version, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, k)); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestSecretsPerTenantReadAgain(t *testing.T) {
	root := t.TempDir()
	k8sSecret(t, filepath.Join(root, "acme"), "..2026_01", map[string]string{"api_key": "acme-key-1\n"})
	if err := os.MkdirAll(filepath.Join(root, "globex"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "globex", "api_key"), []byte("globex-key-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := credentials.NewSecretStore(credentials.SecretOptions{Group: "crm", Dir: root, Reload: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	get := func(tenant string) (string, error) { return s.Get(ctx, tenant, "api_key") }
	for tenant, want := range map[string]string{"acme": "acme-key-1", "globex": "globex-key-1"} {
		if got, err := get(tenant); got != want || err != nil {
			t.Errorf("Get(%s) = %q, %v; want %q", tenant, got, err, want)
		}
	}
	// Kubernetes updates the Secret: a new directory, the link swapped.
	k8sSecret(t, filepath.Join(root, "acme"), "..2026_02", map[string]string{"api_key": "acme-key-2"})
	if got, _ := get("acme"); got != "acme-key-2" {
		t.Errorf("after the Secret's update: %q, want acme-key-2", got)
	}
	// A file rewritten in place.
	if err := os.WriteFile(filepath.Join(root, "globex", "api_key"), []byte("globex-key-22"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := get("globex"); got != "globex-key-22" {
		t.Errorf("after the file changed: %q, want globex-key-22", got)
	}
	for _, tenant := range []string{"", "initech", "../acme", "..data", "acme/../globex"} {
		if got, err := get(tenant); !errors.Is(err, credentials.ErrNoSecret) || got != "" {
			t.Errorf("Get(%q) = %q, %v; want ErrNoSecret", tenant, got, err)
		}
	}
}

func TestSecretsPolledEveryInterval(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "acme"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "acme", "api_key")
	if err := os.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	s, err := credentials.NewSecretStore(credentials.SecretOptions{Group: "crm", Dir: root, Reload: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(t.Context(), "acme", "api_key"); got != "one" {
		t.Fatalf("got %q", got)
	}
	if err := os.WriteFile(path, []byte("two-two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(t.Context(), "acme", "api_key"); got != "one" {
		t.Errorf("within the interval: %q, want the value read (one)", got)
	}
	clk.Advance(time.Second)
	if got, _ := s.Get(t.Context(), "acme", "api_key"); got != "two-two" {
		t.Errorf("after the interval: %q, want two-two", got)
	}
	if err := os.WriteFile(path, []byte("line\nbreak"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if _, err := s.Get(t.Context(), "acme", "api_key"); !errors.Is(err, credentials.ErrNoSecret) {
		t.Errorf("a value with a line break: %v, want ErrNoSecret", err)
	}
}

func TestSetFromConfig(t *testing.T) {
	srv := credentialstest.Start("toolmesh", "sec-ret-1", "billing-api")
	t.Cleanup(srv.Close)
	root := t.TempDir()
	for tenant, v := range map[string]string{"acme": "acme-crm", "globex": "globex-crm"} {
		if err := os.MkdirAll(filepath.Join(root, tenant), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, tenant, "api_key"), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Auth.JWT = config.JWT{JWKSFile: filepath.Join(root, "jwks.json"), Issuer: "https://issuer.test", Audience: "toolmesh"}
	cfg.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"billing", "crm"}}, "globex": {Groups: []string{"crm"}}}
	cfg.Groups = map[string]config.Group{
		"billing": {Context: &config.ConverterSpec{Kind: "allow-keys", Keys: []string{"user_token"}},
			TokenExchange: &config.TokenExchange{TokenEndpoint: srv.URL, ClientID: "toolmesh", ClientSecretFile: secretFileOf(t, "sec-ret-1"),
				Audience: "billing-api", ContextKey: "user_token"}},
		"crm": {Context: &config.ConverterSpec{Kind: "allow-keys", Keys: []string{"x-api-key"}},
			Secrets: &config.GroupSecrets{Dir: root, ContextKeys: map[string]string{"api_key": "x-api-key"}}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set, err := credentials.FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := toolinternal.WithTenant(toolinternal.WithSubject(context.Background(), subjectToken(t, "alice", time.Now().Add(time.Hour))), "acme")
	if d, err := set.For(ctx, "billing"); err != nil || len(d.Context["user_token"]) < 20 || len(d.Context) != 1 || d.Headers != nil {
		t.Errorf("billing: %v, %v", d, err)
	}
	if d, err := set.For(ctx, "crm"); err != nil || d.Context["x-api-key"] != "acme-crm" {
		t.Errorf("crm for acme: %v, %v", d, err)
	}
	if d, err := set.For(toolinternal.WithTenant(ctx, "globex"), "crm"); err != nil || d.Context["x-api-key"] != "globex-crm" {
		t.Errorf("crm for globex: %v, %v", d, err)
	}
	if d, err := set.For(ctx, "math"); err != nil || d.Context != nil || set.Has("math") {
		t.Errorf("a group without credentials: %v, %v", d, err)
	}
	if _, err := set.For(toolinternal.WithTenant(context.Background(), "acme"), "billing"); !errors.Is(err, credentials.ErrNoSubject) {
		t.Errorf("billing without the caller's token: %v, want ErrNoSubject", err)
	}
}
