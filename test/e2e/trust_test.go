package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

const trustDomain = "toolmesh.test"

// pki issues certificates of one CA into a directory.
type pki struct {
	dir string
	ca  *devca.CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := devca.NewCA(trustDomain, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{dir: t.TempDir(), ca: ca}
}

// issue writes name.pem and name-key.pem for spiffe://toolmesh.test/path, valid from
// notBefore for life.
func (p *pki) issue(t *testing.T, name, path string, notBefore time.Time, life time.Duration) trust.Files {
	t.Helper()
	leaf, err := p.ca.Issue(path, notBefore, life, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.ca.Write(p.dir, name, leaf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (p *pki) valid(t *testing.T, name, path string) trust.Files {
	return p.issue(t, name, path, time.Now().Add(-time.Minute), 12*time.Hour)
}

func tlsArgs(f trust.Files) []string {
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-reload", "100ms",
		"--orchestrator-id", "spiffe://" + trustDomain + "/orchestrator", "--reconnect-min", "50ms", "--reconnect-max", "200ms"}
}

// tlsMesh is an orchestrator with mutual TLS on and the grants of trust_test.
type tlsMesh struct {
	t      *testing.T
	pki    *pki
	orch   *harness.Orchestrator
	orchF  trust.Files
	c      *client.Client
	client *trust.Source
	procs  []*harness.Proc
}

func startTLSMesh(t *testing.T) *tlsMesh {
	return startTLSMeshWith(t, tlsMeshConfig{script: "onecall.yaml", workers: []string{
		"{id: spiffe://" + trustDomain + "/worker/math, groups: [math]}",
		"{id: spiffe://" + trustDomain + "/worker/math-b, groups: [math]}",
		"{id: spiffe://" + trustDomain + "/worker/payments, groups: [payments]}",
		"{id: spiffe://" + trustDomain + "/worker/search, groups: [echo_search]}",
		"{id: spiffe://" + trustDomain + "/worker/short, groups: [echo_short]}",
	}, clients: []string{"spiffe://" + trustDomain + "/client/dev"}})
}

// tlsMeshConfig is what differs between the mutual-TLS meshes of the tests: the script,
// the worker grants and client identities (YAML), more config.
type tlsMeshConfig struct {
	script           string
	workers, clients []string
	extra            string
}

func startTLSMeshWith(t *testing.T, mc tlsMeshConfig) *tlsMesh {
	t.Helper()
	p := newPKI(t)
	m := &tlsMesh{t: t, pki: p, orchF: p.valid(t, "orchestrator", "/orchestrator")}
	cfg := testConfig + fmt.Sprintf(`
provider: {name: scripted}
tls: {ca_file: %q, cert_file: %q, key_file: %q, reload_interval: 100ms}
trust:
  workers: [%s]
  clients: [%s]
`, m.orchF.CA, m.orchF.Cert, m.orchF.Key, strings.Join(mc.workers, ", "), strings.Join(mc.clients, ", ")) + mc.extra
	cfgPath := filepath.Join(t.TempDir(), "orchestrator.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", mc.script))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	orch, err := harness.StartOrchestrator(ctx, "orchestrator", "127.0.0.1:0", nil, "--config", cfgPath, "--script", script)
	if err != nil {
		t.Fatal(err)
	}
	m.orch = orch
	m.procs = append(m.procs, orch.Proc)
	t.Cleanup(func() {
		for _, p := range m.procs {
			_ = p.Kill()
		}
	})
	cf := p.valid(t, "client-dev", "/client/dev")
	if m.client, err = trust.Load(cf, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.client.Close)
	m.c, err = client.Dial(orch.Addr, m.client.ClientCredentials(m.orchID()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.c.Close() })
	return m
}

func (m *tlsMesh) orchID() spiffeid.ID {
	id, _ := trust.ParseID("spiffe://" + trustDomain + "/orchestrator")
	return id
}

func (m *tlsMesh) worker(name, groups string, args ...string) *harness.Proc {
	m.t.Helper()
	p, err := harness.StartWorker(name, name, groups, m.orch.Addr, nil, args...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.procs = append(m.procs, p)
	return p
}

// workers are the ids of the READY workers.
func (m *tlsMesh) workers(ctx context.Context) map[string]*toolpb.WorkerStatus {
	m.t.Helper()
	ws, err := m.c.ListWorkers(ctx)
	if err != nil {
		m.t.Fatalf("ListWorkers: %v", err)
	}
	out := map[string]*toolpb.WorkerStatus{}
	for _, w := range ws {
		if w.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
			out[w.GetWorkerId()] = w
		}
	}
	return out
}

func (m *tlsMesh) waitWorker(ctx context.Context, id string, want bool) {
	m.t.Helper()
	for {
		_, ok := m.workers(ctx)[id]
		if ok == want {
			return
		}
		select {
		case <-ctx.Done():
			m.dump()
			m.t.Fatalf("worker %s registered: %v, want %v", id, ok, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *tlsMesh) dump() {
	for _, p := range m.procs {
		m.t.Logf("---- %s ----\n%s", p.Name, p.Output())
	}
}

func (m *tlsMesh) add(ctx context.Context) (string, error) {
	var final string
	for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{Prompt: "add", Tools: []string{"add"}}) {
		if err != nil {
			return "", err
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	return final, nil
}

// TestMutualTLS (catalogue S01, S02, S03, S15 and the impostor scenario): with mutual
// TLS on, only granted identities register, within their grants; an address that does
// not prove the registrant's identity gets no call and no header; only the orchestrator
// may call a worker; expired certificates are refused (and a worker whose certificate
// expires loses its tools); certificates rotated on disk mid-run fail no call.
func TestMutualTLS(t *testing.T) {
	m := startTLSMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p := m.pki
	m.worker("math-1", "math", tlsArgs(p.valid(t, "worker-math", "/worker/math"))...)
	m.worker("pay-1", "payments", tlsArgs(p.valid(t, "worker-payments", "/worker/payments"))...)
	m.waitWorker(ctx, "math-1", true)
	m.waitWorker(ctx, "pay-1", true)
	if text, err := m.add(ctx); err != nil || text != "the answer is 42" {
		m.dump()
		t.Fatalf("a run over mutual TLS: %q, %v", text, err)
	}

	t.Run("S01 no certificate or a foreign CA", func(t *testing.T) { checkMTLSNoCertificate(ctx, t, m) })
	t.Run("S02 outside the grant", func(t *testing.T) { checkMTLSOutsideGrant(ctx, t, m) })
	t.Run("S02 the refusal's status", func(t *testing.T) { checkMTLSRefusalStatus(ctx, t, m) })
	t.Run("S03 an address that is not the registrant", func(t *testing.T) { checkMTLSDecoyAddress(ctx, t, m) })
	t.Run("only the orchestrator calls a worker", func(t *testing.T) { checkMTLSWorkerCallers(ctx, t, m) })
	t.Run("S15 expired certificates", func(t *testing.T) { checkMTLSExpired(ctx, t, m) })
	t.Run("S15 rotation mid-run", func(t *testing.T) { checkMTLSRotation(ctx, t, m) })
	t.Run("the API over HTTPS", func(t *testing.T) { checkMTLSWeb(ctx, t, m) })
}

// checkMTLSWeb checks that on the TLS port, an HTTPS client (which offers HTTP/1.1 and
// h2, as browsers and curl do) is served the API over HTTP/1.1 when it presents a client
// certificate the CA issued, and refused without one, as a gRPC client is.
func checkMTLSWeb(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	get := func(tc *tls.Config) (int, string, int) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone(), ForceAttemptHTTP2: true}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+m.orch.Addr+"/v1/workers", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET /v1/workers over HTTPS: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), resp.ProtoMajor
	}
	if code, body, major := get(m.client.ClientTLS(nil)); code != http.StatusOK || !strings.Contains(body, "math-1") || major != 1 {
		t.Errorf("with a client certificate: HTTP/%d %d %s; want HTTP/1.1 200 listing math-1", major, code, body)
	}
	if code, body, _ := get(noClientCert(m.client)); code != http.StatusUnauthorized {
		t.Errorf("without a client certificate: %d %s; want 401", code, body)
	}
}

// checkMTLSNoCertificate checks that neither a worker without TLS nor one whose
// certificate a foreign CA issued registers, and that a caller without a certificate
// gets health answers only.
func checkMTLSNoCertificate(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	// A worker without TLS, and one whose certificate a foreign CA issued under a
	// granted identity.
	m.worker("plain-1", "math", "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	foreign := newPKI(t)
	m.worker("math-foreign", "math", tlsArgs(foreign.valid(t, "worker-math", "/worker/math"))...)
	// Health answers a caller without a certificate; nothing else does.
	conn, err := grpc.NewClient(m.orch.Addr, grpc.WithTransportCredentials(credentials.NewTLS(noClientCert(m.client))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a client certificate: %v, %v", resp, err)
	}
	anon := toolpb.NewOrchestratorServiceClient(conn)
	if _, err := anon.ListTools(ctx, &toolpb.ListToolsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListTools without a client certificate: %v, want Unauthenticated", err)
	}
	plain, err := client.Dial(m.orch.Addr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Close() }()
	if _, err := plain.ListWorkers(ctx); err == nil {
		t.Error("a plaintext client was answered")
	}
	time.Sleep(2 * time.Second) // both workers retry every 200 ms meanwhile
	ws := m.workers(ctx)
	for _, id := range []string{"plain-1", "math-foreign"} {
		if _, ok := ws[id]; ok {
			t.Errorf("%s registered", id)
		}
	}
}

// checkMTLSOutsideGrant checks that a worker serving a group outside its identity's
// grant, or shadowing another identity's group, does not register.
func checkMTLSOutsideGrant(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	p := m.pki
	before := m.orch.CountLogs("registration refused: outside the identity's grant", nil)
	// The search identity may serve echo_search only.
	m.worker("search-1", "payments", tlsArgs(p.valid(t, "worker-search", "/worker/search"))...)
	// math-b is granted math, which the math identity serves already: a shadow.
	m.worker("math-b-1", "math", tlsArgs(p.valid(t, "worker-math-b", "/worker/math-b"))...)
	deadline := time.Now().Add(10 * time.Second)
	for m.orch.CountLogs("registration refused: outside the identity's grant", nil) == before ||
		m.orch.CountLogs("registration refused: held by another identity", nil) == 0 {
		if time.Now().After(deadline) {
			m.dump()
			t.Fatal("no audit event for the refused registrations")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ws := m.workers(ctx)
	for _, id := range []string{"search-1", "math-b-1"} {
		if _, ok := ws[id]; ok {
			t.Errorf("%s registered", id)
		}
	}
	if _, ok := ws["pay-1"]; !ok {
		t.Error("the payments owner lost its registration")
	}
	if text, err := m.add(ctx); err != nil || text != "the answer is 42" {
		t.Errorf("math after the shadow attempt: %q, %v", text, err)
	}
}

// checkMTLSRefusalStatus sends registrations by hand, so that the status each one ends
// with is seen: an identity trust.workers does not list, one outside its grant, and a
// shadow of a tool another identity serves. Each is PERMISSION_DENIED and registers
// nothing.
func checkMTLSRefusalStatus(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	def := tool.New("credit", "Credit an account", schema.Empty(), nil).Definition()
	reg := func(role string) *toolpb.Registration {
		return &toolpb.Registration{WorkerId: "by-hand", Address: "127.0.0.1:1", Groups: []*toolpb.GroupRegistration{{
			Group: &toolpb.ToolGroupInfo{Role: role, Description: role, Version: "1"},
			Tools: []*toolpb.RegisteredTool{{Definition: wire.DefinitionToProto(def, tool.Metadata{}), ContentHash: wire.Hash(def, tool.Metadata{})}},
		}}}
	}
	for _, tc := range []struct {
		name, path, role string
	}{
		{"an identity not granted anything", "/worker/unknown", "payments"},
		{"a group outside the grant", "/worker/search", "payments"},
		{"a shadow of another identity's group", "/worker/math-b", "math"},
	} {
		src, err := trust.Load(m.pki.valid(t, "by-hand"+strings.ReplaceAll(tc.path, "/", "-"), tc.path), nil)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(m.orch.Addr, grpc.WithTransportCredentials(src.ClientCredentials(m.orchID())))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := toolpb.NewToolRegistryServiceClient(conn).Connect(ctx)
		if err == nil {
			// A Send the server has ended the stream before says io.EOF; Recv has the status.
			if err = stream.Send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: reg(tc.role)}}); errors.Is(err, io.EOF) {
				err = nil
			}
		}
		for err == nil {
			var resp *toolpb.ConnectResponse
			if resp, err = stream.Recv(); err == nil && resp.GetAck().GetAccepted() {
				t.Errorf("%s: the registration was accepted", tc.name)
			}
		}
		_ = conn.Close()
		src.Close()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: the registration ended with %v, want PERMISSION_DENIED", tc.name, err)
		}
	}
	if _, ok := m.workers(ctx)["by-hand"]; ok {
		t.Error("a refused registration is in the table")
	}
}

// checkMTLSDecoyAddress checks that a registration advertising an address whose
// certificate is not the registrant's is refused before the address sees a header.
func checkMTLSDecoyAddress(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	p := m.pki
	decoy, headers := startDecoy(t, p.valid(t, "decoy", "/decoy"))
	m.worker("pay-decoy", "payments", append(tlsArgs(p.valid(t, "worker-payments", "/worker/payments")), "--advertise", decoy)...)
	deadline := time.Now().Add(10 * time.Second)
	for m.orch.CountLogs("registration refused", map[string]string{"worker_id": "pay-decoy"}) == 0 {
		if time.Now().After(deadline) {
			m.dump()
			t.Fatal("the registration advertising the decoy was not refused")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := headers.Load(); n != 0 {
		t.Errorf("the decoy received %d requests' headers", n)
	}
	for _, l := range m.orch.Lines() {
		if strings.Contains(l, `"registration refused"`) && strings.Contains(l, "pay-decoy") && !strings.Contains(l, "want spiffe://"+trustDomain+"/worker/payments") {
			t.Errorf("pay-decoy was refused for another reason than the decoy's identity: %s", l)
		}
	}
	if _, ok := m.workers(ctx)["pay-decoy"]; ok {
		t.Error("pay-decoy registered")
	}
}

// checkMTLSWorkerCallers checks that a worker refuses every caller but the orchestrator.
func checkMTLSWorkerCallers(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	addr := m.workers(ctx)["math-1"].GetAddress()
	mathID, _ := trust.ParseID("spiffe://" + trustDomain + "/worker/math")
	req := &toolpb.InvokeRequest{Tool: "add", ArgumentsJson: `{"a":1,"b":2}`}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  codes.Code
	}{
		{"a client's certificate", m.client.ClientCredentials(mathID), codes.PermissionDenied},
		{"no certificate", credentials.NewTLS(noClientCert(m.client)), codes.Unauthenticated},
		{"plaintext", insecure.NewCredentials(), codes.Unavailable},
	} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tc.creds))
		if err != nil {
			t.Fatal(err)
		}
		_, err = toolpb.NewToolWorkerServiceClient(conn).Invoke(ctx, req)
		_ = conn.Close()
		if status.Code(err) != tc.want {
			t.Errorf("Invoke with %s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// checkMTLSExpired checks that a worker with an expired certificate does not register,
// and that one whose certificate expires loses its tools and is never let in again.
func checkMTLSExpired(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	p := m.pki
	m.worker("math-expired", "math", tlsArgs(p.issue(t, "worker-math-old", "/worker/math", time.Now().Add(-2*time.Hour), time.Hour))...)
	// Valid for 4 more seconds: it registers, then its tools leave with its certificate.
	m.worker("short-1", "echo_short", tlsArgs(p.issue(t, "worker-short", "/worker/short", time.Now().Add(-time.Minute), time.Minute+4*time.Second))...)
	m.waitWorker(ctx, "short-1", true)
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	m.waitWorker(wctx, "short-1", false)
	if _, ok := m.workers(ctx)["math-expired"]; ok {
		t.Error("a worker with an expired certificate registered")
	}
	if m.orch.CountLogs("worker lease ended: its certificate expired", map[string]string{"worker_id": "short-1"}) == 0 {
		t.Error("no audit event for the expired certificate")
	}
	// It keeps trying (every 200 ms), and is never let in again: not over the
	// connection it had, whose handshake showed the certificate while it was valid,
	// nor over a new one.
	time.Sleep(2 * time.Second)
	if n := m.orch.CountLogs("worker registered", map[string]string{"worker_id": "short-1"}); n != 1 {
		t.Errorf("short-1 registered %d times; want once, before its certificate expired", n)
	}
}

// checkMTLSRotation rotates every certificate on disk twice while runs go on, and checks
// that no run failed and that the orchestrator presents its new certificate.
func checkMTLSRotation(ctx context.Context, t *testing.T, m *tlsMesh) {
	t.Helper()
	p := m.pki
	var failed, ok atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil && ok.Load()+failed.Load() < 40 {
			if text, err := m.add(ctx); err != nil || text != "the answer is 42" {
				failed.Add(1)
				t.Logf("run during rotation: %q, %v", text, err)
			} else {
				ok.Add(1)
			}
		}
	}()
	var newOrch []byte
	for i := range 2 {
		time.Sleep(300 * time.Millisecond)
		f := p.valid(t, "orchestrator", "/orchestrator")
		p.valid(t, "worker-math", "/worker/math")
		p.valid(t, "client-dev", "/client/dev")
		newOrch = readCert(t, f.Cert)
		t.Logf("rotation %d written", i+1)
	}
	<-done
	if failed.Load() != 0 {
		t.Errorf("%d of %d runs failed while the certificates rotated", failed.Load(), failed.Load()+ok.Load())
	}
	// A new connection meets the orchestrator's new certificate.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := serverCert(t, m.orch.Addr, m.client)
		if slices.Equal(got, newOrch) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the orchestrator still presents its old certificate")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.orch.CountLogs("certificate reloaded", nil) == 0 {
		t.Error("the orchestrator logged no reload")
	}
	// New runs, whose call tokens the orchestrator signs with its new key, still run
	// over the connections made under its old certificate.
	for i := range 5 {
		if text, err := m.add(ctx); err != nil || text != "the answer is 42" {
			t.Errorf("run %d after the rotation: %q, %v", i, text, err)
		}
	}
}

// noClientCert is a TLS client configuration that verifies the server as s would but
// presents no certificate.
func noClientCert(s *trust.Source) *tls.Config {
	c := s.ClientTLS(nil)
	c.GetClientCertificate = nil
	return c
}

// startDecoy serves grpc.health.v1 (ToolWorkerService SERVING) with the certificate f
// and counts the requests whose headers reach it.
func startDecoy(t *testing.T, f trust.Files) (string, *atomic.Int64) {
	t.Helper()
	src, err := trust.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	headers := &atomic.Int64{}
	g := grpc.NewServer(grpc.Creds(src.ServerCredentials(false)), grpc.StatsHandler(headerCounter{headers}))
	hs := health.NewServer()
	hs.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), headers
}

type headerCounter struct{ n *atomic.Int64 }

func (h headerCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h headerCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InHeader); ok {
		h.n.Add(1)
	}
}
func (h headerCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h headerCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func readCert(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	return blk.Bytes
}

// serverCert is the certificate a new TLS connection to addr meets.
func serverCert(t *testing.T, addr string, s *trust.Source) []byte {
	t.Helper()
	cfg := s.ClientTLS(nil)
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// TestShortLivedCertificateRotation (catalogue S15, with a certificate that lives
// seconds): a worker's only certificate expires six seconds after it registers, and is
// renewed on disk after one and a half. Runs go on past the old certificate's expiry
// with no failed call and the worker never leaves the table: it moved its registration
// to a new connection, which shows the new certificate, before the orchestrator would
// have ended the lease of the old one.
func TestShortLivedCertificateRotation(t *testing.T) {
	m := startTLSMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := m.pki
	expires := time.Now().Add(6 * time.Second)
	m.worker("math-1", "math", tlsArgs(p.issue(t, "worker-math", "/worker/math", time.Now().Add(-time.Minute), time.Until(expires)+time.Minute))...)
	m.waitWorker(ctx, "math-1", true)

	var failed, ok atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil && time.Now().Before(expires.Add(4*time.Second)) {
			if text, err := m.add(ctx); err != nil || text != "the answer is 42" {
				failed.Add(1)
				t.Logf("run: %q, %v", text, err)
			} else {
				ok.Add(1)
			}
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	p.valid(t, "worker-math", "/worker/math") // the renewal, as cert-manager writes it
	<-done
	if failed.Load() != 0 || ok.Load() == 0 {
		m.dump()
		t.Errorf("%d of %d runs failed across the renewal and the old certificate's expiry", failed.Load(), failed.Load()+ok.Load())
	}
	if _, registered := m.workers(ctx)["math-1"]; !registered {
		t.Error("the worker left the table when its old certificate expired")
	}
	if m.orch.CountLogs("worker moved its registration to a new stream", map[string]string{"worker_id": "math-1"}) == 0 {
		t.Error("the worker did not move its registration to a new connection")
	}
	if n := m.orch.CountLogs("worker lease ended: its certificate expired", map[string]string{"worker_id": "math-1"}); n != 0 {
		t.Errorf("the orchestrator ended %d leases of the renewed worker for an expired certificate", n)
	}
	if n := m.orch.CountLogs("worker left the routing table", map[string]string{"worker_id": "math-1"}); n != 0 {
		t.Errorf("the worker left the routing table %d times", n)
	}
}
