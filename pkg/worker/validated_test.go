package worker

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// A worker skips validating arguments the orchestrator validated against the very
// definition it serves only when mutual TLS proved the caller is the orchestrator: a
// plaintext worker, or a hash of another definition, validates as always.
func TestValidatedArguments(t *testing.T) {
	ca, err := trust.NewCA("worker.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issue := func(name, path string) *trust.Source {
		leaf, err := ca.Issue(path, time.Now().Add(-time.Minute), time.Hour, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.Write(filepath.Join(dir, name), name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		s, err := trust.Load(f, discard())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	orch := issue("orchestrator", "/orchestrator")
	e := echo()
	hash := wire.Hash(e.Definition(), e.Metadata())
	invalid := `{"text":1}` // text must be a string

	plain := start(t, Options{}, group(e))
	tls := start(t, Options{TLS: issue("worker", "/worker/text"), Orchestrators: []spiffeid.ID{orch.ID()}}, group(e))
	addr, _ := tls.Addr(testContext(t))
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(orch.ClientCredentials(spiffeid.RequireFromString("spiffe://worker.test/worker/text"))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	viaTLS := toolpb.NewToolWorkerServiceClient(conn)

	for _, tc := range []struct {
		name    string
		client  toolpb.ToolWorkerServiceClient
		hash    string
		skipped bool
	}{
		{"mutual TLS, the same definition", viaTLS, hash, true},
		{"mutual TLS, another definition", viaTLS, "0123", false},
		{"mutual TLS, not validated", viaTLS, "", false},
		{"plaintext, the same definition", plain.client(), hash, false},
	} {
		resp, err := tc.client.Invoke(testContext(t), &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: invalid, ValidatedDefinitionHash: tc.hash})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ran := resp.GetText() == invalid
		if ran != tc.skipped {
			t.Errorf("%s: the tool ran: %v (response %v); want the arguments validated: %v", tc.name, ran, resp, !tc.skipped)
		}
	}
}
