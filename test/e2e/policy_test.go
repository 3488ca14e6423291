package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// policyConfig denies large charges to everyone and every charge to a token without the
// payments:charge scope; credit has no rule.
const policyConfig = `
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [payments]}
mcp_serve:
  listen: %s
groups:
  payments:
    policy:
      - when: 'tool == "charge" && args.cents > 1000'
        effect: deny
        reason: Charges over 1000 cents go through the finance desk.
      - when: 'tool == "charge" && !("payments:charge" in scopes)'
        effect: deny
        reason: Your token does not allow charges.
`

// chargeDenied is what the model reads of a charge the policy's second rule denies.
const chargeDenied = "The call of tool 'charge' was denied by policy, so it did not run. Reason: Your token does not allow charges. Do not call it again with the same arguments."

// TestCallPolicy: a CEL call policy over the tool, its arguments and the caller's token,
// through a real orchestrator, a real worker and real clients. In a run, the charge the
// policy denies never reaches the worker and the model reads why; the one it allows runs.
// ListTools and the MCP endpoint's tools/list show a caller only what it may call, and a
// call through the MCP endpoint is decided as a run's is.
func TestCallPolicy(t *testing.T) {
	m, sign, addr := paymentsMesh(t, "policy.yaml", policyConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tokenWith := func(scope string) string { return sign.acmeToken(t, "user-1", scope) }
	payer := dialPayments(ctx, t, m, tokenWith("payments:charge"))
	var evs []*toolpb.RunResponse
	for ev, err := range payer.Run(ctx, &toolpb.RunRequest{Prompt: "charge bob", ToolGroups: []string{"payments"}}) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	done := finished(evs, 0)
	if len(done) != 2 || done[0].GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR || done[0].GetContent() != "Error: The call of tool 'charge' was denied by policy, so it did not run. Reason: Charges over 1000 cents go through the finance desk. Do not call it again with the same arguments." ||
		done[1].GetContent() != "charged 200 cents to bob" {
		t.Fatalf("calls %v", done)
	}
	if got := finalText(t, evs); got != "charge: charged 200 cents to bob" {
		t.Errorf("final text %q", got)
	}
	if calls := workerCalls(t, payer); calls["pay-1"] != 1 {
		t.Errorf("the worker served %d calls, want 1: the denied charge never left", calls["pay-1"])
	}

	// Listings: a token without the scope is not shown charge.
	reader, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(tokenWith("payments:read"), true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()
	for name, tc := range map[string]struct {
		c    *client.Client
		want []string
	}{"payer": {payer, []string{"charge", "credit"}}, "reader": {reader, []string{"credit"}}} {
		infos, err := tc.c.ListTools(ctx, "payments")
		var names []string
		for _, i := range infos {
			names = append(names, i.GetDefinition().GetName())
		}
		slices.Sort(names)
		if err != nil || !slices.Equal(names, tc.want) {
			t.Errorf("%s: ListTools %v, %v; want %v", name, names, err, tc.want)
		}
	}
	// A reader's run is offered charge, and each call is decided: the second rule denies
	// the small charge the payer's run made.
	var readerEvs []*toolpb.RunResponse
	for ev, err := range reader.Run(ctx, &toolpb.RunRequest{Prompt: "charge bob", ToolGroups: []string{"payments"}}) {
		if err != nil {
			t.Fatal(err)
		}
		readerEvs = append(readerEvs, ev)
	}
	if done := finished(readerEvs, 0); len(done) != 2 || done[1].GetContent() != "Error: "+chargeDenied {
		t.Errorf("the reader's calls %v; want the second denied: %q", done, chargeDenied)
	}
	if calls := workerCalls(t, payer); calls["pay-1"] != 1 {
		t.Errorf("the worker served %d calls, want still 1", calls["pay-1"])
	}
	checkPolicyOverMCP(ctx, t, "http://"+addr+"/", tokenWith("payments:read"), tokenWith("payments:charge"))
}

// checkPolicyOverMCP: the MCP endpoint lists charge only to a token that may call it, and
// decides its calls: a reader's call is denied with the policy's reason, a payer's large
// charge too, a payer's small one runs.
func checkPolicyOverMCP(ctx context.Context, t *testing.T, endpoint, readerTok, payerTok string) {
	t.Helper()
	for _, tc := range []struct {
		name, token string
		listed      bool
		cents       int
		want        string
		isError     bool
	}{
		{"reader", readerTok, false, 10, "", true},
		{"payer, large", payerTok, true, 5000, "The call of tool 'charge' was denied by policy, so it did not run. Reason: Charges over 1000 cents go through the finance desk. Do not call it again with the same arguments.", true},
		{"payer, small", payerTok, true, 10, "charged 10 cents to carol", false},
	} {
		s, err := connectMCPServe(ctx, endpoint, tc.token)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tools, err := s.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		listed := slices.ContainsFunc(tools.Tools, func(x *sdk.Tool) bool { return x.Name == "charge" })
		if listed != tc.listed {
			t.Errorf("%s: charge listed %v, want %v", tc.name, listed, tc.listed)
		}
		res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"account": "carol", "cents": tc.cents}})
		switch {
		case !tc.listed:
			// Not offered to this session, so not callable at all: the endpoint refuses
			// the call as it does any tool it does not offer.
			if err == nil || !strings.Contains(err.Error(), `unknown tool "charge"`) {
				t.Errorf("%s: calling charge: %v, %v; want it refused as an unknown tool", tc.name, res, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case res.IsError != tc.isError || mcpServeText(res) != tc.want:
			t.Errorf("%s: %q (error %v), want %q", tc.name, mcpServeText(res), res.IsError, tc.want)
		}
		_ = s.Close()
	}
}

// stepUpConfig grants charge to the payments:charge scope, credit to payments:read and
// every tool to admin; it denies charge to user-2 whatever its token's scopes, and a large
// charge to a token without admin.
const stepUpConfig = `
auth:
  jwt: {jwks_file: %q, issuer: "https://issuer.test", audience: toolmesh}
tenants:
  acme: {groups: [payments]}
mcp_serve:
  listen: %s
  scopes: {"payments:charge": [charge], "payments:read": [credit], admin: ["*"]}
groups:
  payments:
    policy:
      - when: 'tool == "charge" && caller == "https://issuer.test#user-2"'
        effect: deny
        reason: user-2 does not charge.
      - when: 'tool == "charge" && args.cents > 1000 && !("admin" in scopes)'
        effect: deny
        reason: Large charges need admin.
`

// TestMCPStepUpNamesOnlyWhatMoreScopesReach: the MCP endpoint's step-up challenge (403
// insufficient_scope) is for a tool more scopes would let the caller call, and asks for
// the narrowest scope under which the tool's call policy lets this very call go on
// (payments:charge for a small charge, admin for a large one); it is for no other: not
// for one a call policy denies the caller whatever its scopes, one no scope grants, a
// name the SDK would not read as a tools/call, a batch, or a version the endpoint does
// not serve. Its body is a JSON-RPC
// error for the call, so that a client without an OAuth flow keeps its session (the SDK
// closed a session whose request got a 403 in plain text).
func TestMCPStepUpNamesOnlyWhatMoreScopesReach(t *testing.T) {
	m, sign, addr := paymentsMesh(t, "", stepUpConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	token := func(sub string) string { return sign.acmeToken(t, sub, "payments:read") }
	dialPayments(ctx, t, m, token("ops"))
	call := func(name string, cents ...int) string {
		args := "{}"
		if len(cents) > 0 {
			args = fmt.Sprintf(`{"account":"a","cents":%d}`, cents[0])
		}
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
	}
	endpoint := "http://" + addr + "/"
	for _, tc := range []struct {
		name, sub, body, version string
		challenged               bool
		scope                    string
	}{
		{"a small charge", "user-1", call("charge", 10), "", true, "payments:charge payments:read"},
		{"a large charge", "user-1", call("charge", 5000), "", true, "admin payments:read"},
		{"a tool a policy denies whatever the scopes", "user-2", call("charge", 10), "", false, ""},
		{"a tool no scope grants", "user-1", call("nope"), "", false, ""},
		{"keys the SDK does not read", "user-1", `{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"NAME":"charge"}}`, "", false, ""},
		{"a batch", "user-1", "[" + call("charge", 10) + "]", "2025-03-26", false, ""},
		{"a stateless request", "user-1", call("charge", 10), "2026-07-28", true, "payments:charge payments:read"},
		{"a version the endpoint does not serve", "user-1", call("charge", 10), "2027-01-01", false, ""},
	} {
		code, body, h := mcpExchange(ctx, t, endpoint, token(tc.sub), "", tc.body, "Mcp-Protocol-Version", tc.version, "Mcp-Method", "tools/call", "Mcp-Name", "charge")
		challenge := h.Get("WWW-Authenticate")
		if got := code == http.StatusForbidden && strings.Contains(challenge, `error="insufficient_scope"`); got != tc.challenged {
			t.Errorf("%s: HTTP %d, challenge %q; want challenged %v", tc.name, code, challenge, tc.challenged)
		}
		if tc.challenged && (!strings.Contains(challenge, `scope="`+tc.scope+`"`) || !strings.Contains(body, `"error"`) || !strings.Contains(body, `"id":1`)) {
			t.Errorf("%s: challenge %q, body %s; want scope %q and a JSON-RPC error for the call", tc.name, challenge, body, tc.scope)
		}
	}
	// A client with a fixed token, no OAuth flow: the call is refused, the session goes on.
	session, err := connectMCPServe(ctx, endpoint, token("user-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	if _, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"account": "a", "cents": 1}}); err == nil || !strings.Contains(err.Error(), "payments:charge") {
		t.Errorf("a charge with payments:read: %v; want refused, naming the scope that grants it", err)
	}
	if res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "credit", Arguments: map[string]any{"account": "a", "cents": 1}}); err != nil || res.IsError {
		t.Errorf("a credit in the same session after the refusal: %v, %v; want it served", res, err)
	}
}

// paymentsMesh starts a mesh of config (a format of the key set's file and the MCP
// endpoint's address) and script, with a worker of the payments group, pay-1; it returns
// the mesh, the signer of its tokens and the MCP endpoint's address.
func paymentsMesh(t *testing.T, script, config string) (*mesh, *signer, string) {
	t.Helper()
	sign := newSigner(t, "k1")
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, script, fmt.Sprintf(config, sign.jwks, addr))
	m.startWorker("pay-1", "payments")
	return m, sign, addr
}

// acmeToken is a token of tenant acme for sub, with scope, for the gRPC API.
func (s *signer) acmeToken(t *testing.T, sub, scope string) string {
	return s.token(t, jwt.MapClaims{"iss": "https://issuer.test", "aud": "toolmesh", "sub": sub, "tenant": "acme",
		"scope": scope, "exp": time.Now().Add(time.Hour).Unix()})
}

// dialPayments is a client of m's orchestrator with token, once pay-1 has registered.
func dialPayments(ctx context.Context, t *testing.T, m *mesh, token string) *client.Client {
	t.Helper()
	c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(token, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := harness.WaitWorkers(ctx, c, "pay-1"); err != nil {
		m.dump()
		t.Fatal(err)
	}
	return c
}
