package config

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/celexpr"
)

// toolNameRE is the rule tool names follow (the strictest provider's).
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// builtinRoles are the roles of the orchestrator's own groups.
var builtinRoles = map[string]bool{"agent_process": true, "blackboard": true, "communication": true}

// roleRE is the rule group roles follow.
var roleRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// Converter kinds a ConverterSpec may name.
var converterKinds = []string{"pass-through", "none", "allow-keys", "deny-keys", "cel"}

// DefaultContextMaxBytes bounds the encoded ToolCallContext of one call.
const DefaultContextMaxBytes = 8192

// Context configures the ToolCallContext that travels to workers.
type Context struct {
	// MaxBytes bounds the encoded context of a call (and of a run request).
	MaxBytes int `yaml:"max_bytes"`
	// Secrets are keys that reach a group only when its converter is allow-keys and lists
	// them explicitly.
	Secrets []string `yaml:"secrets"`
	// Default is the converter of groups that configure none.
	Default ConverterSpec `yaml:"default"`
}

// ConverterSpec chooses a converter: what of the context a group's workers receive.
type ConverterSpec struct {
	// Kind is pass-through, none, allow-keys, deny-keys or cel.
	Kind string `yaml:"kind"`
	// Keys are the keys allow-keys keeps or deny-keys drops.
	Keys []string `yaml:"keys"`
	// Keep and Set are a cel converter's expressions: Keep, a bool over key and value,
	// decides which entries pass (all when empty); Set gives keys their values.
	Keep string            `yaml:"keep"`
	Set  map[string]string `yaml:"set"`
}

// Group configures one tool group, by role.
type Group struct {
	// Context is the group's converter; unset means context.default.
	Context *ConverterSpec `yaml:"context"`
	// Facade, when set, offers the whole group to the model as one facade: the model sees
	// one tool until it opens it.
	Facade *GroupFacade `yaml:"facade"`
	// Artifacts send the artifacts of the group's tools to sinks.
	Artifacts []ArtifactSink `yaml:"artifacts"`
	// Assets keep some of the group's artifacts as the run's assets.
	Assets []ArtifactFilter `yaml:"assets"`
	// MCP, when set, makes the group the tools of an MCP server (mcp_servers); no worker
	// serves it.
	MCP *GroupMCP `yaml:"mcp"`
	// TokenExchange exchanges the caller's bearer token for one scoped to the group
	// (RFC 8693), sent to the group alone; Secrets gives it credentials per tenant from
	// files. At most one.
	TokenExchange *TokenExchange `yaml:"token_exchange"`
	Secrets       *GroupSecrets  `yaml:"secrets"`
	// Policy is the group's call policy: rules over each call of its tools (the tool, the
	// arguments, the caller's claims) that allow it, deny it or make it wait for approval.
	// A tool's own rules (tools.<name>.policy) are read before its group's.
	Policy []PolicyRule `yaml:"policy"`
	// Description and UsageNotes describe the group to the model and in listings; for a
	// group workers or an MCP server serve they replace what those say.
	Description string `yaml:"description"`
	UsageNotes  string `yaml:"usage_notes"`
	// Include makes the group one of the config's own: the tools of other groups (worker
	// groups, MCP groups, built-in groups) whose "<group>/<tool>" matches one of these
	// patterns (the tool part a path.Match glob: "crm/find_*", "math/add"); Exclude then
	// drops those that match one. The group may include its own role to narrow it.
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
	// Facades put some of the group's tools behind facades of their own (by names or by
	// regular expressions); the tools none takes stay as they are.
	Facades []SubFacade `yaml:"facades"`
	// Offer says how a run gets the group's tools: "flat" (each tool, the default),
	// "facade" (one unfolding tool; the same as setting facade) or "reference" (each tool,
	// and the usage notes join the system prompt).
	Offer string `yaml:"offer"`
	// Provider, Version and Permissions describe a group of the config's own or an MCP
	// group in listings, as a worker's registration describes its groups: who provides
	// it, which version, and what it needs from its host ("host_access",
	// "internet_access").
	Provider    string   `yaml:"provider"`
	Version     string   `yaml:"version"`
	Permissions []string `yaml:"permissions"`
}

// GroupPermissions are the permissions a group may declare.
var GroupPermissions = []string{"host_access", "internet_access"}

// SubFacade is a facade over some of a group's tools: those named in Tools, and those
// whose names contain a match of one of Matching (regular expressions).
type SubFacade struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	UsageNotes  string   `yaml:"usage_notes"`
	Tools       []string `yaml:"tools"`
	Matching    []string `yaml:"matching"`
}

// GroupMCP takes a group's tools from an MCP server.
type GroupMCP struct {
	// Server names an entry of mcp_servers.
	Server string `yaml:"server"`
	// Include keeps the tools whose names match one of these patterns (path.Match globs:
	// exact names, "get_*"); empty keeps all. Exclude then drops those that match one.
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
	// Filter is a CEL expression over a tool's name, description and annotations; the
	// group keeps the tools it is true for (after include and exclude).
	Filter string `yaml:"filter"`
	// ExcludeWhen is a CEL expression like Filter: the group drops the tools it is true
	// for (after Filter).
	ExcludeWhen string `yaml:"exclude_when"`
}

// MCPServer says how to reach an MCP server: command (stdio) or url (streamable HTTP).
type MCPServer struct {
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	Dir     string            `yaml:"dir"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// ContextHeaders name ToolCallContext keys (as the group's converter leaves them) whose
	// values become HTTP headers of the session, such as Authorization: the orchestrator
	// keeps one session per distinct set of values (streamable HTTP only).
	ContextHeaders []string `yaml:"context_headers"`
	// Timeout bounds one tool call; zero means 30s.
	Timeout Duration `yaml:"timeout"`
	// TLS configures an https url: the CA bundle the server's certificate must chain to
	// (default: the system's roots) and a client certificate for servers that ask for one.
	TLS MCPServerTLS `yaml:"tls"`
	// ProtocolVersion pins the MCP revision spoken with the server ("2026-07-28" or
	// "2025-11-25"); empty: the newest both speak.
	ProtocolVersion string `yaml:"protocol_version"`
}

// MCPProtocolVersions are the MCP revisions a config may pin, newest first.
var MCPProtocolVersions = []string{"2026-07-28", "2025-11-25"}

// MCPServerTLS is how the orchestrator connects to an MCP server over HTTPS.
type MCPServerTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// ArtifactFilter chooses artifacts, or elements of a list artifact, and what to take of
// them. Expressions are CEL over `value` (the artifact's JSON value) and `type_name`.
type ArtifactFilter struct {
	// Type, when set, takes only artifacts of this type name (simple or qualified).
	Type string `yaml:"type"`
	// When, a CEL predicate, takes only artifacts for which it is true.
	When string `yaml:"when"`
	// Transform, a CEL expression, computes what is taken instead of the artifact.
	Transform string `yaml:"transform"`
	// TransformType is the type name of what Transform computes; default the artifact's.
	TransformType string `yaml:"transform_type"`
}

// ArtifactSink sends chosen artifacts to sinks: "blackboard", "assets", or a sink the
// program embedding the orchestrator registered.
type ArtifactSink struct {
	ArtifactFilter `yaml:",inline"`
	Sinks          []string `yaml:"sinks"`
}

// Replan makes a tool ask the run to replan after it returns.
type Replan struct {
	// Type and When choose the results that replan: an artifact of Type for which When
	// holds. Both empty: every call that returns replans.
	Type string `yaml:"type"`
	When string `yaml:"when"`
	// Reason is the replan's reason; default "<tool> replans" (always) or "<tool> replans
	// based on result".
	Reason string `yaml:"reason"`
	// Add, a CEL expression, computes the object the replan puts on the blackboard
	// (typed AddType, default the artifact's); default: the artifact itself.
	Add     string `yaml:"add"`
	AddType string `yaml:"add_type"`
}

// GroupFacade exposes a tool group as one facade.
type GroupFacade struct {
	// Name of the facade tool; default: the group's role.
	Name string `yaml:"name"`
	// Description shown to the model; default: the group's description.
	Description string `yaml:"description"`
	// UsageNotes appended when it unfolds; default: the group's usage notes.
	UsageNotes string `yaml:"usage_notes"`
}

// Tool configures one tool, by name.
type Tool struct {
	// Description, when set, replaces the tool's description as the model reads it, and
	// Note is appended to it as "<description>. <note>": for tools the mesh does not own
	// (a worker's, an MCP server's) whose text the operator wants to change.
	Description string `yaml:"description"`
	Note        string `yaml:"note"`
	// OneShot, when set, lets the tool run once per tool loop; later calls in the same loop
	// are answered with the ALREADY LOADED text and this advice.
	OneShot *OneShot `yaml:"one_shot"`
	// Artifacts and Assets are as for a group, for this tool alone.
	Artifacts []ArtifactSink   `yaml:"artifacts"`
	Assets    []ArtifactFilter `yaml:"assets"`
	// Replan, when set, makes the tool ask to replan after it returns.
	Replan *Replan `yaml:"replan"`
	// Approval, when set, makes every call of the tool wait for a person's approval
	// (ApproveToolCall) before it is sent, or (required: false) waives the approval the
	// tool's definition asks for.
	Approval *Approval `yaml:"approval"`
	// Policy is the tool's call policy, read before its group's (groups.<role>.policy).
	Policy []PolicyRule `yaml:"policy"`
}

// PolicyRule is one rule of a call policy: when When (a CEL bool over tool, group,
// args, tenant, caller, claims and scopes) holds for a call, Effect applies (allow, deny
// or approve) and no later rule is read; Reason is what the model reads of a denial and
// the approver of an approval. A call no rule holds for is allowed.
type PolicyRule struct {
	When   string `yaml:"when"`
	Effect string `yaml:"effect"`
	Reason string `yaml:"reason"`
}

// PolicyOf is the call policy of tool name of group role: the tool's rules, then the
// group's. Empty when neither has rules.
func (c Config) PolicyOf(role, name string) []celexpr.Rule {
	var rules []celexpr.Rule
	for _, r := range append(slices.Clip(c.Tools[name].Policy), c.Groups[role].Policy...) {
		rules = append(rules, celexpr.Rule{When: r.When, Effect: celexpr.Effect(r.Effect), Reason: r.Reason})
	}
	return rules
}

// HasPolicies reports whether any group or tool has a call policy.
func (c Config) HasPolicies() bool {
	for _, g := range c.Groups {
		if len(g.Policy) > 0 {
			return true
		}
	}
	for _, t := range c.Tools {
		if len(t.Policy) > 0 {
			return true
		}
	}
	return false
}

// checkPolicy checks the rules of the policy at key.
func checkPolicy(bad func(key, format string, args ...any), key string, rules []PolicyRule) {
	if len(rules) > celexpr.MaxRules/2 {
		bad(key, "has %d rules; at most %d (a tool's and its group's together are at most %d)", len(rules), celexpr.MaxRules/2, celexpr.MaxRules)
		return
	}
	var rs []celexpr.Rule
	for _, r := range rules {
		rs = append(rs, celexpr.Rule{When: r.When, Effect: celexpr.Effect(r.Effect), Reason: r.Reason})
	}
	if _, err := celexpr.NewPolicy(rs); err != nil {
		bad(key, "%v", err)
	}
}

// Approval configures the approval of a tool's calls.
type Approval struct {
	// Required is whether calls wait for approval; default true.
	Required *bool `yaml:"required"`
	// Timeout ends the wait: the call does not run, and the model is told. Default 1h.
	Timeout Duration `yaml:"timeout"`
}

// DefaultApprovalTimeout is how long a call waits for approval when its config says
// nothing.
const DefaultApprovalTimeout = time.Hour

// ApprovalOf reports whether calls of tool name wait for approval, given what its
// definition asks for, and for how long.
func (c Config) ApprovalOf(name string, definitionAsks bool) (bool, time.Duration) {
	a := c.Tools[name].Approval
	if a == nil {
		return definitionAsks, DefaultApprovalTimeout
	}
	required := a.Required == nil || *a.Required
	timeout := time.Duration(a.Timeout)
	if timeout <= 0 {
		timeout = DefaultApprovalTimeout
	}
	return required, timeout
}

// MaxToolText bounds a tool's description and note in the config.
const MaxToolText = 16 << 10

// OneShot is the advice appended to the ALREADY LOADED answer of a one-shot tool.
type OneShot struct {
	Advice string `yaml:"advice"`
}

func (c Config) validateMCP(bad func(key, format string, args ...any)) {
	if c.MCPServe.Listen != "" {
		if err := checkListen(c.MCPServe.Listen); err != nil {
			bad("mcp_serve.listen", "%v", err)
		} else if !c.TLS.Enabled() && !c.TLS.Plaintext && !loopback(c.MCPServe.Listen) {
			// As for the gRPC port: callers' tokens and tool results would cross the
			// network in the clear.
			bad("mcp_serve.listen", "%s is not a loopback address: set tls.* to serve the MCP endpoint over HTTPS, or tls.plaintext: true to serve it without TLS (local development only)", c.MCPServe.Listen)
		}
	}
	if r := c.MCPServe.Resource; r != "" {
		u, err := url.Parse(r)
		switch {
		case err != nil || u.Host == "" || u.Fragment != "" || u.RawQuery != "" || (u.Scheme != "https" && (u.Scheme != "http" || !LoopbackHost(u.Hostname()))):
			bad("mcp_serve.resource", "must be the endpoint's https URL (http on a loopback host), without query or fragment, got %q", r)
		case c.Auth.JWT.Issuer == "":
			bad("mcp_serve.resource", "needs auth.jwt: the protected resource takes the tokens of its issuer")
		}
	}
	for _, scope := range sortedKeys(c.MCPServe.Scopes) {
		key := "mcp_serve.scopes." + scope
		if c.Auth.JWT.Issuer == "" {
			bad(key, "needs auth.jwt: scopes are claims of bearer tokens")
		}
		if strings.TrimSpace(scope) == "" || strings.ContainsAny(scope, " \"\\") {
			bad(key, "is not a scope (printable, without spaces or quotes)")
		}
		for i, p := range c.MCPServe.Scopes[scope] {
			if _, err := path.Match(p, ""); err != nil || strings.TrimSpace(p) == "" {
				bad(fmt.Sprintf("%s[%d]", key, i), "is not a valid glob pattern: %q", p)
			}
		}
	}
	for i, v := range c.MCPServe.ProtocolVersions {
		if !slices.Contains(MCPProtocolVersions, v) {
			bad(fmt.Sprintf("mcp_serve.protocol_versions[%d]", i), "must be one of %s, got %q", strings.Join(MCPProtocolVersions, ", "), v)
		}
	}
	for i, h := range c.MCPServe.ContextHeaders {
		switch {
		case strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\r\n"):
			bad(fmt.Sprintf("mcp_serve.context_headers[%d]", i), "must be an HTTP header name, got %q", h)
		case strings.EqualFold(h, "Authorization") || strings.EqualFold(h, "Proxy-Authorization") || strings.EqualFold(h, "Cookie"):
			// The endpoint's callers' credentials are for it alone: MCP forbids passing the
			// token a server received on to the services behind it.
			bad(fmt.Sprintf("mcp_serve.context_headers[%d]", i), "%q carries the caller's credentials for this endpoint, which must not be passed on to tools; "+
				"a group that needs the caller's identity exchanges its token for one of its own (groups.<role>.token_exchange)", h)
		}
	}
	for _, name := range sortedKeys(c.MCPServers) {
		s, key := c.MCPServers[name], "mcp_servers."+name
		if !roleRE.MatchString(name) {
			bad(key, "the server name must match %s", roleRE)
		}
		switch {
		case (s.Command == "") == (s.URL == ""):
			bad(key, "give exactly one of command (stdio) and url (streamable HTTP)")
		case s.URL != "":
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(key+".url", "must be an http(s) URL, got %q", s.URL)
			}
		}
		if s.Timeout < 0 {
			bad(key+".timeout", "must not be negative, got %s", s.Timeout.D())
		}
		if v := s.ProtocolVersion; v != "" && !slices.Contains(MCPProtocolVersions, v) {
			bad(key+".protocol_version", "must be one of %s, got %q", strings.Join(MCPProtocolVersions, ", "), v)
		}
		if len(s.ContextHeaders) > 0 && s.URL == "" {
			bad(key+".context_headers", "needs url: only a streamable-HTTP server takes headers")
		}
		if t := s.TLS; t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
			if !strings.HasPrefix(s.URL, "https://") {
				bad(key+".tls", "needs an https url, got %q", s.URL)
			}
			if (t.CertFile == "") != (t.KeyFile == "") {
				bad(key+".tls", "a client certificate needs both cert_file and key_file")
			}
		}
		for i, h := range s.ContextHeaders {
			if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\r\n") {
				bad(fmt.Sprintf("%s.context_headers[%d]", key, i), "must be an HTTP header name, got %q", h)
			}
		}
	}
}

func (c Config) validateContext(bad func(key, format string, args ...any)) {
	if c.Context.MaxBytes < 256 || c.Context.MaxBytes > 1<<20 {
		bad("context.max_bytes", "must be between 256 and 1048576, got %d", c.Context.MaxBytes)
	}
	for i, k := range c.Context.Secrets {
		checkKey(bad, fmt.Sprintf("context.secrets[%d]", i), k)
	}
	checkConverter(bad, "context.default", c.Context.Default)
	for _, role := range sortedKeys(c.Groups) {
		if strings.TrimSpace(role) == "" {
			bad("groups", "has an empty group role")
			continue
		}
		if g := c.Groups[role]; g.Context != nil {
			checkConverter(bad, "groups."+role+".context", *g.Context)
		}
		if f := c.Groups[role].Facade; f != nil && f.Name != "" && !toolNameRE.MatchString(f.Name) {
			bad("groups."+role+".facade.name", "must match %s, got %q", toolNameRE, f.Name)
		}
		g := c.Groups[role]
		switch g.Offer {
		case "", "flat", "facade", "reference":
		default:
			bad("groups."+role+".offer", "must be flat, facade or reference, got %q", g.Offer)
		}
		if g.Facade != nil && (g.Offer == "flat" || g.Offer == "reference") {
			bad("groups."+role+".offer", "is %s, but groups.%s.facade offers the group as a facade", g.Offer, role)
		}
		if g.Facade != nil && len(g.Facades) > 0 {
			bad("groups."+role+".facades", "cannot be set with groups.%s.facade, which already puts the whole group behind one facade", role)
		}
		for i, f := range g.Facades {
			key := fmt.Sprintf("groups.%s.facades[%d]", role, i)
			if !toolNameRE.MatchString(f.Name) {
				bad(key+".name", "must match %s, got %q", toolNameRE, f.Name)
			}
			if strings.TrimSpace(f.Description) == "" {
				bad(key+".description", "is empty: the model reads it to decide whether to open the facade")
			}
			if len(f.Tools) == 0 && len(f.Matching) == 0 {
				bad(key, "takes no tool: give tools or matching")
			}
			for j, re := range f.Matching {
				if _, err := regexp.Compile(re); err != nil {
					bad(fmt.Sprintf("%s.matching[%d]", key, j), "%v", err)
				}
			}
		}
		if g.MCP != nil || len(g.Include) > 0 {
			if builtinRoles[role] {
				bad("groups."+role, "is a group of the orchestrator's own (agent_process, blackboard, communication): it cannot take tools from an MCP server or other groups")
			}
			if !roleRE.MatchString(role) {
				bad("groups."+role, "the role must match %s to be requested", roleRE)
			}
		}
		if g.MCP != nil && len(g.Include) > 0 {
			bad("groups."+role+".include", "cannot be set with groups.%s.mcp: a group takes its tools from one MCP server or from other groups", role)
		}
		for field, pats := range map[string][]string{"include": g.Include, "exclude": g.Exclude} {
			for i, p := range pats {
				src, glob, ok := strings.Cut(p, "/")
				if _, err := path.Match(glob, ""); !ok || err != nil || !roleRE.MatchString(src) || glob == "" {
					bad(fmt.Sprintf("groups.%s.%s[%d]", role, field, i), "must be <group>/<tool glob> such as \"crm/find_*\", got %q", p)
				}
			}
		}
		if len(g.Exclude) > 0 && len(g.Include) == 0 {
			bad("groups."+role+".exclude", "needs include: exclude narrows what include takes")
		}
		if m := c.Groups[role].MCP; m != nil {
			key := "groups." + role + ".mcp"
			if _, ok := c.MCPServers[m.Server]; !ok {
				bad(key+".server", "names no entry of mcp_servers (configured: [%s]), got %q", strings.Join(sortedKeys(c.MCPServers), ", "), m.Server)
			}
			for field, pats := range map[string][]string{"include": m.Include, "exclude": m.Exclude} {
				for i, p := range pats {
					if _, err := path.Match(p, ""); err != nil || strings.TrimSpace(p) == "" {
						bad(fmt.Sprintf("%s.%s[%d]", key, field, i), "is not a valid glob pattern: %q", p)
					}
				}
			}
			for field, src := range map[string]string{"filter": m.Filter, "exclude_when": m.ExcludeWhen} {
				if src == "" {
					continue
				}
				if _, err := celexpr.NewFilter(src); err != nil {
					bad(key+"."+field, "%v", err)
				}
			}
		}
	}
	c.validateTools(bad)
	for _, role := range sortedKeys(c.Groups) {
		c.Groups[role].validateDescription(bad, "groups."+role)
		checkPolicy(bad, "groups."+role+".policy", c.Groups[role].Policy)
	}
}

// validateDescription checks what a group says of itself in listings.
func (g Group) validateDescription(bad func(key, format string, args ...any), key string) {
	for _, x := range [...]struct{ key, text string }{{"provider", g.Provider}, {"version", g.Version}} {
		switch {
		case len(x.text) > 128:
			bad(key+"."+x.key, "is %d bytes; at most 128", len(x.text))
		case strings.ContainsFunc(x.text, unicode.IsControl):
			bad(key+"."+x.key, "has a control character")
		}
	}
	seen := map[string]bool{}
	for i, p := range g.Permissions {
		k := fmt.Sprintf("%s.permissions[%d]", key, i)
		switch {
		case !slices.Contains(GroupPermissions, p):
			bad(k, "must be one of %s, got %q", strings.Join(GroupPermissions, ", "), p)
		case seen[p]:
			bad(k, "repeats %q", p)
		}
		seen[p] = true
	}
}

// validateTools checks the tools.<name> entries.
func (c Config) validateTools(bad func(key, format string, args ...any)) {
	for _, name := range sortedKeys(c.Tools) {
		if strings.TrimSpace(name) == "" {
			bad("tools", "has an empty tool name")
			continue
		}
		for _, x := range [...]struct{ key, text string }{{"description", c.Tools[name].Description}, {"note", c.Tools[name].Note}} {
			switch {
			case x.text != "" && strings.TrimSpace(x.text) == "":
				bad("tools."+name+"."+x.key, "is blank: leave it out, or say something to the model")
			case len(x.text) > MaxToolText:
				bad("tools."+name+"."+x.key, "is %d bytes; at most %d", len(x.text), MaxToolText)
			}
		}
		if os := c.Tools[name].OneShot; os != nil && strings.TrimSpace(os.Advice) == "" {
			bad("tools."+name+".one_shot.advice", "is empty: tell the model what to do instead of calling the tool again")
		}
		checkPolicy(bad, "tools."+name+".policy", c.Tools[name].Policy)
		if a := c.Tools[name].Approval; a != nil && (a.Timeout < 0 || time.Duration(a.Timeout) > 7*24*time.Hour) {
			bad("tools."+name+".approval.timeout", "must be between 0 (the default, 1h) and 168h, got %s", time.Duration(a.Timeout))
		}
	}
}

func checkConverter(bad func(key, format string, args ...any), key string, s ConverterSpec) {
	if s.Kind != "cel" && (s.Keep != "" || len(s.Set) > 0) {
		bad(key, "keep and set are a cel converter's: set kind: cel, or leave them out")
	}
	switch s.Kind {
	case "cel":
		if len(s.Keys) > 0 {
			bad(key+".keys", "must be empty for kind cel: keep says which keys pass")
		}
		for k := range s.Set {
			checkKey(bad, key+".set."+k, k)
		}
		if _, err := celexpr.NewConverter("", s.Keep, s.Set, nil); err != nil {
			bad(key, "%v", err)
		}
	case "pass-through", "none":
		if len(s.Keys) > 0 {
			bad(key+".keys", "must be empty for kind %s", s.Kind)
		}
	case "allow-keys", "deny-keys":
		for i, k := range s.Keys {
			checkKey(bad, fmt.Sprintf("%s.keys[%d]", key, i), k)
		}
	default:
		bad(key+".kind", "must be one of %s; got %q", strings.Join(converterKinds, ", "), s.Kind)
	}
}

func checkKey(bad func(key, format string, args ...any), key, k string) {
	switch {
	case k == "":
		bad(key, "is empty")
	case !utf8.ValidString(k):
		bad(key, "is not valid UTF-8")
	case strings.HasPrefix(k, "toolmesh."):
		bad(key, "%q uses the reserved prefix \"toolmesh.\"", k)
	}
}

// Converter returns the converter spec for a group: its own, else the default.
func (c Config) Converter(role string) ConverterSpec {
	if g, ok := c.Groups[role]; ok && g.Context != nil {
		return *g.Context
	}
	return c.Context.Default
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
