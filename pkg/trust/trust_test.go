package trust_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

func issue(t *testing.T, ca *devca.CA, dir, name, path string, notBefore time.Time, lifetime time.Duration) trust.Files {
	t.Helper()
	leaf, err := ca.Issue(path, notBefore, lifetime, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Write(dir, name, leaf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func load(t *testing.T, f trust.Files) *trust.Source {
	t.Helper()
	s, err := trust.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// serve starts a health server with creds and returns its address; seen receives the
// identity of every caller that presented a certificate.
func serve(t *testing.T, creds credentials.TransportCredentials, seen chan<- spiffeid.ID) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id, ok := trust.PeerID(ctx); ok && seen != nil {
			seen <- id
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func check(addr string, creds credentials.TransportCredentials) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	return err
}

// Mutual TLS by SPIFFE identity: the server learns who called; a client accepts only
// the identity it expects; a certificate of a foreign CA, an expired one, or none where
// one is required fails the handshake; a changed certificate file is picked up.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.NewCA("toolmesh.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Minute)
	server := load(t, issue(t, ca, dir, "orchestrator", "/orchestrator", now, time.Hour))
	warnings := make(chan string, 64)
	worker, err := trust.Load(issue(t, ca, dir, "worker", "/worker/math", now, time.Hour), slog.New(warnHandler(warnings)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	seen := make(chan spiffeid.ID, 16)
	addr := serve(t, server.ServerCredentials(true), seen)

	if err := check(addr, worker.ClientCredentials(server.ID())); err != nil {
		t.Fatalf("a valid worker: %v", err)
	}
	if got := <-seen; got.String() != "spiffe://toolmesh.test/worker/math" {
		t.Errorf("the server saw %s", got)
	}
	wrong := spiffeid.RequireFromString("spiffe://toolmesh.test/someone-else")
	if err := check(addr, worker.ClientCredentials(wrong)); err == nil || !strings.Contains(err.Error(), "want spiffe://toolmesh.test/someone-else") {
		t.Errorf("a server of another identity: %v, want a refusal naming the identities", err)
	}

	foreign, err := devca.NewCA("toolmesh.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	impostor := load(t, issue(t, foreign, filepath.Join(dir, "foreign"), "impostor", "/worker/math", now, time.Hour))
	if err := check(addr, impostor.ClientCredentials(spiffeid.ID{})); err == nil {
		t.Error("a certificate of a foreign CA was accepted")
	}
	expired := load(t, issue(t, ca, filepath.Join(dir, "expired"), "expired", "/worker/old", now.Add(-2*time.Hour), time.Hour))
	if err := check(addr, expired.ClientCredentials(spiffeid.ID{})); err == nil {
		t.Error("an expired certificate was accepted")
	}
	if err := check(addr, credentials.NewTLS(noCert(worker))); err == nil {
		t.Error("a client without a certificate was accepted by a server that requires one")
	}
	optional := serve(t, server.ServerCredentials(false), seen)
	if err := check(optional, credentials.NewTLS(noCert(worker))); err != nil {
		t.Errorf("a client without a certificate, where one is optional: %v", err)
	}

	// Rotation: the worker's files are replaced; the watching Source presents the new
	// certificate on the next connection.
	rotated := worker.Rotated()
	worker.Watch(20 * time.Millisecond)
	issue(t, ca, dir, "worker", "/worker/math-v2", now, time.Hour)
	select {
	case <-rotated:
	case <-time.After(5 * time.Second):
	}
	if worker.ID().Path() != "/worker/math-v2" {
		t.Fatalf("the rotated certificate was not loaded: %s", worker.ID())
	}
	for len(seen) > 0 {
		<-seen
	}
	if err := check(addr, worker.ClientCredentials(server.ID())); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.Path() != "/worker/math-v2" {
		t.Errorf("after rotation the server saw %s", got)
	}
	// A half-written file keeps the old certificate. The watcher warns when it finds
	// files it cannot load; warnings from the rotation above (a new key beside the old
	// certificate) came before the rotation, so they are dropped first.
	for len(warnings) > 0 {
		<-warnings
	}
	if err := os.WriteFile(filepath.Join(dir, "worker.pem"), []byte("-----BEGIN CERT"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-warnings:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not try the broken file")
	}
	if worker.ID().Path() != "/worker/math-v2" {
		t.Errorf("a broken file replaced the certificate: %s", worker.ID())
	}
}

// warnHandler is a slog handler that sends the message of every warning (and error)
// to ch, dropping it when ch is full.
type warnHandler chan<- string

func (h warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h warnHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default:
	}
	return nil
}

func (h warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnHandler) WithGroup(string) slog.Handler      { return h }

// noCert is a client configuration that presents no certificate.
func noCert(s *trust.Source) *tls.Config {
	c := s.ClientTLS(nil)
	c.GetClientCertificate = nil
	return c
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := trust.Load(trust.Files{CA: "x"}, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("missing files: %v", err)
	}
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("nothing"), 0o600)
	if _, err := trust.Load(trust.Files{CA: bad, Cert: bad, Key: bad}, nil); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("a bad CA bundle: %v", err)
	}
	if _, err := trust.ParseID("https://example.com/x"); err == nil {
		t.Error("a non-SPIFFE id parsed")
	}
}

// A call token is given again for the same worker, tool, run and tenant while it
// expires no later than the call's deadline and not within two seconds; otherwise a new
// one is minted.
func TestCallTokenReuse(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.NewCA("toolmesh.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := load(t, issue(t, ca, dir, "orchestrator", "/orchestrator", time.Now().Add(-time.Minute), time.Hour))
	const aud = "spiffe://toolmesh.test/worker/math"
	deadline := time.Now().Add(30 * time.Second)
	claims := trust.CallClaims{Tool: "add", RunID: "r1", Tenant: "acme"}
	first, err := s.MintCallToken(aud, claims, deadline)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.MintCallToken(aud, claims, deadline.Add(time.Second)); again != first {
		t.Error("a later call of the same run and tool got a new token")
	}
	if sooner, _ := s.MintCallToken(aud, claims, deadline.Add(-10*time.Second)); sooner == first {
		t.Error("a call with an earlier deadline got a token that outlives it")
	}
	other := claims
	other.Tenant = "globex"
	if tok, _ := s.MintCallToken(aud, other, deadline); tok == first {
		t.Error("another tenant got the same token")
	}
	if tok, _ := s.MintCallToken(aud, claims, time.Now().Add(time.Second)); tok == first {
		t.Error("a token about to expire was given again")
	}
}
