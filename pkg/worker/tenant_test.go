package worker

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// TestInvokeShowsVerifiedTenant: the tenant of InvokeRequest.tenant is what a tool reads
// under toolctx.TenantKey, as the loop id of InvokeRequest.loop_id is what it reads under
// toolctx.LoopIDKey; an entry of the call's metadata under that key (which the
// orchestrator never sends: it is the forgery of whoever reaches the worker's port) is
// dropped, with or without a tenant in the request. Client keys such as tenant_id are the
// client's: the worker shows them as they came.
func TestInvokeShowsVerifiedTenant(t *testing.T) {
	ctx := testContext(t)
	show := tool.New("show", "Shows its context.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		b, err := json.Marshal(toolctx.FromContext(ctx).Map())
		return tool.Text(string(b)), err
	}, tool.ReportsProgress())
	w := start(t, Options{ID: "w1"}, group(show))
	forged, err := ctxcodec.Codec{}.Encode(toolctx.MustOf(toolctx.TenantKey, "globex", "tenant_id", "globex", "tenantId", "globex"))
	if err != nil {
		t.Fatal(err)
	}
	mctx := metadata.NewOutgoingContext(ctx, forged)
	tests := []struct {
		name   string
		tenant string
		want   map[string]string
	}{
		{"a verified tenant", "acme", map[string]string{toolctx.TenantKey: "acme", toolctx.LoopIDKey: "l", "tenant_id": "globex", "tenantId": "globex"}},
		{"no verified tenant", "", map[string]string{toolctx.LoopIDKey: "l", "tenant_id": "globex", "tenantId": "globex"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &toolpb.InvokeRequest{Tool: "show", ArgumentsJson: `{}`, RunId: "r", LoopId: "l", CallId: "c", Tenant: tc.tenant}
			resp, err := w.client().Invoke(mctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(resp.GetText()), &got); err != nil {
				t.Fatalf("the tool answered %q: %v", resp.GetText(), err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Invoke: the tool saw (-want +got):\n%s", diff)
			}
			// InvokeStream restores the call the same way.
			stream, err := w.client().InvokeStream(mctx, &toolpb.InvokeStreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			var text string
			for {
				msg, err := stream.Recv()
				if err != nil {
					break
				}
				if r := msg.GetResult(); r != nil {
					text = r.GetText()
				}
			}
			got = nil
			if err := json.Unmarshal([]byte(text), &got); err != nil {
				t.Fatalf("the tool answered %q on the stream: %v", text, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("InvokeStream: the tool saw (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvokeTenantAgainstCallToken: with mutual TLS the request's tenant must be the one
// the call token names (a call naming another is refused before it runs); a request
// without one, from an orchestrator that does not send the field, shows the token's.
func TestInvokeTenantAgainstCallToken(t *testing.T) {
	load := testIdentities(t)
	orch := load("orchestrator", "/orchestrator")
	const me = "spiffe://worker.test/worker/text"
	show := tool.New("show", "Says its tenant.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tn, _ := toolctx.FromContext(ctx).Get(toolctx.TenantKey)
		return tool.Text("tenant=" + tn), nil
	})
	w := start(t, Options{TLS: load("worker", "/worker/text"), Orchestrators: []spiffeid.ID{orch.ID()}}, group(show))
	addr, _ := w.Addr(testContext(t))
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(orch.ClientCredentials(spiffeid.RequireFromString(me))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := toolpb.NewToolWorkerServiceClient(conn)
	soon := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name                 string
		tokenTenant, request string
		want                 string // the answer; "" for a refusal
	}{
		{"the same tenant", "acme", "acme", "tenant=acme"},
		{"no field", "acme", "", "tenant=acme"},
		{"no tenant at all", "", "", "tenant="},
		{"another tenant", "acme", "globex", ""},
		{"a tenant the token does not name", "", "globex", ""},
	} {
		ctx := withToken(t, testContext(t), orch, me, trust.CallClaims{Tool: "show", Tenant: tc.tokenTenant}, soon)
		resp, err := c.Invoke(ctx, &toolpb.InvokeRequest{Tool: "show", ArgumentsJson: "{}", Tenant: tc.request})
		switch {
		case tc.want == "" && status.Code(err) != codes.PermissionDenied:
			t.Errorf("%s: %v %v; want PERMISSION_DENIED", tc.name, resp, err)
		case tc.want != "" && (err != nil || resp.GetText() != tc.want):
			t.Errorf("%s: %v %v; want %q", tc.name, resp, err, tc.want)
		}
	}
}

// TestProgressThatIsNotUTF8: a report whose text is not UTF-8 reaches the orchestrator
// with its bad bytes replaced, and the call's result follows it; it failed the whole
// stream with a bare INTERNAL status (protocol buffers refuse to encode it).
func TestProgressThatIsNotUTF8(t *testing.T) {
	ctx := testContext(t)
	reports := tool.New("reports", "Reports its progress.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tool.Progress(ctx, "reading caf\xe9.txt")
		return tool.Text("done"), nil
	}, tool.ReportsProgress())
	w := start(t, Options{ID: "w1"}, group(reports))
	stream, err := w.client().InvokeStream(ctx, &toolpb.InvokeStreamRequest{Request: &toolpb.InvokeRequest{Tool: "reports", ArgumentsJson: `{}`, CallId: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream failed after %q: %v", got, err)
		}
		if p := msg.GetProgress(); p != nil {
			got = append(got, "progress: "+p.GetStatus())
		}
		if r := msg.GetResult(); r != nil {
			got = append(got, "result: "+r.GetText())
		}
	}
	if want := []string{"progress: reading caf\uFFFD.txt", "result: done"}; !cmp.Equal(got, want) {
		t.Errorf("stream = %q, want %q", got, want)
	}
}
