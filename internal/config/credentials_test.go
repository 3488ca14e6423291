package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// credentialsBase is a config a group's credentials can be added to: tenants, a token
// issuer, an MCP server over HTTP.
const credentialsBase = `
auth: {jwt: {jwks_file: /etc/jwks.json, issuer: "https://issuer.test", audience: toolmesh}}
tenants: {acme: {groups: [billing, docs]}}
mcp_servers: {docs: {url: "https://docs.example.com/mcp"}, local: {command: docs-mcp}}
`

func TestCredentialsConfig(t *testing.T) {
	c, err := Parse([]byte(credentialsBase + `
groups:
  billing:
    context: {kind: allow-keys, keys: [user_token]}
    token_exchange:
      token_endpoint: https://idp.example.com/oauth2/token
      client_id: toolmesh
      client_secret_file: /etc/toolmesh/idp-secret
      audience: billing-api
      scope: "billing.read billing.write"
      context_key: user_token
  docs:
    mcp: {server: docs}
    secrets: {dir: /var/run/secrets/docs, headers: {api_key: X-Api-Key}}
`))
	if err != nil {
		t.Fatal(err)
	}
	x := c.ExchangeFor("billing")
	if x == nil || x.ClientAuth != ClientSecretBasic || x.RequestedTokenType != DefaultTokenType || x.SubjectTokenType != DefaultTokenType ||
		x.Timeout.D() != 10*time.Second || x.RefreshBefore.D() != 30*time.Second || x.MaxCached != 4096 {
		t.Errorf("ExchangeFor(billing) = %+v, want the defaults filled in", x)
	}
	if s := c.SecretsFor("docs"); s == nil || s.ReloadInterval.D() != time.Second || s.Headers["api_key"] != "X-Api-Key" {
		t.Errorf("SecretsFor(docs) = %+v", s)
	}
	if c.ExchangeFor("docs") != nil || c.SecretsFor("billing") != nil || c.ExchangeFor("math") != nil {
		t.Error("a group without credentials has some")
	}
}

func TestCredentialsConfigErrors(t *testing.T) {
	exchange := func(fields string) string {
		return "groups: {billing: {context: {kind: allow-keys, keys: [tok]}, token_exchange: {" + fields + "}}}"
	}
	const ok = "token_endpoint: 'https://idp.test/token', client_id: tm, client_secret_file: /s, audience: api, context_key: tok"
	cases := []struct{ yaml, key, want string }{
		{exchange("client_id: tm, client_secret_file: /s, audience: api, context_key: tok"), "groups.billing.token_exchange.token_endpoint", "is required"},
		{exchange(strings.Replace(ok, "https://idp.test", "http://idp.test", 1)), "groups.billing.token_exchange.token_endpoint", "https URL"},
		{exchange(strings.Replace(ok, "https://idp.test", "https://u:p@idp.test", 1)), "groups.billing.token_exchange.token_endpoint", "without user info"},
		{exchange(strings.Replace(ok, "client_id: tm,", "", 1)), "groups.billing.token_exchange.client_id", "is required"},
		{exchange(strings.Replace(ok, "client_secret_file: /s,", "", 1)), "groups.billing.token_exchange.client_secret_file", "is required"},
		{exchange(ok + ", client_auth: private_key_jwt"), "groups.billing.token_exchange.client_auth", "client_secret_basic or client_secret_post"},
		{exchange(strings.Replace(ok, "audience: api,", "", 1)), "groups.billing.token_exchange", "needs audience or resource"},
		{exchange(ok + ", resource: 'not a uri'"), "groups.billing.token_exchange.resource", "absolute URI"},
		{exchange(ok + ", scope: 'a  b'"), "groups.billing.token_exchange.scope", "scope tokens"},
		{exchange(ok + ", requested_token_type: jwt"), "groups.billing.token_exchange.requested_token_type", "token type URI"},
		{exchange(strings.Replace(ok, ", context_key: tok", "", 1)), "groups.billing.token_exchange", "needs context_key or header"},
		{exchange(strings.Replace(ok, "context_key: tok", "context_key: other", 1)), "groups.billing.token_exchange.context_key", "allow-keys converter that lists it"},
		{exchange(strings.Replace(ok, "context_key: tok", "context_key: toolmesh.tenant", 1)), "groups.billing.token_exchange.context_key", "not starting with"},
		{exchange(ok + ", header: Authorization"), "groups.billing.token_exchange.header", "MCP groups over streamable HTTP"},
		{exchange(ok + ", timeout: 5m"), "groups.billing.token_exchange.timeout", "between 0s"},
		{exchange(ok + ", refresh_before: 2h"), "groups.billing.token_exchange.refresh_before", "between 0s"},
		{exchange(ok + ", max_cached: -1"), "groups.billing.token_exchange.max_cached", "between 0"},
		{exchange(strings.Replace(ok, "https://idp.test", "http://127.0.0.1:9", 1) + ", ca_file: /ca.pem"), "groups.billing.token_exchange.ca_file", "needs an https"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {headers: {api_key: X-Api-Key}}}}", "groups.docs.secrets.dir", "is required"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {dir: /d}}}", "groups.docs.secrets", "needs context_keys or headers"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {dir: /d, headers: {..data: X-Key}}}}", "groups.docs.secrets.headers...data", "not starting with a dot"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {dir: /d, headers: {k: 'X Key'}}}}", "groups.docs.secrets.headers.k", "HTTP header name"},
		{"groups: {docs: {mcp: {server: local}, secrets: {dir: /d, headers: {k: X-Key}}}}", "groups.docs.secrets.headers.k", "streamable HTTP"},
		{"groups: {docs: {secrets: {dir: /d, context_keys: {k: x-key}}}}", "groups.docs.secrets.context_keys.k", "allow-keys"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {dir: /d, headers: {k: X-Key}, reload_interval: 2h}}}", "groups.docs.secrets.reload_interval", "between 0s"},
		{"groups: {docs: {mcp: {server: docs}, secrets: {dir: /d, headers: {k: X-Key}}, token_exchange: {" + ok + "}}}", "groups.docs", "exclusive"},
		{"groups: {mine: {include: [billing/*], context: {kind: allow-keys, keys: [tok]}, token_exchange: {" + ok + "}}}", "groups.mine", "include"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(credentialsBase + tc.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s)\n = %v\nwant an error naming %s: …%s…", tc.yaml, err, tc.key, tc.want)
		}
	}
	if _, err := Parse([]byte("groups: {docs: {mcp: {server: docs}, secrets: {dir: /d, headers: {k: X-Key}}}}\nmcp_servers: {docs: {url: 'https://d.test/mcp'}}")); err == nil ||
		!strings.Contains(err.Error(), "groups.docs.secrets: needs tenants") {
		t.Errorf("secrets without tenants: %v", err)
	}
}
