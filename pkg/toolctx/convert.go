package toolctx

import (
	"fmt"
	"slices"
	"strings"
)

// Converter decides which entries of a context leave the orchestrator for a tool
// group: to a worker as gRPC metadata, to an MCP server as _meta. toolmesh applies the
// group's converter before every call that leaves the process.
//
// Converters never see or emit keys under ReservedPrefix: the loop id travels in its
// own request field. The converters of this package strip such keys from their input
// and their output; an implementation of your own should be wrapped in Secured (or
// ConverterFunc) to get the same guarantee.
type Converter interface {
	Convert(Context) Context
}

// ConverterFunc is a custom converter: it may drop, rename or compute entries, or
// return Empty. It receives the whole context except reserved keys, and reserved keys
// it returns are dropped.
type ConverterFunc func(Context) Context

// Convert calls f on c without reserved keys and drops reserved keys from the result.
func (f ConverterFunc) Convert(c Context) Context {
	return f(c.WithoutReserved()).WithoutReserved()
}

func (f ConverterFunc) String() string { return "custom" }

var (
	_ Converter = ConverterFunc(nil)
	_ Converter = passThrough{}
	_ Converter = none{}
	_ Converter = (*allowKeys)(nil)
	_ Converter = (*denyKeys)(nil)
	_ Converter = (*secured)(nil)
)

// PassThrough forwards every entry. It is the default converter.
func PassThrough() Converter { return passThrough{} }

type passThrough struct{}

func (passThrough) Convert(c Context) Context { return c.WithoutReserved() }
func (passThrough) String() string            { return kindPassThrough }

// None forwards nothing.
func None() Converter { return none{} }

type none struct{}

func (none) Convert(Context) Context { return Empty }
func (none) String() string          { return kindNone }

// AllowKeys forwards only the listed keys. It is the only converter that can forward a
// key of Secured's secret list: by listing it.
func AllowKeys(keys ...string) Converter { return &allowKeys{keys: slices.Clone(keys)} }

type allowKeys struct{ keys []string }

func (a *allowKeys) Convert(c Context) Context {
	return c.filter(func(k string) bool { return !IsReserved(k) && slices.Contains(a.keys, k) })
}

func (a *allowKeys) String() string { return describe(kindAllowKeys, a.keys) }

func (a *allowKeys) allows(key string) bool { return slices.Contains(a.keys, key) }

// DenyKeys forwards every entry except the listed keys.
func DenyKeys(keys ...string) Converter { return &denyKeys{keys: slices.Clone(keys)} }

type denyKeys struct{ keys []string }

func (d *denyKeys) Convert(c Context) Context {
	return c.filter(func(k string) bool { return !IsReserved(k) && !slices.Contains(d.keys, k) })
}

func (d *denyKeys) String() string { return describe(kindDenyKeys, d.keys) }

// explicitAllower is a converter that lists the keys it forwards.
type explicitAllower interface {
	allows(key string) bool
}

// Secured returns conv with a secret list: a secret key never leaves, unless conv is an
// AllowKeys converter (possibly under other Secured layers) that lists that exact key.
// Pass-through, deny-keys and custom functions never forward a secret, even one a custom
// function adds itself. A nil conv means PassThrough.
//
// The secret keys are those of the list, matched case-insensitively (so that
// "Authorization" also covers "authorization"), and every well-known credential key
// (see IsCredentialKey), whatever the list says.
func Secured(conv Converter, secrets ...string) Converter {
	if conv == nil {
		conv = PassThrough()
	}
	return &secured{conv: conv, secrets: slices.Clone(secrets)}
}

type secured struct {
	conv    Converter
	secrets []string
}

func (s *secured) Convert(c Context) Context {
	out := s.conv.Convert(c.WithoutReserved())
	allow, _ := s.conv.(explicitAllower)
	return out.filter(func(k string) bool {
		if IsReserved(k) {
			return false
		}
		if !s.isSecret(k) {
			return true
		}
		return allow != nil && allow.allows(k)
	})
}

func (s *secured) isSecret(key string) bool {
	return IsCredentialKey(key) || slices.ContainsFunc(s.secrets, func(secret string) bool { return strings.EqualFold(secret, key) })
}

// credentialWords end the names of well-known credential keys, once the name is lower
// case and its separators are gone: "Authorization", "Proxy-Authorization", "X-Auth",
// "Cookie", "X-Api-Key", "api_keys", "openaiApiKey", "access_token", "refresh_tokens",
// "authToken", "password", "client_secret", "AWS_SECRET_ACCESS_KEY", "ssh_key",
// "privateKey", "session_key", "sessionId", "AWS_CREDENTIALS", "id_jwt", "DATABASE_DSN".
// Plain "tokens" and "auth" are not among them: "maxTokens" names a number,
// "requireAuth" a setting.
var credentialWords = []string{
	"authorization", "xauth", "basicauth", "proxyauth", "bearerauth", "cookie", "cookies",
	"apikey", "apikeys", "token", "accesstokens", "refreshtokens", "idtokens", "authtokens",
	"apitokens", "sessiontokens", "bearertokens", "password", "passwords", "passwd",
	"passphrase", "passcode", "secret", "secrets", "secretkey", "accesskey", "privatekey",
	"privatekeys", "privatekeypem", "signingkey", "encryptionkey", "sshkey", "sessionkey",
	"credential", "credentials", "sessionid", "bearer", "jwt", "connectionstring", "dsn",
}

// credentialNames are credential keys too short to be recognized by their ending.
var credentialNames = []string{"auth", "pass", "pin", "otp", "sid"}

// IsCredentialKey reports whether key names a well-known kind of credential: after
// lower-casing and dropping '-', '_', '.' and spaces, it ends with one of
// "authorization", "xauth", "basicauth", "proxyauth", "bearerauth", "cookie(s)",
// "apikey(s)", "token", "accesstokens", "refreshtokens", "idtokens", "authtokens",
// "apitokens", "sessiontokens", "bearertokens", "password(s)", "passwd", "passphrase",
// "passcode", "secret(s)", "secretkey", "accesskey", "privatekey(s)", "privatekeypem",
// "signingkey", "encryptionkey", "sshkey", "sessionkey", "credential(s)", "sessionid",
// "bearer", "jwt", "connectionstring" or "dsn", or it is "auth", "pass", "pin", "otp"
// or "sid". Such keys are secrets of every Secured converter, so that a pass-through
// converter never forwards one by accident; an allow-keys converter that lists one
// forwards it.
func IsCredentialKey(key string) bool {
	var b strings.Builder
	for _, r := range strings.ToLower(key) {
		switch r {
		case '-', '_', '.', ' ':
		default:
			b.WriteRune(r)
		}
	}
	norm := b.String()
	return slices.Contains(credentialNames, norm) ||
		slices.ContainsFunc(credentialWords, func(w string) bool { return strings.HasSuffix(norm, w) })
}

func (s *secured) allows(key string) bool {
	a, ok := s.conv.(explicitAllower)
	return ok && a.allows(key)
}

func (s *secured) String() string {
	return fmt.Sprintf("secured(%v, secrets: %s)", s.conv, strings.Join(s.secrets, ", "))
}

func describe(kind string, keys []string) string {
	return kind + "(" + strings.Join(keys, ", ") + ")"
}

// The names converters are written with, in configuration and in their String.
const (
	kindPassThrough = "pass-through"
	kindNone        = "none"
	kindAllowKeys   = "allow-keys"
	kindDenyKeys    = "deny-keys"
)
