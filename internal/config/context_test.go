package config

import (
	"errors"
	"strings"
	"testing"
)

func TestContextConfig(t *testing.T) {
	c, err := Parse([]byte(`
context:
  max_bytes: 4096
  secrets: [authToken]
  default: {kind: allow-keys, keys: [tenantId]}
groups:
  alpha: {context: {kind: pass-through}}
  gamma: {context: {kind: none}}
tools:
  load_skill: {one_shot: {advice: "Use the skill you already loaded."}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Converter("alpha").Kind; got != "pass-through" {
		t.Errorf("alpha converter = %q", got)
	}
	if got := c.Converter("beta"); got.Kind != "allow-keys" || len(got.Keys) != 1 || got.Keys[0] != "tenantId" {
		t.Errorf("beta (default) converter = %+v", got)
	}
	if got := c.Converter("gamma").Kind; got != "none" {
		t.Errorf("gamma converter = %q", got)
	}
	if c.Tools["load_skill"].OneShot.Advice != "Use the skill you already loaded." || c.Context.MaxBytes != 4096 {
		t.Errorf("config = %+v", c)
	}
	if d := Default(); d.Converter("any").Kind != "pass-through" || d.Context.MaxBytes != 8192 {
		t.Errorf("default converter = %+v, max %d", d.Converter("any"), d.Context.MaxBytes)
	}
}

func TestContextConfigErrors(t *testing.T) {
	cases := []struct{ yaml, key string }{
		{"context: {max_bytes: 10}", "context.max_bytes"},
		{"context: {secrets: ['']}", "context.secrets[0]"},
		{"context: {secrets: ['toolmesh.loop_id']}", "context.secrets[0]"},
		{"context: {default: {kind: everything}}", "context.default.kind"},
		{"context: {default: {kind: none, keys: [a]}}", "context.default.keys"},
		{"groups: {math: {context: {kind: allow-keys, keys: ['']}}}", "groups.math.context.keys[0]"},
		{"groups: {math: {context: {kind: bogus}}}", "groups.math.context.kind"},
		{"tools: {x: {one_shot: {advice: ' '}}}", "tools.x.one_shot.advice"},
		{"tools: {x: {description: ' '}}", "tools.x.description"},
		{"groups: {calc: {include: [math/add], permissions: [root_access]}}", "groups.calc.permissions[0]"},
		{"groups: {calc: {include: [math/add], permissions: [host_access, host_access]}}", "groups.calc.permissions[1]"},
		{"tools: {x: {note: \"\\t\"}}", "tools.x.note"},
		{"groups: {math: {contxt: {kind: none}}}", "contxt"},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("Parse(%q) = %v, want an error naming %s", tc.yaml, err, tc.key)
			}
		})
	}
}

func TestModelsConfig(t *testing.T) {
	c, err := Parse([]byte(`
models:
  roles: {smart: openai/gpt-4o, fast: openai/gpt-4o-mini}
  prices:
    openai/gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Models.Roles["fast"] != "openai/gpt-4o-mini" {
		t.Errorf("roles = %v", c.Models.Roles)
	}
	if got := c.Models.Prices["openai/gpt-4o"].Cost(1_000_000, 100_000); got != 3.5 {
		t.Errorf("cost = %v, want 3.5", got)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"models: {roles: {smart: gpt-4o}}", "models.roles.smart"},
		{"models: {prices: {gpt-4o: {input_per_mtok: 1}}}", "models.prices"},
		{"models: {prices: {openai/x: {output_per_mtok: -1}}}", "models.prices.openai/x.output_per_mtok"},
	} {
		if _, err := Parse([]byte(tc.yaml)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
}

func TestProviderSelectionAndEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		name string
		env  map[string]string
		set  func(*Config)
		want string
	}{
		{"nothing configured", nil, nil, "scripted"},
		{"openai key", map[string]string{"OPENAI_API_KEY": "k"}, nil, "openai"},
		{"local openai-compatible server", map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}, nil, "openai"},
		{"anthropic key", map[string]string{"ANTHROPIC_API_KEY": "k"}, nil, "anthropic"},
		{"both: openai first", map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, nil, "openai"},
		{"explicit scripted wins", map[string]string{"OPENAI_API_KEY": "k"}, func(c *Config) { c.Provider.Name = "scripted" }, "scripted"},
		{"config key beats env", map[string]string{"ANTHROPIC_API_KEY": "env"}, func(c *Config) { c.Provider.Anthropic.APIKey = "file" }, "anthropic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			if tc.set != nil {
				tc.set(&c)
			}
			c.ApplyEnv(env(tc.env))
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := c.DefaultProvider(); got != tc.want {
				t.Errorf("DefaultProvider() = %q, want %q", got, tc.want)
			}
		})
	}
	c := Default()
	c.Provider.Anthropic.APIKey = "file"
	c.ApplyEnv(env(map[string]string{"ANTHROPIC_API_KEY": "env", "ANTHROPIC_MODEL": "claude-x"}))
	if c.Provider.Anthropic.APIKey != "file" || c.Provider.Anthropic.DefaultModel != "claude-x" {
		t.Errorf("ApplyEnv = %+v", c.Provider.Anthropic)
	}
}

func TestTelemetryConfig(t *testing.T) {
	c, err := Parse([]byte("telemetry: {metrics_listen: '127.0.0.1:9090', context_allow_list: [tenantId]}\n"))
	if err != nil || c.Telemetry.MetricsListen != "127.0.0.1:9090" || c.Telemetry.ContextAllowList[0] != "tenantId" {
		t.Fatalf("Parse = %+v, %v", c.Telemetry, err)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"telemetry: {metrics_listen: nope}", "telemetry.metrics_listen"},
		{"telemetry: {context_allow_list: ['']}", "telemetry.context_allow_list[0]"},
		{"context: {secrets: [tok]}\ntelemetry: {context_allow_list: [tok]}", "telemetry.context_allow_list"},
		{"context: {secrets: [Tok]}\ntelemetry: {context_allow_list: [tOK]}", "telemetry.context_allow_list"},
		// A secret spelled otherwise on the allow list is the same secret.
		{"context: {secrets: [ssn]}\ntelemetry: {context_allow_list: [s-s-n]}", "telemetry.context_allow_list"},
	} {
		if _, err := Parse([]byte(tc.yaml)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
}

func TestGroupFacadeConfig(t *testing.T) {
	c, err := Parse([]byte("groups: {text: {facade: {name: text_tools, usage_notes: 'Use them.'}}}\n"))
	if err != nil || c.Groups["text"].Facade.Name != "text_tools" {
		t.Fatalf("Parse = %+v, %v", c.Groups, err)
	}
	if _, err := Parse([]byte("groups: {text: {facade: {name: 'bad name'}}}\n")); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "groups.text.facade.name") {
		t.Errorf("bad facade name: %v", err)
	}
}

// TestJournalDSNFromEnv: a PostgreSQL journal's connection string may come from
// TOOLMESH_JOURNAL_DSN (a Secret), and a DSN in the file wins.
func TestJournalDSNFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	yaml := []byte("journal: {driver: postgres}\n")
	if _, err := ParseEnv(yaml, env(nil)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "journal.dsn") {
		t.Fatalf("without a DSN: %v", err)
	}
	c, err := ParseEnv(yaml, env(map[string]string{"TOOLMESH_JOURNAL_DSN": "postgres://u:p@db/toolmesh"}))
	if err != nil || c.Journal.DSN != "postgres://u:p@db/toolmesh" {
		t.Fatalf("ParseEnv = %q, %v", c.Journal.DSN, err)
	}
	c, err = ParseEnv([]byte("journal: {driver: postgres, dsn: 'host=file'}\n"), env(map[string]string{"TOOLMESH_JOURNAL_DSN": "host=env"}))
	if err != nil || c.Journal.DSN != "host=file" {
		t.Fatalf("ParseEnv = %q, %v", c.Journal.DSN, err)
	}
}

// TestHealthListen: the plaintext health port is checked like listen and may not be it.
func TestHealthListen(t *testing.T) {
	if c, err := Parse([]byte("listen: 127.0.0.1:7070\nhealth_listen: 127.0.0.1:7072\n")); err != nil || c.HealthListen != "127.0.0.1:7072" {
		t.Fatalf("Parse = %q, %v", c.HealthListen, err)
	}
	if _, err := Parse([]byte("listen: 127.0.0.1:0\nhealth_listen: 127.0.0.1:0\n")); err != nil {
		t.Errorf("two ports chosen by the system: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"listen: 127.0.0.1:7070\nhealth_listen: 127.0.0.1:7070\n", "health_listen: must differ from listen"},
		{"health_listen: nope\n", "health_listen:"},
		{"health_listen: '127.0.0.1:99999'\n", "health_listen: invalid port"},
	} {
		if _, err := Parse([]byte(tc.yaml)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
