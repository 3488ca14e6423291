package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// forgedTenant is what every client in these tests claims to be: under the key the
// README's worker once read (tenantId), under the key the orchestrator overwrites
// (tenant_id), and under toolmesh's reserved key.
var forgedTenant = map[string]string{"tenantId": "globex", "tenant_id": "globex", toolctx.TenantKey: "globex"}

// checkVerifiedTenant fails the test unless the echo e shows tenant under the reserved
// key and as tenant_id, and the reserved key travelled in no metadata entry.
func checkVerifiedTenant(t *testing.T, what string, e examplegroups.Echo, tenant string) {
	t.Helper()
	if got := e.Context[toolctx.TenantKey]; got != tenant {
		t.Errorf("%s: the worker read %s = %q; want the verified tenant %q (it saw %v)", what, toolctx.TenantKey, got, tenant, e.Context)
	}
	if got := e.Context["tenant_id"]; got != tenant {
		t.Errorf("%s: the worker read tenant_id = %q; want the verified tenant %q", what, got, tenant)
	}
	if _, ok := e.Metadata[ctxcodec.MetadataKey(toolctx.TenantKey)]; ok {
		t.Errorf("%s: %s travelled as call metadata: %v", what, toolctx.TenantKey, e.Metadata)
	}
}

// TestTenantReservedKey: a tenant's client that claims another tenant in the context
// (tenantId, tenant_id, toolmesh.tenant) never reaches a worker as that tenant. A context
// with the reserved key is refused before the run starts; without it, the worker reads
// the verified tenant under toolctx.TenantKey (and as tenant_id), whatever tenantId says.
func TestTenantReservedKey(t *testing.T) {
	sign := newSigner(t, "k1")
	m := startMesh(t, "tenantkey.yaml", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
  globex: {groups: [echo_globex]}
`, sign.jwks))
	m.startWorker("acme-1", "echo_acme")
	m.startWorker("globex-1", "echo_globex")
	as := func(tenant string) *client.Client {
		c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(sign.tenantToken(t, tenant), true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	acme, globex := as("acme"), as("globex")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitWorkerCount(ctx, t, acme, 1)
	waitWorkerCount(ctx, t, globex, 1)

	run := func(c *client.Client, req *toolpb.RunRequest) (examplegroups.Echo, error) {
		var final string
		for ev, err := range c.Run(ctx, req) {
			if err != nil {
				return examplegroups.Echo{}, err
			}
			if f := ev.GetFinalResult(); f != nil {
				final = f.GetText()
			}
		}
		var e examplegroups.Echo
		if err := json.Unmarshal([]byte(final), &e); err != nil {
			return e, fmt.Errorf("the run answered %q: %w", final, err)
		}
		return e, nil
	}

	// The whole forgery, at the run level or the interaction level: refused, since
	// toolmesh's keys are not the client's to send.
	for level, req := range map[string]*toolpb.RunRequest{
		"context":             {Prompt: "acme", ToolGroups: []string{"echo_acme"}, Context: forgedTenant},
		"interaction_context": {Prompt: "acme", ToolGroups: []string{"echo_acme"}, InteractionContext: forgedTenant},
	} {
		if _, err := run(acme, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), toolctx.TenantKey) {
			t.Errorf("acme's run with %s.%s = globex: %v; want INVALID_ARGUMENT naming the key", level, toolctx.TenantKey, err)
		}
	}
	if calls := workerCalls(t, acme); calls["acme-1"] != 0 {
		t.Fatalf("calls per worker %v; a refused run reached acme's worker", calls)
	}

	// The client's own keys claim globex: the worker still reads acme where it reads the
	// tenant.
	claims := map[string]string{"tenantId": "globex", "tenant_id": "globex"}
	e, err := run(acme, &toolpb.RunRequest{Prompt: "acme", ToolGroups: []string{"echo_acme"}, Context: claims, InteractionContext: claims})
	if err != nil {
		m.dump()
		t.Fatalf("acme's run: %v", err)
	}
	checkVerifiedTenant(t, "acme's run", e, "acme")
	// And the other tenant's run reads its own.
	e, err = run(globex, &toolpb.RunRequest{Prompt: "globex", ToolGroups: []string{"echo_globex"}, Context: map[string]string{"tenantId": "acme", "tenant_id": "acme"}})
	if err != nil {
		m.dump()
		t.Fatalf("globex's run: %v", err)
	}
	checkVerifiedTenant(t, "globex's run", e, "globex")
}

// TestMCPServeTenantReservedKey: through toolmesh's MCP endpoint, a tenant's session that
// claims another tenant in _meta (io.toolmesh/tenant, the key toolmesh sends MCP servers;
// toolmesh.tenant; tenantId; tenant_id) and in a context header reaches the worker as its
// verified tenant under toolctx.TenantKey, and the claim under io.toolmesh/tenant goes
// nowhere.
func TestMCPServeTenantReservedKey(t *testing.T) {
	sign := newSigner(t, "k1")
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", fmt.Sprintf(`
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [echo_acme]}
  globex: {groups: [echo_globex]}
mcp_serve:
  listen: %s
  context_headers: [Toolmesh.Tenant, X-Tenant-Id]
`, sign.jwks, addr))
	m.startWorker("acme-1", "echo_acme")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acmeTok := sign.tenantToken(t, "acme")
	admin, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(acmeTok, true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	waitWorkerCount(ctx, t, admin, 1)

	hc := &http.Client{Transport: headerRT{"Authorization": "Bearer " + acmeTok, "Toolmesh.Tenant": "globex", "X-Tenant-Id": "globex"}}
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, nil)
	session, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	meta := sdk.Meta{"io.toolmesh/tenant": "globex"}
	for k, v := range forgedTenant {
		meta[k] = v
	}
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "show_context_acme", Arguments: map[string]any{}, Meta: meta})
	if err != nil || res.IsError {
		m.dump()
		t.Fatalf("acme's call: %v %v", res, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	var e examplegroups.Echo
	if err := json.Unmarshal([]byte(text.String()), &e); err != nil {
		t.Fatalf("the echo answered %q: %v", text.String(), err)
	}
	checkVerifiedTenant(t, "acme's MCP call", e, "acme")
	if v, ok := e.Context["io.toolmesh/tenant"]; ok {
		t.Errorf("the client's _meta io.toolmesh/tenant = %q reached the worker; toolmesh's _meta keys are not the client's", v)
	}
}
