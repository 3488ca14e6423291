// Package config loads and validates the orchestrator's YAML configuration. Every error
// names the offending key (and line, for YAML errors) so that a bad config fails at start
// with a message an operator can act on.
//
// It must not import gRPC or any other toolmesh package.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
)

// ErrInvalid marks a configuration that failed validation.
var ErrInvalid = errors.New("invalid configuration")

// Duration is a time.Duration written as "2s", "150ms" or "10m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string. Its errors are yaml.TypeErrors, so that
// Parse reports them with the other errors of the document, each naming its key.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if n.Kind != yaml.ScalarNode || n.Decode(&s) != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: duration must be a string such as \"2s\"", n.Line)}}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is the orchestrator's configuration.
type Config struct {
	// Listen is the address of the gRPC server (clients, workers, health, reflection).
	Listen string `yaml:"listen"`
	// HealthListen, when set, is a second, plaintext gRPC server with only grpc.health.v1
	// on it, the same statuses as on Listen: for a kubelet's gRPC probes, which speak no
	// TLS, when tls.* is on.
	HealthListen string `yaml:"health_listen"`
	// Server bounds what the gRPC server receives.
	Server   Server   `yaml:"server"`
	Registry Registry `yaml:"registry"`
	Router   Router   `yaml:"router"`
	Loop     Loop     `yaml:"loop"`
	// Journal is where runs are recorded so that they survive a restart.
	Journal  Journal  `yaml:"journal"`
	Provider Provider `yaml:"provider"`
	// Telemetry configures metrics and what spans may carry.
	Telemetry Telemetry `yaml:"telemetry"`
	// Models maps roles to models and prices model calls.
	Models Models `yaml:"models"`
	// Context configures the ToolCallContext sent to workers.
	Context Context `yaml:"context"`
	// Groups configures tool groups by role.
	Groups map[string]Group `yaml:"groups"`
	// MCPServe serves the mesh's tools to MCP clients.
	MCPServe MCPServe `yaml:"mcp_serve"`
	// Console serves the run console to browsers on the orchestrator's port.
	Console Console `yaml:"console"`
	// MCPServers are MCP servers that groups (groups.<role>.mcp) take their tools from.
	MCPServers map[string]MCPServer `yaml:"mcp_servers"`
	// Tools configures tools by name.
	Tools map[string]Tool `yaml:"tools"`
	// AgenticTools declares agentic tools by name: a run offers one when it names it
	// among its tools (or another agentic tool contains it).
	AgenticTools map[string]AgenticTool `yaml:"agentic_tools"`
	Log          Log                    `yaml:"log"`
	// TLS is the orchestrator's certificate; Trust says whom it lets in.
	TLS   TLS   `yaml:"tls"`
	Trust Trust `yaml:"trust"`
	// Auth verifies clients' bearer tokens; Tenants are who may use which tool groups.
	Auth    Auth              `yaml:"auth"`
	Tenants map[string]Tenant `yaml:"tenants"`
}

// Auth configures how clients authenticate besides client certificates.
type Auth struct {
	JWT JWT `yaml:"jwt"`
}

// JWT verifies bearer tokens (the authorization metadata of a client's call).
type JWT struct {
	// JWKSFile is a JSON Web Key Set (RSA and EC P-256/P-384 keys) the tokens are signed
	// with; read again when it changes.
	JWKSFile string `yaml:"jwks_file"`
	// JWKSURL is where the key set is fetched instead (an identity provider's jwks_uri):
	// https, or http on a loopback host. It is fetched at start, every RefreshInterval
	// and when a token names a kid the set lacks.
	JWKSURL string `yaml:"jwks_url"`
	// RefreshInterval is how often the key set of JWKSURL is fetched again. 0: 5m.
	RefreshInterval Duration `yaml:"refresh_interval"`
	// CAFile is the PEM CA bundle the certificate of JWKSURL's server must chain to,
	// instead of the system's roots: for an identity provider with a private CA.
	CAFile string `yaml:"ca_file"`
	// Issuer and Audience must match the token's iss and aud.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// TenantClaim names the claim that holds the caller's tenant. Default "tenant".
	TenantClaim string `yaml:"tenant_claim"`
}

// DefaultJWKSRefresh is how often the key set of auth.jwt.jwks_url is fetched again
// when auth.jwt.refresh_interval is not set.
const DefaultJWKSRefresh = 5 * time.Minute

// Enabled reports whether bearer tokens are verified.
func (j JWT) Enabled() bool { return j.JWKSFile != "" || j.JWKSURL != "" }

// Refresh is how often the key set of JWKSURL is fetched again.
func (j JWT) Refresh() time.Duration {
	if j.RefreshInterval == 0 {
		return DefaultJWKSRefresh
	}
	return j.RefreshInterval.D()
}

// Tenant is what the callers of one tenant may use.
type Tenant struct {
	// Groups are the tool groups the tenant's runs may be offered and call.
	Groups []string `yaml:"groups"`
	// Tools, when set, narrows Groups to the tools (and facades) named; "prefix*"
	// matches names that start with prefix. A tool outside them is never offered to the
	// tenant's runs, and a call of it never reaches a worker. Empty: every tool of Groups.
	Tools []string `yaml:"tools"`
	// Clients are client-certificate identities (SPIFFE IDs) that act for the tenant.
	Clients []string `yaml:"clients"`
	// MaxConcurrentRuns bounds the tenant's runs in progress on one orchestrator; a
	// further Run is refused at once (RESOURCE_EXHAUSTED, with RetryInfo). 0: only the
	// orchestrator's own bound.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs"`
	// ToolCallsPerMinute bounds the tenant's tool calls on one orchestrator (a bucket of
	// that many, refilled over a minute); a call past it is not sent, and the model reads
	// when to try again. 0: unbounded.
	ToolCallsPerMinute int `yaml:"tool_calls_per_minute"`
	// ModelCallsPerMinute bounds the tenant's model calls on one orchestrator (a bucket
	// of that many, refilled over a minute); a model call past it waits for the bucket,
	// and a run whose deadline comes first fails with MODEL_RATE_LIMITED. 0: unbounded.
	ModelCallsPerMinute int `yaml:"model_calls_per_minute"`
	// MaxMessages bounds the conversation a run of the tenant may start with. 0: only
	// the request's own bound.
	MaxMessages int `yaml:"max_messages"`
	// MaxRequestBytes bounds the encoded size of a Run request of the tenant (under the
	// orchestrator's server.max_receive_bytes, which bounds everyone's). 0: only that.
	MaxRequestBytes int `yaml:"max_request_bytes"`
}

// Allows reports whether the tenant may use tool name of group role (a worker's or an
// MCP server's tool; the orchestrator's own groups are everyone's).
func (t Tenant) Allows(role, name string) bool {
	return slices.Contains(t.Groups, role) && matchesAny(t.Tools, name)
}

// matchesAny reports whether name is one of patterns ("prefix*" matches a prefix), or
// patterns is empty.
func matchesAny(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p == name || (strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// TenantOfClient is the tenant whose clients list identity.
func (c Config) TenantOfClient(identity string) (string, bool) {
	for name, t := range c.Tenants {
		if slices.Contains(t.Clients, identity) {
			return name, true
		}
	}
	return "", false
}

// TLS configures mutual TLS on the orchestrator's port and on its calls to workers.
type TLS struct {
	// CAFile, CertFile and KeyFile are PEM files: the CA bundle peers must chain to, and
	// this orchestrator's certificate (with a SPIFFE ID URI SAN) and key. They are read
	// again when they change.
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ReloadInterval is how often the files are checked for a change. Default 1s.
	ReloadInterval Duration `yaml:"reload_interval"`
	// Plaintext serves without TLS on an address other than loopback: for local
	// development only. Loopback addresses may serve plaintext without it.
	Plaintext bool `yaml:"plaintext"`
}

// Enabled reports whether mutual TLS is configured.
func (t TLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// Trust says which identities (SPIFFE IDs of verified client certificates) may do what,
// when TLS is enabled.
type Trust struct {
	// Workers are the identities that may register, each with the tool groups (and,
	// optionally, the tool names) it may serve. An identity that is not listed cannot
	// register; one cannot serve a tool or group another identity serves.
	Workers []WorkerGrant `yaml:"workers"`
	// Clients are the identities that may call OrchestratorService (runs, listings).
	// Empty: any identity the CA vouches for.
	Clients []string `yaml:"clients"`
}

// WorkerGrant is what one worker identity may serve.
type WorkerGrant struct {
	// ID is the worker's SPIFFE ID, spiffe://trust-domain/path.
	ID string `yaml:"id"`
	// Groups are the tool groups (roles) it may register.
	Groups []string `yaml:"groups"`
	// Tools, when set, are the only tool (and facade) names it may serve; "prefix*"
	// matches names that start with prefix.
	Tools []string `yaml:"tools"`
}

// Grant is the grant of identity id, if any.
func (t Trust) Grant(id string) (WorkerGrant, bool) {
	for _, g := range t.Workers {
		if g.ID == id {
			return g, true
		}
	}
	return WorkerGrant{}, false
}

// Allows reports whether the grant covers tool name of group role.
func (g WorkerGrant) Allows(role, name string) bool {
	return slices.Contains(g.Groups, role) && matchesAny(g.Tools, name)
}

// AgenticTool declares an agentic tool: a tool whose call runs a nested tool loop over
// sub-tools, in the orchestrator. The orchestrator checks it when it starts (naming the
// key); its sub-tools are found when a run uses it.
type AgenticTool struct {
	// Kind is simple (the default), playbook, state_machine or agent.
	Kind        string `yaml:"kind"`
	Description string `yaml:"description"`
	// Parameters is the JSON Schema of the tool's arguments, written as YAML.
	Parameters   map[string]any `yaml:"parameters"`
	SystemPrompt string         `yaml:"system_prompt"`
	// SystemPromptTemplate is the system prompt as a Go text/template, rendered for each
	// call over its arguments, the run's context and blackboard (docs/agentic.md). At
	// most one of SystemPrompt and SystemPromptTemplate.
	SystemPromptTemplate string `yaml:"system_prompt_template"`
	// Model ("provider/model") or Role (of models.roles) of the nested loop; both empty
	// mean the run's.
	Model         string `yaml:"model"`
	Role          string `yaml:"role"`
	MaxIterations int    `yaml:"max_iterations"`
	// Tools and ToolGroups are the sub-tools by name and by role.
	Tools                  []string          `yaml:"tools"`
	ToolGroups             []string          `yaml:"tool_groups"`
	CaptureNestedArtifacts bool              `yaml:"capture_nested_artifacts"`
	Context                map[string]string `yaml:"context"`
	LockedTools            []LockedTool      `yaml:"locked_tools"`
	StateMachine           *StateMachine     `yaml:"state_machine"`
	// ChainingSources and ChainFromAny configure tool chaining in the nested loop.
	ChainingSources []ChainingSource `yaml:"chaining_sources"`
	ChainFromAny    bool             `yaml:"chain_from_any"`
	// OutputSchema is an agent's result object: the JSON Schema (of an object, written as
	// YAML) its final answer must satisfy; the tool returns the answer as an artifact of
	// type OutputType (default: the agent's name).
	OutputSchema map[string]any `yaml:"output_schema"`
	OutputType   string         `yaml:"output_type"`
}

// MaxPromptTemplateBytes bounds an agentic tool's system_prompt_template.
const MaxPromptTemplateBytes = 16 << 10

// validatePrompt checks the system prompt of the agentic tool at key: one kind of prompt,
// and a template that parses. Its functions are the agentic tools' own (internal/agentic),
// checked when the orchestrator compiles its agentic tools, at start too.
func (a AgenticTool) validatePrompt(bad func(key, format string, args ...any), key string) {
	text := a.SystemPromptTemplate
	switch {
	case text == "":
	case a.SystemPrompt != "":
		bad(key+".system_prompt_template", "set at most one of system_prompt and system_prompt_template")
	case len(text) > MaxPromptTemplateBytes:
		bad(key+".system_prompt_template", "is %d bytes; the limit is %d", len(text), MaxPromptTemplateBytes)
	default:
		tree := parse.New("system_prompt_template")
		tree.Mode = parse.SkipFuncCheck
		if _, err := tree.Parse(text, "", "", map[string]*parse.Tree{}); err != nil {
			bad(key+".system_prompt_template", "%v", err)
		}
	}
}

// PromptHides reports whether an agentic tool's system_prompt_template must not show a
// key of the ToolCallContext: a key of context.secrets (however spelled) or a well-known
// credential key, the keys that converters hold back.
func (c Config) PromptHides(key string) bool { return ctxconv.IsSecretKey(key, c.Context.Secrets...) }

// ChainingSource takes returned objects of a type for tool chaining, when When holds.
type ChainingSource struct {
	Type string `yaml:"type"`
	When string `yaml:"when"`
}

// LockedTool is a playbook's tool that stays locked until its conditions hold.
type LockedTool struct {
	Tool           string   `yaml:"tool"`
	AfterAll       []string `yaml:"after_all"`
	AfterAny       []string `yaml:"after_any"`
	ArtifactType   string   `yaml:"artifact_type"`
	BlackboardType string   `yaml:"blackboard_type"`
	When           string   `yaml:"when"`
}

// StateMachine is the states of a state-machine agentic tool.
type StateMachine struct {
	InitialState string         `yaml:"initial_state"`
	States       []MachineState `yaml:"states"`
}

// MachineState is one state and its tools.
type MachineState struct {
	Name  string             `yaml:"name"`
	Tools []MachineStateTool `yaml:"tools"`
}

// MachineStateTool is a tool of a state and the state it moves to on success.
type MachineStateTool struct {
	Tool          string `yaml:"tool"`
	TransitionsTo string `yaml:"transitions_to"`
}

// Server bounds what the orchestrator's gRPC server receives.
type Server struct {
	// MaxReceiveBytes bounds one message (a run request, a registration).
	MaxReceiveBytes int `yaml:"max_receive_bytes"`
	// MaxInflightReceiveBytes bounds the messages being received and decoded at once,
	// each counted at MaxReceiveBytes; further requests wait, and are refused as
	// overloaded after a short wait.
	MaxInflightReceiveBytes int `yaml:"max_inflight_receive_bytes"`
	// MaxOpenCalls bounds the calls open at once (runs streaming their events,
	// registration streams, unary requests); further calls are refused as overloaded.
	MaxOpenCalls int `yaml:"max_open_calls"`
	// AllowedHosts are the DNS names browsers reach the HTTP side of the orchestrator by
	// (its API, its console, the MCP endpoint), where it takes requests without
	// credentials: a request whose Host names another is refused, since a page can have
	// a browser send it to the orchestrator under its own name (DNS rebinding). IP
	// addresses and localhost are always taken.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// Registry configures worker registration.
type Registry struct {
	// HeartbeatInterval is how often workers send heartbeats.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// LeaseTTL ends a registration that sent nothing for this long.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// GracePeriod keeps a disconnected worker's place (taking no calls) before removal.
	GracePeriod Duration `yaml:"grace_period"`
	// PinDefinitions refuses a registration that changes a tool's definition under the
	// version of its group the tool was first registered with (see router.Options).
	PinDefinitions bool `yaml:"pin_definitions"`
	// Quarantine holds a new tool definition for an operator's approval when it looks
	// like a rug pull: a description over a cap, or text that tells a model to ignore
	// its instructions.
	Quarantine Quarantine `yaml:"quarantine"`
	// ApprovedDefinitions are content hashes (hex SHA-256, as a refusal names them) an
	// operator approved: a quarantined definition of one of them is served, and one that
	// changes a pinned definition under the same version replaces the pin.
	ApprovedDefinitions []string `yaml:"approved_definitions"`
	// ApprovedDefinitionsFile holds more approved hashes, one a line (# starts a
	// comment), read again when it changes: approving takes no restart.
	ApprovedDefinitionsFile string `yaml:"approved_definitions_file"`
	// ReadinessGrace bounds how long a restarted orchestrator with a journal on disk
	// waits for the workers it knew to register again before it serves runs; 0 serves at
	// once.
	ReadinessGrace Duration `yaml:"readiness_grace"`
	// MaxWorkers, MaxTools, MaxDefinitionBytes and MaxServedTools bound the routing
	// table: workers, distinct tools and facades, the encoded size of their definitions,
	// and the tools all workers serve, replicas included.
	MaxWorkers         int   `yaml:"max_workers"`
	MaxTools           int   `yaml:"max_tools"`
	MaxDefinitionBytes int64 `yaml:"max_definition_bytes"`
	MaxServedTools     int   `yaml:"max_served_tools"`
}

// Quarantine says which new tool definitions wait for an operator's approval.
type Quarantine struct {
	// DescriptionBytes holds a definition whose description is longer; 0 holds none for
	// its length. Default 4096.
	DescriptionBytes int `yaml:"description_bytes"`
	// Patterns are regular expressions (RE2, matched case-insensitively) of text that
	// holds a definition whose description or input schema contains it. Default: phrases
	// that tell a model to ignore or forget its instructions, and chat role tags; an
	// empty list holds none.
	Patterns *[]string `yaml:"patterns"`
}

// DefaultQuarantinePatterns are Quarantine.Patterns when the config names none.
var DefaultQuarantinePatterns = []string{
	`\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|system)\b.{0,40}\b(instructions?|prompts?|rules|directions)\b`,
	`<\s*/?\s*(system|assistant|im_start|im_end)\s*>`,
}

// ContentHash reports whether h is a tool definition's content hash: 64 lower-case hex
// digits.
func ContentHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// QuarantinePatterns are the patterns in force: the config's, or the defaults.
func (q Quarantine) QuarantinePatterns() []string {
	if q.Patterns == nil {
		return DefaultQuarantinePatterns
	}
	return *q.Patterns
}

// Router configures tool-call routing.
type Router struct {
	DefaultToolTimeout Duration `yaml:"default_tool_timeout"`
	EjectAfterFailures int      `yaml:"eject_after_failures"`
	EjectDuration      Duration `yaml:"eject_duration"`
	MaxAttempts        int      `yaml:"max_attempts"`
}

// Journal configures the run journal: every run's request, model responses, tool
// dispatches and outcomes and events, from which a run another orchestrator (or this
// one, restarted) takes over continues.
type Journal struct {
	// Driver is "sqlite" (one file, the default when DataDir is set), "postgres" (for
	// several orchestrator replicas; DSN) or "memory" (the default without DataDir: runs
	// do not survive a restart).
	Driver string `yaml:"driver"`
	// DataDir holds the SQLite journal, journal.db; the --data-dir flag sets it.
	DataDir string `yaml:"data_dir"`
	// DSN is the PostgreSQL connection string ("postgres://..." or key=value pairs).
	DSN string `yaml:"dsn"`
	// Owner names this orchestrator in run leases; default the host name and the
	// listen port. Replicas must have different owners.
	Owner string `yaml:"owner"`
	// LeaseTTL is how long a run stays with an orchestrator that stopped renewing its
	// lease before another takes it over.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// ResumeGrace is how long a taken-over run waits for the tool groups it uses to be
	// served again (workers register anew after an orchestrator restarts).
	ResumeGrace Duration `yaml:"resume_grace"`
	// SnapshotEvery is how many records a run writes between two snapshots of what its
	// resume needs (the model's answers, the calls' outcomes, the keys of the events the
	// client saw): a resumed run reads its last snapshot and the records after it.
	SnapshotEvery int `yaml:"snapshot_every"`
	// Retain is how long finished runs stay in the journal.
	Retain Duration `yaml:"retain"`
	// MemoryBytes bounds what the journal in memory (driver memory) keeps of finished
	// runs' records, and loop.retain_runs how many of them: the oldest go first.
	MemoryBytes int `yaml:"memory_bytes"`
	// EncryptionKeyFile, when set, names a 32-byte key (raw, hex or base64) every
	// record's data is sealed with (AES-256-GCM) before it is written: the journal then
	// holds no prompt, argument, result or context value in clear. Every replica sharing
	// the journal needs the same key.
	EncryptionKeyFile string `yaml:"encryption_key_file"`
}

// Loop configures the tool loop's defaults.
type Loop struct {
	MaxIterations        int      `yaml:"max_iterations"`
	MaxParallelToolCalls int      `yaml:"max_parallel_tool_calls"`
	RunTimeout           Duration `yaml:"run_timeout"`
	// EmptyResponseRetries nudges a model that answered with nothing this many times.
	EmptyResponseRetries int `yaml:"empty_response_retries"`
	// MaxConcurrentRuns bounds the runs in progress; further Run calls are refused.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs"`
	// RetainRuns is how many finished runs GetRun still knows about, with their process
	// state; RetainBytes bounds what they hold together (their answers, blackboards,
	// assets): the oldest go first.
	RetainRuns  int `yaml:"retain_runs"`
	RetainBytes int `yaml:"retain_bytes"`
	// MaxToolResultBytes bounds the text of one tool result the model reads; a longer
	// one is cut and says so.
	MaxToolResultBytes int `yaml:"max_tool_result_bytes"`
	// MaxArtifactBytes bounds one artifact a tool returns; a larger one becomes an error
	// result the model reads.
	MaxArtifactBytes int `yaml:"max_artifact_bytes"`
	// DefaultToolGroups are offered to every run besides the groups it asks for: the
	// built-in agent_process, blackboard and communication, or groups workers serve (one
	// that nobody serves when a run starts is left out, with a warning in the log).
	DefaultToolGroups []string `yaml:"default_tool_groups"`
	// MaxBlackboardEntries and MaxBlackboardBytes bound a run's blackboard.
	MaxBlackboardEntries int `yaml:"max_blackboard_entries"`
	MaxBlackboardBytes   int `yaml:"max_blackboard_bytes"`
	// MaxNestingDepth bounds how deep agentic tools nest their loops; MaxNestedLoops how
	// many nested loops one run starts.
	MaxNestingDepth int `yaml:"max_nesting_depth"`
	MaxNestedLoops  int `yaml:"max_nested_loops"`
}

// Provider chooses and configures the model providers.
type Provider struct {
	// Name is the default provider: auto, scripted, openai or anthropic. auto (or empty)
	// picks openai when it is configured, else anthropic when it is, else scripted.
	Name string `yaml:"name"`
	// Script is the scripted provider's script file; empty means the built-in demo script.
	Script string `yaml:"script"`
	// OpenAI configures the OpenAI-compatible provider (OpenAI, Ollama, vLLM, llama.cpp,
	// LM Studio, ...). It is configured when it has an API key or a base URL.
	OpenAI ProviderAPI `yaml:"openai"`
	// Anthropic configures the Anthropic provider. It is configured when it has an API key.
	Anthropic ProviderAPI `yaml:"anthropic"`
}

// ProviderAPI configures a provider behind an HTTP API. APIKey and BaseURL fall back to
// the environment (OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL); DefaultModel to OPENAI_MODEL / ANTHROPIC_MODEL.
type ProviderAPI struct {
	APIKey       string `yaml:"api_key"`
	BaseURL      string `yaml:"base_url"`
	DefaultModel string `yaml:"default_model"`
	// MaxRetries bounds retries of a model call on 429, 5xx and network errors; zero
	// means the provider's default (2).
	MaxRetries int `yaml:"max_retries"`
	// Timeout bounds one attempt of a model call.
	Timeout Duration `yaml:"timeout"`
	// MaxTokens is the answer limit when a run sets none (Anthropic requires one).
	MaxTokens int `yaml:"max_tokens"`
	// Stream, when false, asks the OpenAI-compatible server for whole answers instead of
	// streams (for servers that cannot stream tool calls); unset means true. StreamModels
	// overrides it per model. Only provider.openai has them.
	Stream       *bool           `yaml:"stream"`
	StreamModels map[string]bool `yaml:"stream_models"`
}

// Buffered reports whether answers of model are asked for whole (Stream and StreamModels).
func (p ProviderAPI) Buffered(model string) bool {
	if v, ok := p.StreamModels[model]; ok {
		return !v
	}
	return p.Stream != nil && !*p.Stream
}

// Configured reports whether the API has the credentials or address it needs.
func (p ProviderAPI) Configured() bool { return p.APIKey != "" || p.BaseURL != "" }

// ApplyEnv fills the providers' empty credentials, addresses and models from the
// environment, the way the providers' own SDKs do, and an empty journal.dsn from
// TOOLMESH_JOURNAL_DSN.
func (c *Config) ApplyEnv(getenv func(string) string) { c.applyEnv(getenv) }

// envFill is a key the environment filled: its variable, and the field and the value
// it filled in.
type envFill struct {
	env, value string
	dst        *string
}

// applyEnv is ApplyEnv; it returns the keys it filled ("provider.openai.base_url" →
// OPENAI_BASE_URL, the field and its value).
func (c *Config) applyEnv(getenv func(string) string) map[string]envFill {
	filled := map[string]envFill{}
	for _, f := range []struct {
		dst      *string
		key, env string
	}{
		{&c.Provider.OpenAI.APIKey, "provider.openai.api_key", "OPENAI_API_KEY"},
		{&c.Provider.OpenAI.BaseURL, "provider.openai.base_url", "OPENAI_BASE_URL"},
		{&c.Provider.OpenAI.DefaultModel, "provider.openai.default_model", "OPENAI_MODEL"},
		{&c.Provider.Anthropic.APIKey, "provider.anthropic.api_key", "ANTHROPIC_API_KEY"},
		{&c.Provider.Anthropic.BaseURL, "provider.anthropic.base_url", "ANTHROPIC_BASE_URL"},
		{&c.Provider.Anthropic.DefaultModel, "provider.anthropic.default_model", "ANTHROPIC_MODEL"},
		// The journal's connection string holds a password: from a Secret, not the file.
		{&c.Journal.DSN, "journal.dsn", "TOOLMESH_JOURNAL_DSN"},
	} {
		if *f.dst == "" {
			if *f.dst = getenv(f.env); *f.dst != "" {
				filled[f.key] = envFill{env: f.env, value: *f.dst, dst: f.dst}
			}
		}
	}
	return filled
}

// DefaultProvider is the provider runs use when they name none.
func (c Config) DefaultProvider() string {
	switch c.Provider.Name {
	case "", "auto":
		switch {
		case c.Provider.OpenAI.Configured():
			return "openai"
		case c.Provider.Anthropic.APIKey != "":
			return "anthropic"
		}
		return "scripted"
	}
	return c.Provider.Name
}

// Console configures the run console, served at /console/ on the orchestrator's port.
type Console struct {
	// Enabled serves it.
	Enabled bool `yaml:"enabled"`
	// TraceURL is the URL of a run's trace in the operator's tracing UI, with {trace_id}
	// where the trace id goes, such as https://jaeger.example/trace/{trace_id}.
	TraceURL string `yaml:"trace_url"`
}

// MCPServe configures the orchestrator's MCP endpoint (streamable HTTP).
type MCPServe struct {
	// Listen is the address to serve on; empty serves none.
	Listen string `yaml:"listen"`
	// ContextHeaders are HTTP headers whose values join the ToolCallContext of the calls
	// made through the endpoint (as the header's name in lower case), beside _meta.
	ContextHeaders []string `yaml:"context_headers"`
	// Resource is the endpoint's URL as its clients reach it (https://mesh.example/mcp):
	// the OAuth 2.1 protected resource it is. With it, the endpoint publishes its
	// protected resource metadata (RFC 9728), names it in its 401 challenges, and takes
	// only bearer tokens issued for it (audience = this URL, RFC 8707).
	Resource string `yaml:"resource"`
	// Scopes grant tools to bearer tokens by scope: a session whose token has scope s may
	// list and call the tools whose names match one of Scopes[s] (path.Match globs), and
	// no others. Empty: a token's scopes are not looked at. Callers by certificate are
	// not limited by it.
	Scopes map[string][]string `yaml:"scopes"`
	// ProtocolVersions pins the MCP revisions the endpoint serves ("2026-07-28",
	// "2025-11-25"); empty serves both (and the earlier revisions the go-sdk speaks).
	ProtocolVersions []string `yaml:"protocol_versions"`
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Default returns the configuration used when no file is given.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:7070",
		Server: Server{MaxReceiveBytes: 4 << 20, MaxInflightReceiveBytes: 32 << 20, MaxOpenCalls: 4096},
		Registry: Registry{
			HeartbeatInterval:  Duration(2 * time.Second),
			LeaseTTL:           Duration(6 * time.Second),
			GracePeriod:        Duration(3 * time.Second),
			ReadinessGrace:     Duration(10 * time.Second),
			PinDefinitions:     true,
			Quarantine:         Quarantine{DescriptionBytes: 4096},
			MaxWorkers:         1024,
			MaxTools:           10000,
			MaxDefinitionBytes: 64 << 20,
			MaxServedTools:     200000,
		},
		Router: Router{
			DefaultToolTimeout: Duration(30 * time.Second),
			EjectAfterFailures: 3,
			EjectDuration:      Duration(10 * time.Second),
			MaxAttempts:        3,
		},
		Loop: Loop{
			MaxIterations:        20,
			MaxParallelToolCalls: 8,
			RunTimeout:           Duration(10 * time.Minute),
			MaxConcurrentRuns:    1000,
			RetainRuns:           1000,
			RetainBytes:          64 << 20,
			MaxToolResultBytes:   32 << 10,
			MaxArtifactBytes:     1 << 20,
			MaxBlackboardEntries: 1024,
			MaxBlackboardBytes:   3 << 20,
			MaxNestingDepth:      4,
			MaxNestedLoops:       64,
		},
		Journal: Journal{
			LeaseTTL:      Duration(10 * time.Second),
			ResumeGrace:   Duration(15 * time.Second),
			SnapshotEvery: 256,
			Retain:        Duration(7 * 24 * time.Hour),
			MemoryBytes:   256 << 20,
		},
		Provider: Provider{
			Name:      "auto",
			OpenAI:    ProviderAPI{Timeout: Duration(2 * time.Minute)},
			Anthropic: ProviderAPI{Timeout: Duration(2 * time.Minute)},
		},
		Context: Context{MaxBytes: DefaultContextMaxBytes, Default: ConverterSpec{Kind: "pass-through"}},
		Log:     Log{Level: "info", Format: "json"},
	}
}

// Load reads a YAML file over the defaults and validates the result.
func Load(path string) (Config, error) { return LoadEnv(path, nil) }

// LoadEnv is Load with the providers' settings filled from the environment (see
// ApplyEnv) before validation; a nil getenv reads nothing.
func LoadEnv(path string, getenv func(string) string) (Config, error) {
	if path == "" { // a file is to be read: none is named (LoadOver reads none)
		return Config{}, fmt.Errorf("config: %w", &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	return LoadOver(path, getenv, nil)
}

// LoadOver is LoadEnv with over, when not nil, changing the configuration after the
// environment and before validation: a command's flags that override keys of the file
// (and may supply one it requires). An empty path reads no file: the defaults, the
// environment and over. A refused value the environment set names its variable.
func LoadOver(path string, getenv func(string) string, over func(*Config)) (Config, error) {
	var b []byte
	if path != "" {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	c, err := parseOver(b, getenv, over)
	var invalid *ValidationError
	switch {
	case errors.As(err, &invalid):
		invalid.Path = path
		return Config{}, invalid
	case err != nil:
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML over the defaults, rejecting unknown keys, and validates the result.
func Parse(b []byte) (Config, error) { return ParseEnv(b, nil) }

// ParseEnv is Parse with the providers' settings filled from the environment before
// validation; a nil getenv reads nothing.
func ParseEnv(b []byte, getenv func(string) string) (Config, error) {
	return parseOver(b, getenv, nil)
}

// parseOver is ParseEnv with over applied before validation.
func parseOver(b []byte, getenv func(string) string, over func(*Config)) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: %s", ErrInvalid, describeYAMLError(b, err))
	}
	var filled map[string]envFill
	if getenv != nil {
		filled = c.applyEnv(getenv)
	}
	if over != nil {
		over(&c)
	}
	if err := c.Validate(); err != nil {
		var invalid *ValidationError
		if errors.As(err, &invalid) {
			// A refused value the environment set names its variable, unless over changed
			// it since.
			env := map[string]string{}
			for key, f := range filled {
				if *f.dst == f.value {
					env[key] = "$" + f.env
				}
			}
			return Config{}, invalid.sourced(env)
		}
		return Config{}, err
	}
	return c, nil
}

// Validate checks every field and reports all problems at once, each naming its key:
// a *ValidationError.
func (c Config) Validate() error {
	var errs []Problem
	bad := func(key, format string, args ...any) {
		errs = append(errs, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
	}
	c.validateServer(bad)
	c.validateContext(bad)
	c.validateMCP(bad)
	c.validateModels(bad)
	c.validateTelemetry(bad)
	c.validateJournal(bad)
	c.validateTLS(bad)
	c.validateTenants(bad)
	c.validateRegistry(bad)
	c.validateLoop(bad)
	c.validateProviders(bad)
	c.validateCredentials(bad)
	if len(errs) > 0 {
		return &ValidationError{Problems: errs}
	}
	return nil
}

// Problem is one setting Validate refused: its key, what is wrong with it, and, when
// known, where its value came from (a command's flag: "--log-level").
type Problem struct {
	Key, Message, Source string
}

// ValidationError is every problem Validate found; errors.Is(err, ErrInvalid) holds.
// Path is the file the settings were read from, if any, and Over the sources of the
// values set over it (WithSources): a problem whose value came from one of those
// (Source) is not the file's, and the file is named, with what was set over it, only
// when a problem is not known to be another's (one of its keys, or a key its settings
// require given a flag's: journal.data_dir for --journal sqlite).
type ValidationError struct {
	Path     string
	Over     []string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Path != "" && slices.ContainsFunc(e.Problems, func(p Problem) bool { return p.Source == "" }) {
		fmt.Fprintf(&b, "config %s", e.Path)
		if len(e.Over) > 0 {
			fmt.Fprintf(&b, " with %s", strings.Join(e.Over, ", "))
		}
		b.WriteString(": ")
	}
	b.WriteString(ErrInvalid.Error())
	for i, p := range e.Problems {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + p.Key)
		if p.Source != "" {
			b.WriteString(" (from " + p.Source + ")")
		}
		b.WriteString(": " + p.Message)
	}
	return b.String()
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

// sourced is e with the source of each problem whose key sources holds, as WithSources
// but without naming the sources in Over: the environment's variables, which fill keys
// the file leaves empty, go unsaid unless one of them is refused.
func (e *ValidationError) sourced(sources map[string]string) *ValidationError {
	if e == nil {
		return nil
	}
	out := &ValidationError{Path: e.Path, Over: slices.Clone(e.Over), Problems: slices.Clone(e.Problems)}
	for i, p := range out.Problems {
		if src, ok := sources[p.Key]; ok {
			out.Problems[i].Source = src
		}
	}
	return out
}

// WithSources is e with the source of each problem whose key sources holds (key →
// source: "log.level" → "--log-level"), and every source in Over.
func (e *ValidationError) WithSources(sources map[string]string) *ValidationError {
	out := e.sourced(sources)
	if out == nil {
		return nil
	}
	for _, src := range sources {
		if !slices.Contains(out.Over, src) {
			out.Over = append(out.Over, src)
		}
	}
	slices.Sort(out.Over)
	return out
}

// positive reports a duration that is not positive.
func positive(bad func(key, format string, args ...any), key string, d Duration) {
	if d <= 0 {
		bad(key, "must be positive, got %s", d.D())
	}
}

// validateServer checks the listen addresses and the server's bounds.
func (c Config) validateServer(bad func(key, format string, args ...any)) {
	if err := checkListen(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if c.HealthListen != "" {
		if err := checkListen(c.HealthListen); err != nil {
			bad("health_listen", "%v", err)
		} else if c.HealthListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			bad("health_listen", "must differ from listen (%s)", c.Listen)
		}
	}
	if c.Server.MaxReceiveBytes < 2<<20 || c.Server.MaxReceiveBytes > 64<<20 {
		// A run request at its documented bounds (1 MiB of text, a 64 KiB schema, the
		// context) must fit.
		bad("server.max_receive_bytes", "must be between 2097152 and 67108864, got %d", c.Server.MaxReceiveBytes)
	}
	if c.Server.MaxInflightReceiveBytes < c.Server.MaxReceiveBytes || c.Server.MaxInflightReceiveBytes > 4<<30 {
		bad("server.max_inflight_receive_bytes", "must be at least server.max_receive_bytes (%d) and at most 4294967296, got %d", c.Server.MaxReceiveBytes, c.Server.MaxInflightReceiveBytes)
	}
	if u := c.Console.TraceURL; u != "" {
		if pu, err := url.Parse(strings.ReplaceAll(u, "{trace_id}", "0")); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" ||
			!strings.Contains(u, "{trace_id}") || len(u) > 2048 {
			bad("console.trace_url", "must be an http(s) URL of at most 2048 bytes with {trace_id} in it, got %q", u)
		}
	}
	if len(c.Server.AllowedHosts) > 256 {
		bad("server.allowed_hosts", "at most 256 names, got %d", len(c.Server.AllowedHosts))
	}
	for _, h := range c.Server.AllowedHosts {
		if h == "" || len(h) > 253 || strings.ContainsAny(h, ":/ \t*") {
			bad("server.allowed_hosts", "%q is not a host name (a DNS name, without a port)", h)
			break
		}
	}
	if c.Server.MaxOpenCalls < 16 || c.Server.MaxOpenCalls > 1<<20 {
		bad("server.max_open_calls", "must be between 16 and 1048576, got %d", c.Server.MaxOpenCalls)
	} else if c.Server.MaxOpenCalls < c.Loop.MaxConcurrentRuns {
		bad("server.max_open_calls", "must be at least loop.max_concurrent_runs (%d): every run streaming its events holds a call, got %d", c.Loop.MaxConcurrentRuns, c.Server.MaxOpenCalls)
	}
}

// validateJournal checks the journal and the registry's lease timings.
func (c Config) validateJournal(bad func(key, format string, args ...any)) {
	positive(bad, "registry.heartbeat_interval", c.Registry.HeartbeatInterval)
	// A lease is renewed every third of it and looked after every half: shorter than
	// 100ms it would take the store's commits for its renewals.
	if c.Journal.LeaseTTL.D() < 100*time.Millisecond || c.Journal.LeaseTTL.D() > 24*time.Hour {
		bad("journal.lease_ttl", "must be between 100ms and 24h, got %s", c.Journal.LeaseTTL.D())
	}
	if o := c.Journal.Owner; len(o) > 256 || !utf8.ValidString(o) || strings.IndexByte(o, 0) >= 0 {
		bad("journal.owner", "must be at most 256 bytes of UTF-8 text without NUL bytes, got %d bytes", len(o))
	}
	positive(bad, "journal.resume_grace", c.Journal.ResumeGrace)
	positive(bad, "journal.retain", c.Journal.Retain)
	if c.Journal.SnapshotEvery < 4 || c.Journal.SnapshotEvery > 1<<20 {
		bad("journal.snapshot_every", "must be between 4 and 1048576 records, got %d", c.Journal.SnapshotEvery)
	}
	if c.Journal.MemoryBytes < 1<<20 || c.Journal.MemoryBytes > 1<<36 {
		bad("journal.memory_bytes", "must be between 1048576 and 68719476736, got %d", c.Journal.MemoryBytes)
	}
	switch c.Journal.Driver {
	case "", "memory", "sqlite":
	case "postgres":
		if c.Journal.DSN == "" {
			bad("journal.dsn", "is required with journal.driver postgres")
		}
	default:
		bad("journal.driver", "must be sqlite, postgres or memory, got %q", c.Journal.Driver)
	}
	if c.Journal.Driver == "sqlite" && c.Journal.DataDir == "" {
		bad("journal.data_dir", "is required with journal.driver sqlite (or pass --data-dir)")
	}
	positive(bad, "registry.lease_ttl", c.Registry.LeaseTTL)
	// The router takes a zero grace period for "use the default", so zero is refused
	// rather than silently meaning 3s.
	positive(bad, "registry.grace_period", c.Registry.GracePeriod)
}

// validateRegistry checks the registry's bounds and quarantine.
func (c Config) validateRegistry(bad func(key, format string, args ...any)) {
	if c.Registry.ReadinessGrace < 0 || c.Registry.ReadinessGrace.D() > 10*time.Minute {
		bad("registry.readiness_grace", "must be between 0s and 10m, got %s", c.Registry.ReadinessGrace.D())
	}
	if c.Registry.HeartbeatInterval > 0 && c.Registry.LeaseTTL > 0 && c.Registry.LeaseTTL < 2*c.Registry.HeartbeatInterval {
		bad("registry.lease_ttl", "must be at least twice registry.heartbeat_interval (%s), got %s", c.Registry.HeartbeatInterval.D(), c.Registry.LeaseTTL.D())
	}
	if c.Registry.MaxWorkers < 1 || c.Registry.MaxWorkers > 1<<20 {
		bad("registry.max_workers", "must be between 1 and 1048576, got %d", c.Registry.MaxWorkers)
	}
	if c.Registry.MaxTools < 1 || c.Registry.MaxTools > 1<<20 {
		bad("registry.max_tools", "must be between 1 and 1048576, got %d", c.Registry.MaxTools)
	}
	if c.Registry.MaxServedTools < 1 || c.Registry.MaxServedTools > 1<<24 {
		bad("registry.max_served_tools", "must be between 1 and 16777216, got %d", c.Registry.MaxServedTools)
	}
	if c.Registry.MaxDefinitionBytes < 1<<20 || c.Registry.MaxDefinitionBytes > 16<<30 {
		bad("registry.max_definition_bytes", "must be between 1048576 and 17179869184, got %d", c.Registry.MaxDefinitionBytes)
	}
	if q := c.Registry.Quarantine; q.DescriptionBytes < 0 || q.DescriptionBytes > 1<<20 {
		bad("registry.quarantine.description_bytes", "must be between 0 (no cap) and 1048576, got %d", q.DescriptionBytes)
	}
	for i, p := range c.Registry.Quarantine.QuarantinePatterns() {
		if _, err := regexp.Compile("(?i)" + p); err != nil || len(p) > 1024 {
			bad(fmt.Sprintf("registry.quarantine.patterns[%d]", i), "must be a regular expression of at most 1024 bytes: %v", err)
		}
	}
	for i, h := range c.Registry.ApprovedDefinitions {
		if !ContentHash(h) {
			bad(fmt.Sprintf("registry.approved_definitions[%d]", i), "must be a content hash (64 hex digits, as a refusal names it), got %q", h)
		}
	}
}

// validateLoop checks the router's and the loop's settings.
func (c Config) validateLoop(bad func(key, format string, args ...any)) {
	positive(bad, "router.default_tool_timeout", c.Router.DefaultToolTimeout)
	if c.Router.EjectAfterFailures < 1 {
		bad("router.eject_after_failures", "must be at least 1, got %d", c.Router.EjectAfterFailures)
	}
	positive(bad, "router.eject_duration", c.Router.EjectDuration)
	if c.Router.MaxAttempts < 1 || c.Router.MaxAttempts > 10 {
		bad("router.max_attempts", "must be between 1 and 10, got %d", c.Router.MaxAttempts)
	}
	if c.Loop.MaxIterations < 1 {
		bad("loop.max_iterations", "must be at least 1, got %d", c.Loop.MaxIterations)
	}
	if c.Loop.MaxParallelToolCalls < 1 {
		bad("loop.max_parallel_tool_calls", "must be at least 1, got %d", c.Loop.MaxParallelToolCalls)
	}
	positive(bad, "loop.run_timeout", c.Loop.RunTimeout)
	if c.Loop.EmptyResponseRetries < 0 {
		bad("loop.empty_response_retries", "must not be negative, got %d", c.Loop.EmptyResponseRetries)
	}
	if c.Loop.MaxConcurrentRuns < 1 {
		bad("loop.max_concurrent_runs", "must be at least 1, got %d", c.Loop.MaxConcurrentRuns)
	}
	if c.Loop.RetainRuns < 0 {
		bad("loop.retain_runs", "must not be negative, got %d", c.Loop.RetainRuns)
	}
	if c.Loop.RetainBytes < 1<<20 || c.Loop.RetainBytes > 1<<34 {
		bad("loop.retain_bytes", "must be between 1048576 and 17179869184, got %d", c.Loop.RetainBytes)
	}
	if c.Loop.MaxToolResultBytes < 1<<10 || c.Loop.MaxToolResultBytes > 4<<20 {
		bad("loop.max_tool_result_bytes", "must be between 1024 and 4194304, got %d", c.Loop.MaxToolResultBytes)
	}
	for i, g := range c.Loop.DefaultToolGroups {
		if !roleRE.MatchString(g) {
			bad(fmt.Sprintf("loop.default_tool_groups[%d]", i), "must match %s, got %q", roleRE, g)
		}
	}
	if c.Loop.MaxArtifactBytes < 1<<10 || c.Loop.MaxArtifactBytes > 4<<20 {
		bad("loop.max_artifact_bytes", "must be between 1024 and 4194304, got %d", c.Loop.MaxArtifactBytes)
	}
	if c.Loop.MaxBlackboardEntries < 1 || c.Loop.MaxBlackboardEntries > 1<<20 {
		bad("loop.max_blackboard_entries", "must be between 1 and 1048576, got %d", c.Loop.MaxBlackboardEntries)
	}
	if c.Loop.MaxBlackboardBytes < 1<<10 || c.Loop.MaxBlackboardBytes > 1<<30 {
		bad("loop.max_blackboard_bytes", "must be between 1024 and 1073741824, got %d", c.Loop.MaxBlackboardBytes)
	}
	if c.Loop.MaxNestingDepth < 1 || c.Loop.MaxNestingDepth > 64 {
		bad("loop.max_nesting_depth", "must be between 1 and 64, got %d", c.Loop.MaxNestingDepth)
	}
	if c.Loop.MaxNestedLoops < 1 || c.Loop.MaxNestedLoops > 1<<16 {
		bad("loop.max_nested_loops", "must be between 1 and 65536, got %d", c.Loop.MaxNestedLoops)
	}
}

// validateProviders checks the agentic tools' names, the model providers and logging.
func (c Config) validateProviders(bad func(key, format string, args ...any)) {
	for _, name := range slices.Sorted(maps.Keys(c.AgenticTools)) {
		if strings.TrimSpace(name) == "" {
			bad("agentic_tools", "a name must not be blank")
		}
		c.AgenticTools[name].validatePrompt(bad, "agentic_tools."+name)
	}
	switch c.Provider.Name {
	case "", "auto", "scripted":
	case "openai":
		if !c.Provider.OpenAI.Configured() {
			bad("provider.openai", "has no api_key and no base_url (set OPENAI_API_KEY or OPENAI_BASE_URL)")
		}
	case "anthropic":
		if c.Provider.Anthropic.APIKey == "" {
			bad("provider.anthropic.api_key", "is empty (set ANTHROPIC_API_KEY)")
		}
	default:
		bad("provider.name", "unknown provider %q (one of: auto, scripted, openai, anthropic)", c.Provider.Name)
	}
	for _, p := range []struct {
		name string
		api  ProviderAPI
	}{{"openai", c.Provider.OpenAI}, {"anthropic", c.Provider.Anthropic}} {
		name, api := p.name, p.api
		if api.BaseURL != "" {
			if u, err := url.Parse(api.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("provider."+name+".base_url", "must be an http(s) URL, got %q", api.BaseURL)
			}
		}
		if api.MaxRetries < 0 || api.MaxRetries > 10 {
			bad("provider."+name+".max_retries", "must be between 0 and 10, got %d", api.MaxRetries)
		}
		if api.Timeout < 0 {
			bad("provider."+name+".timeout", "must not be negative, got %s", api.Timeout.D())
		}
		if api.MaxTokens < 0 {
			bad("provider."+name+".max_tokens", "must not be negative, got %d", api.MaxTokens)
		}
	}
	if c.Provider.Anthropic.Stream != nil {
		bad("provider.anthropic.stream", "is not supported: only provider.openai has a non-streaming mode")
	}
	if len(c.Provider.Anthropic.StreamModels) > 0 {
		bad("provider.anthropic.stream_models", "is not supported: only provider.openai has a non-streaming mode")
	}
	for m := range c.Provider.OpenAI.StreamModels {
		if strings.TrimSpace(m) == "" {
			bad("provider.openai.stream_models", "has an empty model name")
		}
	}
	if c.Provider.Script != "" {
		if _, err := os.Stat(c.Provider.Script); err != nil {
			bad("provider.script", "%v", err)
		}
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be one of debug, info, warn, error; got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "must be json or text; got %q", c.Log.Format)
	}
}

// describeYAMLError rewrites the decoder's "line N: problem" messages as
// "line N: key.path: problem", so that every error names its key.
func describeYAMLError(doc []byte, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	keys := map[int]string{}
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) == nil {
		collectKeys(&root, "", keys)
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		var line int
		if _, scanErr := fmt.Sscanf(m, "line %d:", &line); scanErr == nil && keys[line] != "" {
			prefix := fmt.Sprintf("line %d:", line)
			m = prefix + " " + keys[line] + ":" + strings.TrimPrefix(m, prefix)
		}
		msgs[i] = m
	}
	return strings.Join(msgs, "; ")
}

// collectKeys maps the lines of a YAML document to the dotted path of the key written
// (or whose value starts) on them.
func collectKeys(n *yaml.Node, prefix string, keys map[int]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectKeys(c, prefix, keys)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if _, seen := keys[k.Line]; !seen {
				keys[k.Line] = path
			}
			if v.Kind == yaml.MappingNode {
				collectKeys(v, path, keys) // its lines belong to its own keys
			} else if _, seen := keys[v.Line]; !seen {
				keys[v.Line] = path
			}
		}
	}
}

func checkListen(addr string) error {
	if addr == "" {
		return errors.New("is empty")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("invalid port %q", port)
	}
	return nil
}

// validateTLS checks the tls and trust sections.
func (c Config) validateTLS(bad func(key, format string, args ...any)) {
	t := c.TLS
	if t.Enabled() {
		for _, f := range []struct{ key, path string }{{"tls.ca_file", t.CAFile}, {"tls.cert_file", t.CertFile}, {"tls.key_file", t.KeyFile}} {
			if f.path == "" {
				bad(f.key, "is required with the other tls files (mutual TLS needs a CA bundle, a certificate and a key)")
			}
		}
		if t.Plaintext {
			bad("tls.plaintext", "cannot be set with tls files")
		}
	} else if !t.Plaintext && !loopback(c.Listen) {
		bad("tls", "listen %s is not a loopback address: set tls.ca_file, tls.cert_file and tls.key_file for mutual TLS, or tls.plaintext: true to serve without TLS (local development only)", c.Listen)
	}
	if t.ReloadInterval < 0 {
		bad("tls.reload_interval", "must not be negative, got %s", t.ReloadInterval.D())
	}
	seen := map[string]bool{}
	for i, g := range c.Trust.Workers {
		key := fmt.Sprintf("trust.workers[%d]", i)
		if !strings.HasPrefix(g.ID, "spiffe://") || len(g.ID) > 2048 {
			bad(key+".id", "must be a SPIFFE ID (spiffe://trust-domain/path), got %q", g.ID)
		}
		if seen[g.ID] {
			bad(key+".id", "%s is granted twice", g.ID)
		}
		seen[g.ID] = true
		if len(g.Groups) == 0 {
			bad(key+".groups", "must name at least one tool group")
		}
	}
	for i, id := range c.Trust.Clients {
		if !strings.HasPrefix(id, "spiffe://") {
			bad(fmt.Sprintf("trust.clients[%d]", i), "must be a SPIFFE ID (spiffe://trust-domain/path), got %q", id)
		}
	}
	if !t.Enabled() && (len(c.Trust.Workers) > 0 || len(c.Trust.Clients) > 0) {
		bad("trust", "identities are verified only with mutual TLS: set tls.ca_file, tls.cert_file and tls.key_file")
	}
}

// loopback reports whether a listen address is on the loopback interface only.
// loopback is wire.Loopback, which this package may not import.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	return LoopbackHost(host)
}

// LoopbackHost reports whether a host name or IP address is on the loopback interface.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Bounds of auth.jwt.refresh_interval: more often than every 10 s loads the identity
// provider for nothing; past a day, a key it removed stays trusted too long.
const (
	minJWKSRefresh = 10 * time.Second
	maxJWKSRefresh = 24 * time.Hour
)

// validateJWKSURL checks auth.jwt.jwks_url and the keys that apply to it only.
func (c Config) validateJWKSURL(bad func(key, format string, args ...any)) {
	j := c.Auth.JWT
	if j.JWKSURL == "" {
		if j.RefreshInterval != 0 {
			bad("auth.jwt.refresh_interval", "applies to auth.jwt.jwks_url only (a jwks_file is read again when it changes)")
		}
		if j.CAFile != "" {
			bad("auth.jwt.ca_file", "applies to auth.jwt.jwks_url only")
		}
		return
	}
	if j.JWKSFile != "" {
		bad("auth.jwt.jwks_url", "cannot be set with auth.jwt.jwks_file: the key set comes from one of them")
	}
	u, err := url.Parse(j.JWKSURL)
	switch {
	case err != nil:
		bad("auth.jwt.jwks_url", "%v", err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		bad("auth.jwt.jwks_url", "must be an https URL, got %q", u.Redacted())
	case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
		bad("auth.jwt.jwks_url", "must be https: %s is not a loopback host (plain http is for local development only)", u.Hostname())
	case u.Scheme == "http" && j.CAFile != "":
		bad("auth.jwt.ca_file", "applies to an https auth.jwt.jwks_url only")
	}
	if r := j.RefreshInterval.D(); r != 0 && (r < minJWKSRefresh || r > maxJWKSRefresh) {
		bad("auth.jwt.refresh_interval", "must be between %s and %s, got %s", minJWKSRefresh, maxJWKSRefresh, r)
	}
}

// validateTenants checks the auth and tenants sections.
func (c Config) validateTenants(bad func(key, format string, args ...any)) {
	j := c.Auth.JWT
	if j.Enabled() {
		if j.Issuer == "" {
			bad("auth.jwt.issuer", "is required with a key set (tokens of any issuer would be accepted)")
		}
		if j.Audience == "" {
			bad("auth.jwt.audience", "is required with a key set (tokens issued for another service would be accepted)")
		}
	} else if j.Issuer != "" || j.Audience != "" || j.TenantClaim != "" {
		bad("auth.jwt", "jwks_file or jwks_url is required with the other auth.jwt keys")
	}
	c.validateJWKSURL(bad)
	owner := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Tenants)) {
		t := c.Tenants[name]
		if name == "" || len(name) > 128 || strings.ContainsAny(name, "\r\n\x00") {
			bad("tenants", "tenant names are 1 to 128 bytes without control characters, got %q", name)
		}
		if len(t.Groups) == 0 {
			bad("tenants."+name+".groups", "must name at least one tool group")
		}
		for _, q := range []struct {
			key string
			v   int
		}{{"max_concurrent_runs", t.MaxConcurrentRuns}, {"tool_calls_per_minute", t.ToolCallsPerMinute},
			{"model_calls_per_minute", t.ModelCallsPerMinute}, {"max_messages", t.MaxMessages}, {"max_request_bytes", t.MaxRequestBytes}} {
			if q.v < 0 || q.v > 1<<24 {
				bad("tenants."+name+"."+q.key, "must be between 0 (no bound) and 16777216, got %d", q.v)
			}
		}
		for i, p := range t.Tools {
			if strings.TrimSuffix(p, "*") == "" || len(p) > 256 || strings.ContainsAny(p, " \r\n\x00") {
				bad(fmt.Sprintf("tenants.%s.tools[%d]", name, i), "must be a tool name or a prefix followed by *, got %q", p)
			}
		}
		for i, id := range t.Clients {
			key := fmt.Sprintf("tenants.%s.clients[%d]", name, i)
			if !strings.HasPrefix(id, "spiffe://") {
				bad(key, "must be a SPIFFE ID (spiffe://trust-domain/path), got %q", id)
			}
			if o, dup := owner[id]; dup {
				bad(key, "%s acts for tenant %s already", id, o)
			}
			owner[id] = name
			if !c.TLS.Enabled() {
				bad(key, "client identities are verified only with mutual TLS: set tls.ca_file, tls.cert_file and tls.key_file")
			}
		}
	}
	if len(c.Tenants) > 0 && !j.Enabled() && len(owner) == 0 {
		bad("tenants", "no caller can be told to belong to a tenant: set auth.jwt (a tenant claim) or tenants.<name>.clients (client certificates)")
	}
}
