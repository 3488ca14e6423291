package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// testIdentities issues certificates of one test CA: load(name, path) is the Source of
// spiffe://worker.test/path.
func testIdentities(t *testing.T) func(name, path string) *trust.Source {
	t.Helper()
	ca, err := devca.NewCA("worker.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return func(name, path string) *trust.Source {
		t.Helper()
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
}

// A worker skips validating arguments the orchestrator validated against the very
// definition it serves only when mutual TLS proved the caller is the orchestrator: a
// plaintext worker, or a hash of another definition, validates as always.
func TestValidatedArguments(t *testing.T) {
	issue := testIdentities(t)
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
		ctx := testContext(t)
		if tc.client == viaTLS {
			ctx = withToken(t, ctx, orch, "spiffe://worker.test/worker/text", trust.CallClaims{Tool: "echo"}, time.Now().Add(time.Minute))
		}
		resp, err := tc.client.Invoke(ctx, &toolpb.InvokeRequest{Tool: "echo", ArgumentsJson: invalid, ValidatedDefinitionHash: tc.hash})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ran := resp.GetText() == invalid
		if ran != tc.skipped {
			t.Errorf("%s: the tool ran: %v (response %v); want the arguments validated: %v", tc.name, ran, resp, !tc.skipped)
		}
	}
}

// withToken adds a call token minted by src to the outgoing metadata.
func withToken(t *testing.T, ctx context.Context, src *trust.Source, audience string, claims trust.CallClaims, deadline time.Time) context.Context {
	t.Helper()
	tok, err := src.MintCallToken(audience, claims, deadline)
	if err != nil {
		t.Fatal(err)
	}
	return metadata.AppendToOutgoingContext(ctx, trust.CallTokenHeader, tok)
}

// With mutual TLS a call runs only with a token the orchestrator minted for this worker,
// this tool and a deadline to come; the tenant it vouches for reaches the tool.
func TestCallTokens(t *testing.T) {
	load := testIdentities(t)
	orch, impostor := load("orchestrator", "/orchestrator"), load("impostor", "/orchestrator-b")
	const me = "spiffe://worker.test/worker/text"
	whoami := tool.New("whoami", "Says its tenant.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tn, ok := Tenant(ctx)
		return tool.Text(fmt.Sprintf("%s %v", tn, ok)), nil
	})
	w := start(t, Options{TLS: load("worker", "/worker/text"), Orchestrators: []spiffeid.ID{orch.ID()}}, group(whoami, echo()))
	addr, _ := w.Addr(testContext(t))
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(orch.ClientCredentials(spiffeid.RequireFromString(me))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := toolpb.NewToolWorkerServiceClient(conn)
	soon := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string // the answer, or the refusal
	}{
		{"a valid token", withToken(t, testContext(t), orch, me, trust.CallClaims{Tool: "whoami", Tenant: "acme"}, soon), "acme true"},
		{"no tenant", withToken(t, testContext(t), orch, me, trust.CallClaims{Tool: "whoami"}, soon), " false"},
		{"no token", testContext(t), "no call token"},
		{"another audience", withToken(t, testContext(t), orch, "spiffe://worker.test/worker/other", trust.CallClaims{Tool: "whoami"}, soon), "audience"},
		{"another tool", withToken(t, testContext(t), orch, me, trust.CallClaims{Tool: "echo"}, soon), `for tool "echo", not "whoami"`},
		{"expired", withToken(t, testContext(t), orch, me, trust.CallClaims{Tool: "whoami"}, time.Now().Add(-time.Minute)), "expired"},
		{"signed by another key", withToken(t, testContext(t), impostor, me, trust.CallClaims{Tool: "whoami"}, soon), "not valid"},
	} {
		resp, err := c.Invoke(tc.ctx, &toolpb.InvokeRequest{Tool: "whoami", ArgumentsJson: "{}"})
		got := resp.GetText()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
