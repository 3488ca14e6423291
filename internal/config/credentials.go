package config

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// TokenExchange makes a group act for the caller: the orchestrator exchanges the bearer
// token the caller presented for one scoped to the group (OAuth 2.0 Token Exchange,
// RFC 8693) at an authorization server, authenticating with its own client credentials,
// and sends the token it gets to that group alone.
type TokenExchange struct {
	// TokenEndpoint is the authorization server's token endpoint: https, or http on a
	// loopback host.
	TokenEndpoint string `yaml:"token_endpoint"`
	// ClientID and the secret in ClientSecretFile (read again when it changes) are the
	// orchestrator's client credentials, sent as ClientAuth says: client_secret_basic
	// (the default) or client_secret_post.
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	ClientAuth       string `yaml:"client_auth"`
	// Audience and Resource (RFC 8707) name the service the token is for (at least
	// one); Scope narrows it.
	Audience string `yaml:"audience"`
	Resource string `yaml:"resource"`
	Scope    string `yaml:"scope"`
	// RequestedTokenType and SubjectTokenType are token type URIs; default
	// urn:ietf:params:oauth:token-type:access_token both.
	RequestedTokenType string `yaml:"requested_token_type"`
	SubjectTokenType   string `yaml:"subject_token_type"`
	// ContextKey is the ToolCallContext key the token travels under (the group's
	// converter must be allow-keys listing it); Header the HTTP header of an MCP
	// group's session it travels in, as "Bearer <token>". At least one.
	ContextKey string `yaml:"context_key"`
	Header     string `yaml:"header"`
	// Timeout bounds one exchange (default 10s); RefreshBefore is how long before the
	// token expires a new one is asked for (default 30s); MaxCached bounds the tokens
	// kept, one per caller's token (default 4096).
	Timeout       Duration `yaml:"timeout"`
	RefreshBefore Duration `yaml:"refresh_before"`
	MaxCached     int      `yaml:"max_cached"`
	// CAFile is the CA bundle an https endpoint's certificate must chain to; default the
	// system's roots.
	CAFile string `yaml:"ca_file"`
}

// GroupSecrets gives a group credentials per tenant from files: Dir/<tenant>/<file>,
// which is also how Kubernetes Secrets mounted per tenant appear. Files are read again
// when they change.
type GroupSecrets struct {
	Dir string `yaml:"dir"`
	// ContextKeys map a file name to the ToolCallContext key its content travels under
	// (the group's converter must be allow-keys listing it); Headers a file name to the
	// HTTP header of an MCP group's session it travels in.
	ContextKeys map[string]string `yaml:"context_keys"`
	Headers     map[string]string `yaml:"headers"`
	// ReloadInterval is how often a tenant's files are checked for a change (default 1s).
	ReloadInterval Duration `yaml:"reload_interval"`
}

// Defaults of the credentials of a group.
const (
	DefaultTokenType          = "urn:ietf:params:oauth:token-type:access_token"
	DefaultExchangeTimeout    = 10 * time.Second
	DefaultRefreshBefore      = 30 * time.Second
	DefaultMaxCachedTokens    = 4096
	DefaultSecretsReload      = time.Second
	ClientSecretBasic         = "client_secret_basic"
	ClientSecretPost          = "client_secret_post"
	maxCredentialConfigString = 1024
)

var (
	// secretFileRE is a file name of a tenant's secret directory: what a Kubernetes
	// Secret's keys may be, without a leading dot (..data and its kin are Kubernetes').
	secretFileRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,252}$`)
	// headerNameRE is an HTTP header name (RFC 9110 token).
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
	// scopeRE is a space-separated list of scope tokens (RFC 6749 section 3.3).
	scopeRE = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+( [\x21\x23-\x5B\x5D-\x7E]+)*$`)
)

// validateCredentials checks groups.<role>.token_exchange and groups.<role>.secrets.
func (c Config) validateCredentials(bad func(key, format string, args ...any)) {
	for _, role := range sortedKeys(c.Groups) {
		g, key := c.Groups[role], "groups."+role
		if g.TokenExchange != nil && g.Secrets != nil {
			bad(key, "token_exchange and secrets are exclusive: a group's credentials come from one")
		}
		if (g.TokenExchange != nil || g.Secrets != nil) && len(g.Include) > 0 {
			// Its tools are other groups' and are called as theirs.
			bad(key, "a group of the config's own (include) sends no call itself: give the credentials to the groups its tools come from")
		}
		if g.TokenExchange != nil {
			c.checkExchange(bad, role, key+".token_exchange", *g.TokenExchange)
		}
		if g.Secrets != nil {
			c.checkSecrets(bad, role, key+".secrets", *g.Secrets)
		}
	}
}

func (c Config) checkExchange(bad func(key, format string, args ...any), role, key string, x TokenExchange) {
	u, err := url.Parse(x.TokenEndpoint)
	switch {
	case x.TokenEndpoint == "":
		bad(key+".token_endpoint", "is required")
	case err != nil || u.Host == "" || u.Fragment != "" || u.User != nil || (u.Scheme != "https" && (u.Scheme != "http" || !LoopbackHost(u.Hostname()))):
		bad(key+".token_endpoint", "must be an https URL (http on a loopback host) without user info or fragment, got %q", x.TokenEndpoint)
	case x.CAFile != "" && u.Scheme != "https":
		bad(key+".ca_file", "needs an https token_endpoint")
	}
	if x.ClientID == "" || len(x.ClientID) > 256 || strings.ContainsFunc(x.ClientID, isControl) {
		bad(key+".client_id", "is required: at most 256 bytes without control characters")
	}
	if x.ClientSecretFile == "" {
		bad(key+".client_secret_file", "is required: the file holding the orchestrator's client secret")
	}
	if x.ClientAuth != "" && x.ClientAuth != ClientSecretBasic && x.ClientAuth != ClientSecretPost {
		bad(key+".client_auth", "must be %s or %s, got %q", ClientSecretBasic, ClientSecretPost, x.ClientAuth)
	}
	if x.Audience == "" && x.Resource == "" {
		bad(key, "needs audience or resource: the service the exchanged token is for")
	}
	if len(x.Audience) > maxCredentialConfigString || strings.ContainsFunc(x.Audience, isControl) {
		bad(key+".audience", "must be at most %d bytes without control characters", maxCredentialConfigString)
	}
	if r := x.Resource; r != "" {
		if ru, err := url.Parse(r); err != nil || !ru.IsAbs() || ru.Fragment != "" || len(r) > maxCredentialConfigString {
			bad(key+".resource", "must be an absolute URI without fragment (RFC 8707), at most %d bytes, got %q", maxCredentialConfigString, r)
		}
	}
	if x.Scope != "" && (!scopeRE.MatchString(x.Scope) || len(x.Scope) > maxCredentialConfigString) {
		bad(key+".scope", "must be scope tokens separated by single spaces (RFC 6749), at most %d bytes, got %q", maxCredentialConfigString, x.Scope)
	}
	for field, v := range map[string]string{"requested_token_type": x.RequestedTokenType, "subject_token_type": x.SubjectTokenType} {
		if v != "" && (!strings.Contains(v, ":") || len(v) > 256 || strings.ContainsAny(v, " \t\r\n")) {
			bad(key+"."+field, "must be a token type URI such as %s, got %q", DefaultTokenType, v)
		}
	}
	if x.ContextKey == "" && x.Header == "" {
		bad(key, "needs context_key or header: where the exchanged token travels")
	}
	if x.ContextKey != "" {
		c.checkCredentialKey(bad, role, key+".context_key", x.ContextKey)
	}
	if x.Header != "" {
		c.checkCredentialHeader(bad, role, key+".header", x.Header)
	}
	switch {
	case x.Timeout < 0 || x.Timeout.D() > 2*time.Minute:
		bad(key+".timeout", "must be between 0s (the default, 10s) and 2m, got %s", x.Timeout.D())
	case x.RefreshBefore < 0 || x.RefreshBefore.D() > time.Hour:
		bad(key+".refresh_before", "must be between 0s (the default, 30s) and 1h, got %s", x.RefreshBefore.D())
	case x.MaxCached < 0 || x.MaxCached > 1<<20:
		bad(key+".max_cached", "must be between 0 (the default, 4096) and 1048576, got %d", x.MaxCached)
	}
}

func (c Config) checkSecrets(bad func(key, format string, args ...any), role, key string, s GroupSecrets) {
	if strings.TrimSpace(s.Dir) == "" {
		bad(key+".dir", "is required: the directory holding a directory of files per tenant")
	}
	if len(s.ContextKeys)+len(s.Headers) == 0 {
		bad(key, "needs context_keys or headers: which files travel, and where")
	}
	for _, file := range sortedKeys(s.ContextKeys) {
		if !secretFileRE.MatchString(file) {
			bad(key+".context_keys."+file, "is not a file name of a tenant's directory ([A-Za-z0-9._-], not starting with a dot)")
		}
		c.checkCredentialKey(bad, role, key+".context_keys."+file, s.ContextKeys[file])
	}
	for _, file := range sortedKeys(s.Headers) {
		if !secretFileRE.MatchString(file) {
			bad(key+".headers."+file, "is not a file name of a tenant's directory ([A-Za-z0-9._-], not starting with a dot)")
		}
		c.checkCredentialHeader(bad, role, key+".headers."+file, s.Headers[file])
	}
	if s.ReloadInterval < 0 || s.ReloadInterval.D() > time.Hour {
		bad(key+".reload_interval", "must be between 0s (the default, 1s) and 1h, got %s", s.ReloadInterval.D())
	}
	if len(c.Tenants) == 0 {
		bad(key, "needs tenants: secrets are read per verified tenant")
	}
}

// checkCredentialKey checks a context key a credential travels under: the group's
// converter must be allow-keys and list it, byte for byte, as for any secret.
func (c Config) checkCredentialKey(bad func(key, format string, args ...any), role, key, ctxKey string) {
	if ctxKey == "" || strings.HasPrefix(ctxKey, "toolmesh.") || len(ctxKey) > 256 {
		bad(key, "must be a context key of at most 256 bytes, not starting with \"toolmesh.\", got %q", ctxKey)
		return
	}
	spec := c.Converter(role)
	if spec.Kind != "allow-keys" || !slices.Contains(spec.Keys, ctxKey) {
		bad(key, "%q is a credential: groups.%s.context must be an allow-keys converter that lists it", ctxKey, role)
	}
}

// checkCredentialHeader checks a header a credential travels in: an MCP group's, over
// streamable HTTP.
func (c Config) checkCredentialHeader(bad func(key, format string, args ...any), role, key, header string) {
	if !headerNameRE.MatchString(header) {
		bad(key, "must be an HTTP header name, got %q", header)
		return
	}
	g := c.Groups[role]
	if g.MCP == nil || c.MCPServers[g.MCP.Server].URL == "" {
		bad(key, "headers are for MCP groups over streamable HTTP (groups.%s.mcp naming a server with a url); a worker group takes a context_key", role)
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// ExchangeFor is the token exchange of a group with its defaults filled in, or nil.
func (c Config) ExchangeFor(role string) *TokenExchange {
	g, ok := c.Groups[role]
	if !ok || g.TokenExchange == nil {
		return nil
	}
	x := *g.TokenExchange
	if x.ClientAuth == "" {
		x.ClientAuth = ClientSecretBasic
	}
	if x.RequestedTokenType == "" {
		x.RequestedTokenType = DefaultTokenType
	}
	if x.SubjectTokenType == "" {
		x.SubjectTokenType = DefaultTokenType
	}
	if x.Timeout == 0 {
		x.Timeout = Duration(DefaultExchangeTimeout)
	}
	if x.RefreshBefore == 0 {
		x.RefreshBefore = Duration(DefaultRefreshBefore)
	}
	if x.MaxCached == 0 {
		x.MaxCached = DefaultMaxCachedTokens
	}
	return &x
}

// SecretsFor is the secret store of a group with its defaults filled in, or nil.
func (c Config) SecretsFor(role string) *GroupSecrets {
	g, ok := c.Groups[role]
	if !ok || g.Secrets == nil {
		return nil
	}
	s := *g.Secrets
	if s.ReloadInterval == 0 {
		s.ReloadInterval = Duration(DefaultSecretsReload)
	}
	return &s
}
