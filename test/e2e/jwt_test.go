package e2e

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/pkg/client"
)

// keyServer is an identity provider's key set endpoint, over TLS, in the test process:
// the set it serves changes when the test says, and it counts the fetches.
type keyServer struct {
	srv     *httptest.Server
	caFile  string
	mu      sync.Mutex
	set     []byte
	fetches atomic.Int64
}

func startKeyServer(t *testing.T, signers ...*signer) *keyServer {
	t.Helper()
	k := &keyServer{}
	k.serve(t, signers...)
	k.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		k.fetches.Add(1)
		k.mu.Lock()
		set := k.set
		k.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(k.srv.Close)
	k.caFile = filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(k.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// serve publishes the keys of signers (each signer's own set, merged).
func (k *keyServer) serve(t *testing.T, signers ...*signer) {
	t.Helper()
	var keys []string
	for _, s := range signers {
		b, err := os.ReadFile(s.jwks)
		if err != nil {
			t.Fatal(err)
		}
		one := strings.TrimSuffix(strings.TrimPrefix(string(b), `{"keys":[`), `]}`)
		keys = append(keys, one)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.set = []byte(`{"keys":[` + strings.Join(keys, ",") + `]}`)
}

// TestJWTFromURL: the orchestrator verifies bearer tokens against the key set at
// auth.jwt.jwks_url (an identity provider's endpoint over TLS with its own CA, here in
// the test process); the toolmesh CLI, with -token-file or TOOLMESH_TOKEN_FILE, runs a
// prompt as the token's tenant, and every call of the run carries that tenant; a token
// for another audience is refused as UNAUTHENTICATED. When the provider rotates its keys,
// the next refresh drops the old key and takes the new one.
func TestJWTFromURL(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	idp := startKeyServer(t, k1)
	m := startMesh(t, "tenants.yaml", fmt.Sprintf(`
auth:
  jwt: {jwks_url: %q, ca_file: %q, refresh_interval: 10s, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
`, idp.srv.URL+"/jwks.json", idp.caFile))
	if n := idp.fetches.Load(); n != 1 {
		t.Errorf("%d fetches of the key set at start, want 1", n)
	}
	m.startWorker("acme-1", "echo_acme")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acme, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(k1.tenantToken(t, "acme"), true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = acme.Close() })
	waitWorkerCount(ctx, t, acme, 1)

	tokenFile := func(tok string) string {
		path := filepath.Join(t.TempDir(), "tok")
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := tokenFile(k1.tenantToken(t, "acme"))
	stdout, stderr, code := command(t, "toolmesh", nil, "-addr", m.orch.Addr, "-token-file", good, "run", "-group", "echo_acme", "echo")
	if code != 0 || !strings.Contains(stdout, `"tenant_id":"acme"`) || !strings.Contains(stdout, "■ final") {
		m.dump()
		t.Fatalf("toolmesh run as acme: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if stdout, stderr, code := command(t, "toolmesh", []string{"TOOLMESH_TOKEN_FILE=" + good}, "-addr", m.orch.Addr, "tools"); code != 0 || !strings.Contains(stdout, "show_context_acme") {
		t.Errorf("toolmesh tools with TOOLMESH_TOKEN_FILE: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	wrongAudience := k1.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "billing", "sub": "user-1", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	stdout, stderr, code = command(t, "toolmesh", nil, "-addr", m.orch.Addr, "-token-file", tokenFile(wrongAudience), "run", "-group", "echo_acme", "echo")
	if code != 1 || !strings.Contains(stderr, "toolmesh: Unauthenticated: ") || !strings.Contains(stderr, "audience") || strings.Contains(stdout, "started") {
		t.Errorf("toolmesh run with a token for another audience: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if m.orch.CountLogs("client call refused: bad bearer token", nil) == 0 {
		t.Error("no audit event for the refused token")
	}

	// The provider rotates: k2 in, k1 out. The orchestrator's next refresh (every 10 s)
	// brings the new set without any token asking for it.
	before := idp.fetches.Load()
	idp.serve(t, k2)
	for idp.fetches.Load() == before {
		select {
		case <-ctx.Done():
			m.dump()
			t.Fatal("the orchestrator did not fetch the key set again within its refresh interval")
		case <-time.After(50 * time.Millisecond):
		}
	}
	deadline := time.Now().Add(5 * time.Second) // the fetch that began has yet to land
	for {
		_, _, code = command(t, "toolmesh", nil, "-addr", m.orch.Addr, "-token-file", tokenFile(k2.tenantToken(t, "acme")), "tools")
		if code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 {
		t.Errorf("a token of the new key after the refresh: exit %d", code)
	}
	if _, err := acme.ListTools(ctx); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a token of the removed key after the refresh: %v, want UNAUTHENTICATED", err)
	}
}

// TestJWTURLUnreachable: an orchestrator whose key set cannot be fetched does not start,
// and says which key is at fault.
func TestJWTURLUnreachable(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cfg := filepath.Join(t.TempDir(), "orchestrator.yaml")
	doc := testConfig + fmt.Sprintf("provider: {name: scripted}\nauth:\n  jwt: {jwks_url: %q, issuer: i, audience: a}\n", gone.URL+"/jwks.json")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := command(t, "orchestrator", nil, "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	if code != 1 || !strings.Contains(stderr, "orchestrator: server: auth.jwt.jwks_url "+gone.URL+"/jwks.json: ") || !strings.Contains(stderr, "connection refused") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming auth.jwt.jwks_url", code, stderr)
	}
}
