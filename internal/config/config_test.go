package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestParseEmptyGivesDefaults(t *testing.T) {
	for _, doc := range []string{"", "\n", "# only a comment\n", "{}"} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%q) = %v", doc, err)
		}
		if diff := cmp.Diff(Default(), c); diff != "" {
			t.Errorf("Parse(%q) differs from Default() (-want +got):\n%s", doc, diff)
		}
	}
}

func TestParseOverridesOnlyWhatIsGiven(t *testing.T) {
	c, err := Parse([]byte(`
listen: 0.0.0.0:9090
tls: {plaintext: true}
registry:
  heartbeat_interval: 500ms
  lease_ttl: 2s
router:
  max_attempts: 5
  eject_duration: 1m30s
loop:
  run_timeout: 1h
log:
  level: DEBUG
  format: text
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen = "0.0.0.0:9090"
	want.Registry.HeartbeatInterval = Duration(500 * time.Millisecond)
	want.Registry.LeaseTTL = Duration(2 * time.Second)
	want.Router.MaxAttempts = 5
	want.Router.EjectDuration = Duration(90 * time.Second)
	want.Loop.RunTimeout = Duration(time.Hour)
	want.Log = Log{Level: "DEBUG", Format: "text"}
	want.TLS.Plaintext = true
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDurations(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"2s", 2 * time.Second},
		{"150ms", 150 * time.Millisecond},
		{"10m", 10 * time.Minute},
		{"1h2m3s", time.Hour + 2*time.Minute + 3*time.Second},
		{`"750us"`, 750 * time.Microsecond},
	} {
		c, err := Parse([]byte("router:\n  default_tool_timeout: " + tc.in + "\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := c.Router.DefaultToolTimeout.D(); got != tc.want {
			t.Errorf("%s parsed as %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestBadDurationNamesKeyAndLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"5", "missing unit"},
		{"soon", "invalid duration"},
		{"[1s]", "duration must be a string"},
	} {
		_, err := Parse([]byte("listen: 127.0.0.1:1\nrouter:\n  max_attempts: 2\n  eject_duration: " + tc.in + "\n"))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: err = %v, want ErrInvalid", tc.in, err)
		}
		for _, want := range []string{"line 4", "router.eject_duration", tc.want} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not mention %q", tc.in, err, want)
			}
		}
	}
}

func TestUnknownKeyIsAnErrorWithLine(t *testing.T) {
	_, err := Parse([]byte("listen: 127.0.0.1:1\nrouter:\n  max_tries: 3\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"line 3", "max_tries", "router.max_tries"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestWrongTypeNamesKey(t *testing.T) {
	_, err := Parse([]byte("loop:\n  max_iterations: many\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"line 2", "loop.max_iterations"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestValidateNamesEachKey(t *testing.T) {
	tests := []struct {
		key    string
		mutate func(*Config)
	}{
		{"listen", func(c *Config) { c.Listen = "" }},
		{"listen", func(c *Config) { c.Listen = "nohost" }},
		{"listen", func(c *Config) { c.Listen = "127.0.0.1:99999" }},
		{"registry.heartbeat_interval", func(c *Config) { c.Registry.HeartbeatInterval = 0 }},
		{"registry.lease_ttl", func(c *Config) { c.Registry.LeaseTTL = -1 }},
		{"registry.lease_ttl", func(c *Config) { c.Registry.LeaseTTL = c.Registry.HeartbeatInterval }},
		{"registry.grace_period", func(c *Config) { c.Registry.GracePeriod = -1 }},
		// A lease of 2ns passed, and the first run's renewer panicked (a ticker of 0).
		{"journal.lease_ttl", func(c *Config) { c.Journal.LeaseTTL = 2 }},
		{"journal.lease_ttl", func(c *Config) { c.Journal.LeaseTTL = Duration(99 * time.Millisecond) }},
		// An owner over the documented 256 bytes passed, and every run was then refused
		// for its run_id by the store's bound.
		{"journal.owner", func(c *Config) { c.Journal.Owner = strings.Repeat("o", 257) }},
		{"journal.owner", func(c *Config) { c.Journal.Owner = "o\x00" }},
		{"registry.grace_period", func(c *Config) { c.Registry.GracePeriod = 0 }},
		{"registry.readiness_grace", func(c *Config) { c.Registry.ReadinessGrace = -1 }},
		{"registry.readiness_grace", func(c *Config) { c.Registry.ReadinessGrace = Duration(11 * time.Minute) }},
		{"router.default_tool_timeout", func(c *Config) { c.Router.DefaultToolTimeout = 0 }},
		{"router.eject_after_failures", func(c *Config) { c.Router.EjectAfterFailures = 0 }},
		{"router.eject_duration", func(c *Config) { c.Router.EjectDuration = 0 }},
		{"router.max_attempts", func(c *Config) { c.Router.MaxAttempts = 0 }},
		{"router.max_attempts", func(c *Config) { c.Router.MaxAttempts = 11 }},
		{"loop.max_iterations", func(c *Config) { c.Loop.MaxIterations = 0 }},
		{"loop.max_parallel_tool_calls", func(c *Config) { c.Loop.MaxParallelToolCalls = 0 }},
		{"loop.run_timeout", func(c *Config) { c.Loop.RunTimeout = 0 }},
		{"loop.empty_response_retries", func(c *Config) { c.Loop.EmptyResponseRetries = -1 }},
		{"loop.max_concurrent_runs", func(c *Config) { c.Loop.MaxConcurrentRuns = 0 }},
		{"loop.retain_runs", func(c *Config) { c.Loop.RetainRuns = -1 }},
		{"loop.max_tool_result_bytes", func(c *Config) { c.Loop.MaxToolResultBytes = 100 }},
		// The endpoint's caller's own bearer token reached a worker verbatim: MCP forbids
		// passing a token on.
		{"mcp_serve.context_headers[1]", func(c *Config) { c.MCPServe.ContextHeaders = []string{"X-Request-Id", "authorization"} }},
		{"mcp_serve.context_headers[0]", func(c *Config) { c.MCPServe.ContextHeaders = []string{"Cookie"} }},
		{"groups.x.facades[0].matching[0]", func(c *Config) {
			c.Groups = map[string]Group{"x": {Facades: []SubFacade{{Name: "f", Description: "d", Matching: []string{"("}}}}}
		}},
		{"groups.x.include[0]", func(c *Config) { c.Groups = map[string]Group{"x": {Include: []string{"no-slash"}}} }},
		{"groups.x.exclude", func(c *Config) { c.Groups = map[string]Group{"x": {Exclude: []string{"a/b"}}} }},
		{"groups.x.offer", func(c *Config) { c.Groups = map[string]Group{"x": {Offer: "sideways"}} }},
		{"groups.x.offer", func(c *Config) { c.Groups = map[string]Group{"x": {Offer: "flat", Facade: &GroupFacade{}}} }},
		{"groups.x.mcp.server", func(c *Config) { c.Groups = map[string]Group{"x": {MCP: &GroupMCP{Server: "nope"}}} }},
		{"groups.x.mcp.include[0]", func(c *Config) {
			c.MCPServers = map[string]MCPServer{"s": {URL: "http://127.0.0.1:1/"}}
			c.Groups = map[string]Group{"x": {MCP: &GroupMCP{Server: "s", Include: []string{"[bad"}}}}
		}},
		{"groups.x.mcp.filter", func(c *Config) {
			c.MCPServers = map[string]MCPServer{"s": {URL: "http://127.0.0.1:1/"}}
			c.Groups = map[string]Group{"x": {MCP: &GroupMCP{Server: "s", Filter: `name + "x"`}}}
		}},
		{"mcp_serve.resource", func(c *Config) { c.MCPServe.Resource = "https://mesh.example/mcp" }}, // no auth.jwt
		{"mcp_serve.resource", func(c *Config) {
			c.Auth.JWT.Issuer, c.MCPServe.Resource = "https://issuer.test", "http://mesh.example/mcp" // plaintext off loopback
		}},
		{"mcp_serve.resource", func(c *Config) {
			c.Auth.JWT.Issuer, c.MCPServe.Resource = "https://issuer.test", "https://mesh.example/mcp#frag"
		}},
		{"console.trace_url", func(c *Config) { c.Console.TraceURL = "https://jaeger.example/trace/" }}, // no {trace_id}
		{"groups.x.policy", func(c *Config) {
			c.Groups = map[string]Group{"x": {Policy: []PolicyRule{{When: "true", Effect: "block"}}}}
		}},
		{"groups.x.policy", func(c *Config) {
			c.Groups = map[string]Group{"x": {Policy: []PolicyRule{{When: "args.a +", Effect: "deny"}}}}
		}},
		{"tools.t.policy", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Policy: []PolicyRule{{When: `tool`, Effect: "deny"}}}}
		}},
		{"tools.t.policy", func(c *Config) { c.Tools = map[string]Tool{"t": {Policy: make([]PolicyRule, 33)}} }},
		{"groups.x.mcp.exclude_when", func(c *Config) {
			c.MCPServers = map[string]MCPServer{"s": {URL: "http://127.0.0.1:1/"}}
			c.Groups = map[string]Group{"x": {MCP: &GroupMCP{Server: "s", ExcludeWhen: `name.startsWith(`}}}
		}},
		{"groups.x.context", func(c *Config) { c.Groups = map[string]Group{"x": {Context: &ConverterSpec{Kind: "cel", Keep: "key"}}} }},
		{"groups.x.context", func(c *Config) { c.Groups = map[string]Group{"x": {Context: &ConverterSpec{Kind: "cel"}}} }},
		{"context.default.keys", func(c *Config) { c.Context.Default = ConverterSpec{Kind: "cel", Keep: "true", Keys: []string{"a"}} }},
		{"context.default.set.toolmesh.x", func(c *Config) {
			c.Context.Default = ConverterSpec{Kind: "cel", Set: map[string]string{"toolmesh.x": `"v"`}}
		}},
		{"context.default", func(c *Config) { c.Context.Default = ConverterSpec{Kind: "allow-keys", Keep: "true"} }},
		{"mcp_servers.s", func(c *Config) { c.MCPServers = map[string]MCPServer{"s": {URL: "http://a/", Command: "x"}} }},
		{"mcp_servers.s.url", func(c *Config) { c.MCPServers = map[string]MCPServer{"s": {URL: "ftp://a/"}} }},
		{"provider.anthropic.stream", func(c *Config) { f := false; c.Provider.Anthropic.Stream = &f }},
		{"loop.max_artifact_bytes", func(c *Config) { c.Loop.MaxArtifactBytes = 10 }},
		{"loop.max_blackboard_entries", func(c *Config) { c.Loop.MaxBlackboardEntries = 0 }},
		{"loop.max_blackboard_bytes", func(c *Config) { c.Loop.MaxBlackboardBytes = 1 }},
		{"loop.default_tool_groups[1]", func(c *Config) { c.Loop.DefaultToolGroups = []string{"ok", "not a role"} }},
		{"server.max_receive_bytes", func(c *Config) { c.Server.MaxReceiveBytes = 1 << 20 }},
		{"server.max_inflight_receive_bytes", func(c *Config) { c.Server.MaxInflightReceiveBytes = c.Server.MaxReceiveBytes - 1 }},
		{"server.max_open_calls", func(c *Config) { c.Server.MaxOpenCalls = 8 }},
		{"server.allowed_hosts", func(c *Config) { c.Server.AllowedHosts = []string{"mesh.example:8080"} }},
		{"server.allowed_hosts", func(c *Config) { c.Server.AllowedHosts = []string{""} }},
		{"server.max_open_calls", func(c *Config) { c.Loop.MaxConcurrentRuns = c.Server.MaxOpenCalls + 1 }},
		{"registry.max_workers", func(c *Config) { c.Registry.MaxWorkers = 0 }},
		{"registry.max_tools", func(c *Config) { c.Registry.MaxTools = -1 }},
		{"registry.max_definition_bytes", func(c *Config) { c.Registry.MaxDefinitionBytes = 1024 }},
		{"provider.openai", func(c *Config) { c.Provider.Name = "openai" }},
		{"provider.anthropic.api_key", func(c *Config) { c.Provider.Name = "anthropic" }},
		{"provider.openai.base_url", func(c *Config) { c.Provider.OpenAI.BaseURL = "localhost:11434" }},
		{"provider.anthropic.max_retries", func(c *Config) { c.Provider.Anthropic.MaxRetries = 11 }},
		{"provider.openai.timeout", func(c *Config) { c.Provider.OpenAI.Timeout = -1 }},
		{"provider.name", func(c *Config) { c.Provider.Name = "openai-ish" }},
		{"provider.script", func(c *Config) { c.Provider.Script = filepath.Join(os.TempDir(), "does-not-exist.yaml") }},
		{"telemetry.context_allow_list", func(c *Config) { c.Telemetry.ContextAllowList = []string{"tenantId", "X-Api-Key"} }},
		{"log.level", func(c *Config) { c.Log.Level = "verbose" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
		{"agentic_tools.brief.system_prompt_template", func(c *Config) {
			c.AgenticTools = map[string]AgenticTool{"brief": {SystemPrompt: "You brief.", SystemPromptTemplate: "{{.Default}}"}}
		}},
		{"agentic_tools.brief.system_prompt_template", func(c *Config) {
			c.AgenticTools = map[string]AgenticTool{"brief": {SystemPromptTemplate: "On {{ .Input.topic"}}
		}},
		{"agentic_tools.brief.system_prompt_template", func(c *Config) {
			c.AgenticTools = map[string]AgenticTool{"brief": {SystemPromptTemplate: strings.Repeat("x", MaxPromptTemplateBytes+1)}}
		}},
	}
	for _, tc := range tests {
		c := Default()
		tc.mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.key, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.key+":") {
			t.Errorf("%s: error %q does not name the key", tc.key, err)
		}
	}
}

// An agentic tool's system_prompt_template is read from YAML and checked at start; a
// literal system_prompt keeps its braces as they are.
func TestAgenticPromptTemplate(t *testing.T) {
	c, err := Parse([]byte(`
agentic_tools:
  brief:
    description: Brief a customer.
    tools: [find_customer]
    system_prompt_template: |
      {{ .Default }}
      Customer: {{ json (last "Customer") }}; topic {{ .Input.topic }}.
  literal:
    description: Fill in a form.
    tools: [fill]
    system_prompt: "Write {{name}} where the form says so."
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.AgenticTools["brief"].SystemPromptTemplate; !strings.HasPrefix(got, "{{ .Default }}\nCustomer:") {
		t.Errorf("system_prompt_template %q", got)
	}
	_, err = Parse([]byte("agentic_tools:\n  brief:\n    system_prompt_template: \"{{ if .Input.topic }}\"\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "agentic_tools.brief.system_prompt_template: ") || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("an unfinished if: %v", err)
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	c := Default()
	c.Listen = ""
	c.Router.MaxAttempts = 0
	c.Log.Format = "xml"
	err := c.Validate()
	for _, key := range []string{"listen:", "router.max_attempts:", "log.format:"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not mention %s", err, key)
		}
	}
}

func TestParseValidates(t *testing.T) {
	_, err := Parse([]byte("router:\n  max_attempts: 0\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "router.max_attempts") {
		t.Errorf("err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte("turns: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("provider:\n  script: "+script+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider.Script != script {
		t.Errorf("script = %q", c.Provider.Script)
	}

	if err := os.WriteFile(path, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("Load of a bad file: err = %v, want the path and the key", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: err = %v", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	c.Router.EjectDuration = Duration(1500 * time.Millisecond)
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "eject_duration: 1.5s") {
		t.Errorf("marshalled durations are not strings:\n%s", b)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)) = %v\n%s", err, b)
	}
	if diff := cmp.Diff(c, back, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestYAMLErrorsAreReportedTogether(t *testing.T) {
	_, err := Parse([]byte("lisen: 127.0.0.1:1\nregistry:\n  lease_ttl: forever\nloop:\n  max_iterations: 3\n  run_timeout:\n    10m\n  retain: 2\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{
		"line 1: lisen: field lisen not found",
		`line 3: registry.lease_ttl: time: invalid duration "forever"`,
		"line 8: loop.retain: field retain not found",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestBuffered: provider.openai.stream and stream_models choose which models answer
// whole, a model's own setting first.
func TestBuffered(t *testing.T) {
	off, on := false, true
	for _, tc := range []struct {
		api   ProviderAPI
		model string
		want  bool
	}{
		{ProviderAPI{}, "gpt", false},
		{ProviderAPI{Stream: &on}, "gpt", false},
		{ProviderAPI{Stream: &off}, "gpt", true},
		{ProviderAPI{Stream: &off, StreamModels: map[string]bool{"gpt": true}}, "gpt", false},
		{ProviderAPI{StreamModels: map[string]bool{"llama": false}}, "llama", true},
		{ProviderAPI{StreamModels: map[string]bool{"llama": false}}, "gpt", false},
	} {
		if got := tc.api.Buffered(tc.model); got != tc.want {
			t.Errorf("%+v Buffered(%q) = %v, want %v", tc.api, tc.model, got, tc.want)
		}
	}
	cfg, err := Parse([]byte("provider:\n  openai:\n    stream: false\n    stream_models: {local: true}\n"))
	if err != nil || !cfg.Provider.OpenAI.Buffered("gpt") || cfg.Provider.OpenAI.Buffered("local") {
		t.Errorf("parsed %+v, %v", cfg.Provider.OpenAI, err)
	}
}

func TestTLSAndTrust(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"plaintext off loopback", "listen: 0.0.0.0:7070\n", "tls: listen 0.0.0.0:7070 is not a loopback address"},
		{"one file", "tls: {ca_file: ca.pem}\n", "tls.cert_file: is required"},
		{"files and plaintext", "tls: {ca_file: a, cert_file: b, key_file: c, plaintext: true}\n", "tls.plaintext: cannot be set"},
		{"trust without tls", "trust: {workers: [{id: 'spiffe://td/w', groups: [math]}]}\n", "trust: identities are verified only with mutual TLS"},
		{"bad worker id", "tls: {ca_file: a, cert_file: b, key_file: c}\ntrust: {workers: [{id: 'w', groups: [math]}]}\n", "trust.workers[0].id: must be a SPIFFE ID"},
		{"no groups", "tls: {ca_file: a, cert_file: b, key_file: c}\ntrust: {workers: [{id: 'spiffe://td/w'}]}\n", "trust.workers[0].groups"},
		{"twice", "tls: {ca_file: a, cert_file: b, key_file: c}\ntrust: {workers: [{id: 'spiffe://td/w', groups: [a]}, {id: 'spiffe://td/w', groups: [b]}]}\n", "granted twice"},
		{"bad client", "tls: {ca_file: a, cert_file: b, key_file: c}\ntrust: {clients: [me]}\n", "trust.clients[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	c, err := Parse([]byte("listen: 0.0.0.0:7070\ntls: {ca_file: a, cert_file: b, key_file: c}\ntrust: {workers: [{id: 'spiffe://td/w', groups: [math], tools: ['add', 'mul*']}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, ok := c.Trust.Grant("spiffe://td/w")
	if !ok || !g.Allows("math", "add") || !g.Allows("math", "multiply") || g.Allows("math", "divide") || g.Allows("payments", "add") {
		t.Errorf("grant %+v", g)
	}
}

func TestAuthAndTenants(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no issuer", "auth: {jwt: {jwks_file: k.json, audience: a}}\n", "auth.jwt.issuer: is required"},
		{"no audience", "auth: {jwt: {jwks_file: k.json, issuer: i}}\n", "auth.jwt.audience: is required"},
		{"keys without a key set", "auth: {jwt: {issuer: i}}\n", "auth.jwt: jwks_file or jwks_url is required"},
		{"a file and a URL", "auth: {jwt: {jwks_file: k.json, jwks_url: 'https://idp.example/keys', issuer: i, audience: a}}\n", "auth.jwt.jwks_url: cannot be set with auth.jwt.jwks_file"},
		{"a URL of plain http", "auth: {jwt: {jwks_url: 'http://idp.example/keys', issuer: i, audience: a}}\n", "auth.jwt.jwks_url: must be https: idp.example is not a loopback host"},
		{"a URL of another scheme", "auth: {jwt: {jwks_url: 'file:///etc/keys.json', issuer: i, audience: a}}\n", "auth.jwt.jwks_url: must be an https URL"},
		{"a URL without a host", "auth: {jwt: {jwks_url: 'https:///keys', issuer: i, audience: a}}\n", "auth.jwt.jwks_url: must be an https URL"},
		{"a URL that does not parse", "auth: {jwt: {jwks_url: 'https://idp.example/%zz', issuer: i, audience: a}}\n", "auth.jwt.jwks_url: parse"},
		{"a URL without an issuer", "auth: {jwt: {jwks_url: 'https://idp.example/keys', audience: a}}\n", "auth.jwt.issuer: is required"},
		{"a refresh too often", "auth: {jwt: {jwks_url: 'https://idp.example/keys', issuer: i, audience: a, refresh_interval: 1s}}\n", "auth.jwt.refresh_interval: must be between 10s and 24h0m0s, got 1s"},
		{"a refresh too seldom", "auth: {jwt: {jwks_url: 'https://idp.example/keys', issuer: i, audience: a, refresh_interval: 48h}}\n", "auth.jwt.refresh_interval: must be between"},
		{"a refresh of a file", "auth: {jwt: {jwks_file: k.json, issuer: i, audience: a, refresh_interval: 1m}}\n", "auth.jwt.refresh_interval: applies to auth.jwt.jwks_url only"},
		{"a CA of a file", "auth: {jwt: {jwks_file: k.json, issuer: i, audience: a, ca_file: ca.pem}}\n", "auth.jwt.ca_file: applies to auth.jwt.jwks_url only"},
		{"a CA of plain http", "auth: {jwt: {jwks_url: 'http://127.0.0.1:8080/keys', issuer: i, audience: a, ca_file: ca.pem}}\n", "auth.jwt.ca_file: applies to an https auth.jwt.jwks_url only"},
		{"tenant without groups", "auth: {jwt: {jwks_file: k.json, issuer: i, audience: a}}\ntenants: {acme: {}}\n", "tenants.acme.groups"},
		{"client without tls", "auth: {jwt: {jwks_file: k.json, issuer: i, audience: a}}\ntenants: {acme: {groups: [g], clients: ['spiffe://td/c']}}\n", "tenants.acme.clients[0]: client identities are verified only with mutual TLS"},
		{"client twice", "tls: {ca_file: a, cert_file: b, key_file: c}\ntenants: {a: {groups: [g], clients: ['spiffe://td/c']}, b: {groups: [g], clients: ['spiffe://td/c']}}\n", "acts for tenant a already"},
		{"nobody has a tenant", "tenants: {acme: {groups: [g]}}\n", "no caller can be told to belong to a tenant"},
		{"an MCP endpoint in the clear off loopback", "listen: 127.0.0.1:7070\nmcp_serve: {listen: 0.0.0.0:7080}\n", "mcp_serve.listen: 0.0.0.0:7080 is not a loopback address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	c, err := Parse([]byte("tls: {ca_file: a, cert_file: b, key_file: c}\ntenants: {acme: {groups: [g], clients: ['spiffe://td/c']}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tn, ok := c.TenantOfClient("spiffe://td/c"); !ok || tn != "acme" {
		t.Errorf("TenantOfClient = %q, %v", tn, ok)
	}
}

// A key set URL is https anywhere, or http on a loopback host; its refresh interval
// defaults to five minutes.
func TestJWKSURL(t *testing.T) {
	for _, tc := range []struct {
		yaml    string
		refresh time.Duration
	}{
		{"{jwks_url: 'https://idp.example/.well-known/jwks.json', ca_file: ca.pem}", 5 * time.Minute},
		{"{jwks_url: 'http://127.0.0.1:8080/keys', refresh_interval: 10s}", 10 * time.Second},
		{"{jwks_url: 'http://[::1]:8080/keys', refresh_interval: 24h}", 24 * time.Hour},
		{"{jwks_url: 'http://localhost/keys'}", 5 * time.Minute},
	} {
		doc := "auth: {jwt: " + strings.Replace(tc.yaml, "{", "{issuer: i, audience: a, ", 1) + "}\n"
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", tc.yaml, err)
			continue
		}
		if !c.Auth.JWT.Enabled() || c.Auth.JWT.Refresh() != tc.refresh {
			t.Errorf("%s: enabled %v, refresh %s; want enabled, %s", tc.yaml, c.Auth.JWT.Enabled(), c.Auth.JWT.Refresh(), tc.refresh)
		}
	}
}

// Validate's error lists every problem with its key, is ErrInvalid, and names the file
// it was read from, with what was set over it, unless every problem came from elsewhere
// (WithSources).
func TestValidationErrorNamesSources(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("log: {level: loud, format: xml}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	var invalid *ValidationError
	if !errors.As(err, &invalid) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load: %v (%T); want a *ValidationError that is ErrInvalid", err, err)
	}
	const level = `log.level: must be one of debug, info, warn, error; got "loud"`
	const format = `log.format: must be json or text; got "xml"`
	if want := "config " + path + ": invalid configuration: " + level + "; " + format; err.Error() != want {
		t.Errorf("Load: %q\nwant %q", err, want)
	}
	one := invalid.WithSources(map[string]string{"log.format": "--log-format"})
	if want := "config " + path + " with --log-format: invalid configuration: " + level + `; log.format (from --log-format): must be json or text; got "xml"`; one.Error() != want {
		t.Errorf("one from a flag: %q\nwant %q", one, want)
	}
	all := invalid.WithSources(map[string]string{"log.format": "--log-format", "log.level": "$LOG_LEVEL"})
	if strings.Contains(all.Error(), path) || !strings.Contains(all.Error(), "log.level (from $LOG_LEVEL): ") {
		t.Errorf("all from elsewhere: %q; want the file not named", all)
	}
	if invalid.Problems[1].Source != "" {
		t.Error("WithSources changed the error it was called on")
	}
}

// A refused value the environment set names its variable, and the file is not blamed
// for it; an empty path reads no file.
func TestValidationErrorNamesTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("log: {level: info}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OPENAI_BASE_URL": "ftp://example", "OPENAI_API_KEY": "k"}
	for _, p := range []string{path, ""} {
		_, err := LoadOver(p, func(k string) string { return env[k] }, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "invalid configuration: provider.openai.base_url (from $OPENAI_BASE_URL): ") {
			t.Errorf("LoadOver(%q) with OPENAI_BASE_URL=ftp://example: %v; want the variable named, not the file", p, err)
		}
	}
	c, err := LoadOver("", func(string) string { return "" }, nil)
	if err != nil || c.Log.Level != Default().Log.Level {
		t.Errorf("LoadOver with no file: %+v, %v; want the defaults", c.Log, err)
	}
}

// LoadEnv of no file fails as a missing file does (LoadOver alone reads none); a value the
// environment filled and over changed is not the environment's; Validate lists its
// problems in one order.
func TestConfigSourcesEdges(t *testing.T) {
	if _, err := LoadEnv("", nil); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadEnv(\"\"): %v; want a missing file", err)
	}
	env := map[string]string{"OPENAI_BASE_URL": "http://fine.example", "OPENAI_API_KEY": "k"}
	_, err := LoadOver("", func(k string) string { return env[k] }, func(c *Config) { c.Provider.OpenAI.BaseURL = "ftp://over" })
	if err == nil || strings.Contains(err.Error(), "$OPENAI_BASE_URL") || !strings.Contains(err.Error(), `provider.openai.base_url: must be an http(s) URL, got "ftp://over"`) {
		t.Errorf("a value over set where the environment had: %v; want it not blamed on the environment", err)
	}
	c := Default()
	c.Provider.OpenAI.BaseURL, c.Provider.Anthropic.BaseURL = "ftp://a", "ftp://b"
	first := c.Validate().Error()
	for range 50 {
		if got := c.Validate().Error(); got != first {
			t.Fatalf("Validate's problems in another order: %q, then %q", first, got)
		}
	}
	var nothing *ValidationError
	if nothing.WithSources(map[string]string{"a": "b"}) != nil {
		t.Error("WithSources of a nil error")
	}
}
