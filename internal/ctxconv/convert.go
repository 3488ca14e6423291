package ctxconv

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Converter decides which entries of a context leave the orchestrator for a tool
// group: to a worker as gRPC metadata, to an MCP server as _meta. toolmesh applies the
// group's converter before every call that leaves the process.
//
// Converters never see or emit keys under toolctx.ReservedPrefix: the loop id and the verified
// tenant travel in request fields of their own. The converters of this package strip such keys from their input
// and their output; an implementation of your own should be wrapped in Secured (or
// ConverterFunc) to get the same guarantee.
type Converter interface {
	Convert(toolctx.Context) toolctx.Context
}

// ConverterFunc is a custom converter: it may drop, rename or compute entries, or
// return toolctx.Empty. It receives the whole context except reserved keys, and reserved keys
// it returns are dropped.
type ConverterFunc func(toolctx.Context) toolctx.Context

// Convert calls f on c without reserved keys and drops reserved keys from the result.
func (f ConverterFunc) Convert(c toolctx.Context) toolctx.Context {
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

func (passThrough) Convert(c toolctx.Context) toolctx.Context { return c.WithoutReserved() }
func (passThrough) String() string                            { return kindPassThrough }

// None forwards nothing.
func None() Converter { return none{} }

type none struct{}

func (none) Convert(toolctx.Context) toolctx.Context { return toolctx.Empty }
func (none) String() string                          { return kindNone }

// AllowKeys forwards only the listed keys, matched byte for byte. It is the only
// converter that can forward a key of Secured's secret list: by listing it exactly. A
// variant of a listed key ("authorization", or "Authorization" with a zero-width space,
// for a listed "Authorization") is another key, not listed.
func AllowKeys(keys ...string) Converter { return &allowKeys{keys: slices.Clone(keys)} }

type allowKeys struct{ keys []string }

func (a *allowKeys) Convert(c toolctx.Context) toolctx.Context {
	return c.Keep(func(k string) bool { return !toolctx.IsReserved(k) && slices.Contains(a.keys, k) })
}

func (a *allowKeys) String() string { return describe(kindAllowKeys, a.keys) }

func (a *allowKeys) allows(key string) bool { return slices.Contains(a.keys, key) }

// DenyKeys forwards every entry except the listed keys.
func DenyKeys(keys ...string) Converter { return &denyKeys{keys: slices.Clone(keys)} }

type denyKeys struct{ keys []string }

func (d *denyKeys) Convert(c toolctx.Context) toolctx.Context {
	return c.Keep(func(k string) bool { return !toolctx.IsReserved(k) && !slices.Contains(d.keys, k) })
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
// The secret keys are those of the list, matched in their normal form (so that
// "Authorization" also covers "authorization", "AUTHORIZATION" and "Authorization" with
// a zero-width space; see IsSecretKey), and every well-known credential key (see
// IsCredentialKey), whatever the list says. An allow-keys converter forwards a secret
// only under the exact spelling it lists: listing "Authorization" does not forward
// "authorization".
func Secured(conv Converter, secrets ...string) Converter {
	if conv == nil {
		conv = PassThrough()
	}
	return &secured{conv: conv, secrets: slices.Clone(secrets), normSecrets: normalizeKeys(secrets)}
}

type secured struct {
	conv        Converter
	secrets     []string
	normSecrets []string // the normal forms of secrets (normalizeKey)
}

func (s *secured) Convert(c toolctx.Context) toolctx.Context {
	out := s.conv.Convert(c.WithoutReserved())
	allow, _ := s.conv.(explicitAllower)
	return out.Keep(func(k string) bool {
		if toolctx.IsReserved(k) {
			return false
		}
		if !s.isSecret(k) {
			return true
		}
		return allow != nil && allow.allows(k)
	})
}

func (s *secured) isSecret(key string) bool { return isSecret(key, s.secrets, s.normSecrets) }

// IsSecretKey reports whether a Secured converter with this secret list holds key back
// from every converter but an allow-keys one that lists key exactly: key names a
// credential (IsCredentialKey), or it is a listed secret, however spelled. A listed
// secret covers the keys whose normal form (see IsCredentialKey) is the secret's,
// optionally followed by harmless suffixes: with "ssn" listed, "SSN", "s-s-n",
// "ssn_b64" and "ssn2" are secrets, "ssn_count" is not. A secret with neither a letter
// nor a digit has no normal form: it covers its own spelling, in any case.
func IsSecretKey(key string, secrets ...string) bool {
	return isSecret(key, secrets, normalizeKeys(secrets))
}

// isSecret is IsSecretKey with the normal forms of secrets at hand.
func isSecret(key string, secrets, normSecrets []string) bool {
	if slices.ContainsFunc(secrets, func(secret string) bool { return strings.EqualFold(secret, key) }) {
		return true
	}
	n := normalizeKey(key)
	credential := !slices.Contains(plainNames, n)
	for stem := range stems(n) {
		if credential && isCredentialStem(stem) || slices.Contains(normSecrets, stem) {
			return true
		}
	}
	return false
}

// IsCredentialKey reports whether key names a well-known kind of credential. Such keys
// are secrets of every Secured converter, so that a pass-through converter never forwards
// one by accident; an allow-keys converter that lists one exactly forwards it.
//
// This is a safety net, not a boundary. It reads names, not values: a credential under
// a name it does not know ("ssn", "x-internal", "db_pass") passes, and so does one
// spelled with look-alike letters of another script. A group that should see less gets
// an allow-keys converter.
//
// A key is read in its normal form: case-folded, full-width ASCII as ASCII, decimal
// digits of any script as ASCII digits, and without anything that is neither a letter
// nor a digit: separators of every kind, zero-width and other format characters
// (U+200B, U+200C, U+200D, U+2060, U+FEFF, the soft hyphen), marks and controls. So
// "X-Api-Key", "x_api_key", "XAPIKEY", "x-api\u200b-key" and "Ｘ－Ａｐｉ－Ｋｅｙ" are one
// key, "xapikey". Its stems are that form and that form less any chain of harmless
// suffixes: encodings and wrappings ("b64", "b64url", "base64", "base64url", "b32",
// "base32", "hex", "enc", "encoded", "encrypted", "raw", "value", "val", "header",
// "hdr", "str", "string", "json", "plain", "plaintext", "pem"), what is made of a
// credential ("key", "keys", "tokens", "code", "seed"), hashes ("hash", "hashed",
// "sha1", "sha256", "sha384", "sha512", "md5"), versions ("old", "new", "prev",
// "previous", "current", "confirm", "confirmation"), digits, and "v" followed by
// digits. The key is a credential when one of its stems
//   - ends with "authorization", "authorisation", "xauth", "basicauth", "proxyauth",
//     "bearerauth", "cookie(s)", "apikey(s)", "token", "accesstokens", "idtokens",
//     "apitokens", "password(s)", "passwd", "pwd", "passphrase", "passcode",
//     "secret(s)", "secretkeybase", "accesskey", "privatekey(s)", "privkey",
//     "signingkey", "encryptionkey", "sshkey", "masterkey", "accountkey",
//     "subscriptionkey", "credential(s)", "cred(s)", "session", "sessionid", "sessid",
//     "connectsid", "bearer", "jwt", "oauth", "saml", "samlresponse", "samlassertion",
//     "clientassertion", "xsrf", "csrf", "mfa", "2fa", "otp", "totp", "hmac",
//     "signature", "connectionstring" or "dsn" (but not with "chatsession", a
//     conversation, nor "possession", "obsession" or "sacred");
//   - or is "auth", "pass", "pin", "sid", "pw", "sig", "pat", "sso", "sess", "sessions"
//     or "refresh", words that end too many other words and settings ("requireAuth",
//     "bypass", "spin", "path", "lasso", "assess", "max_sessions", "autoRefresh") to be
//     looked for at the end of a name,
//
// and the key is not "PWD" or "OLDPWD", the shell's working directories, which a child
// process's environment keeps. So "Authorization\u200b", "authorisation",
// "api_key_b64", "apiKeyBase64", "bearer_token_value", "token1", "session",
// "user_session", "PHPSESSID", "hmac_sha256" and "pin_code" are credentials;
// "maxTokens", "tokens", "tokenCount", "requireAuth", "author", "authorName", "keyId",
// "secret_name", "token_url", "chat_session" and "max_sessions" are not.
func IsCredentialKey(key string) bool { return isSecret(key, nil, nil) }

// isCredentialStem reports whether a stem of a key names a credential.
func isCredentialStem(stem string) bool {
	if len(stem) <= maxNameLen && slices.Contains(credentialNames, stem) {
		return true
	}
	for _, w := range wordsEnding[stem[len(stem)-1]] {
		if strings.HasSuffix(stem, w) &&
			!slices.ContainsFunc(notCredentials[w], func(e string) bool { return strings.HasSuffix(stem, e) }) {
			return true
		}
	}
	return false
}

// credentialWords name a credential wherever they end a stem. Plural "tokens" is not
// among them: "maxTokens" names a number.
var credentialWords = []string{
	"authorization", "authorisation", "xauth", "basicauth", "proxyauth", "bearerauth",
	"cookie", "cookies", "apikey", "apikeys", "token", "accesstokens", "idtokens",
	"apitokens", "password", "passwords", "passwd", "pwd", "passphrase", "passcode",
	"secret", "secrets", "secretkeybase", "accesskey", "privatekey", "privatekeys",
	"privkey", "signingkey", "encryptionkey", "sshkey", "masterkey", "accountkey",
	"subscriptionkey", "credential", "credentials", "cred", "creds", "session", "sessionid",
	"sessid", "connectsid", "bearer", "jwt", "oauth", "saml", "samlresponse",
	"samlassertion", "clientassertion", "xsrf", "csrf", "mfa", "2fa", "otp", "totp",
	"hmac", "signature", "connectionstring", "dsn",
}

// credentialNames name a credential only as a whole stem.
var credentialNames = []string{
	"auth", "pass", "pin", "sid", "pw", "sig", "pat", "sso", "sess", "sessions", "refresh",
}

// notCredentials are, for a credential word, the stem endings that contain it without
// naming a credential.
var notCredentials = map[string][]string{
	"session": {"chatsession", "possession", "obsession"},
	"cred":    {"sacred"},
}

// plainNames are normal forms of whole keys that are no credential.
var plainNames = []string{"pwd", "oldpwd"}

// harmlessSuffixes may follow a credential word, or a listed secret, without making the
// key name something else. Digits, and "v" followed by digits, are harmless too.
var harmlessSuffixes = []string{
	"b64", "b64url", "base64", "base64url", "b32", "base32", "hex", "enc", "encoded",
	"encrypted", "raw", "value", "val", "header", "hdr", "str", "string", "json", "plain",
	"plaintext", "pem", "key", "keys", "tokens", "code", "seed", "hash", "hashed", "sha1",
	"sha256", "sha384", "sha512", "md5", "old", "new", "prev", "previous", "current",
	"confirm", "confirmation",
}

var (
	// maxNameLen is the length of the longest credential name.
	maxNameLen = len(slices.MaxFunc(credentialNames, func(a, b string) int { return cmp.Compare(len(a), len(b)) }))
	// wordsEnding are the credential words by their last byte, harmlessStarting the
	// harmless suffixes by their first: a key is classified without trying every word
	// at every position.
	wordsEnding      = byByte(credentialWords, func(w string) byte { return w[len(w)-1] })
	harmlessStarting = byByte(harmlessSuffixes, func(h string) byte { return h[0] })
)

// byByte groups words by the byte key picks in each.
func byByte(words []string, key func(string) byte) *[256][]string {
	var by [256][]string
	for _, w := range words {
		by[key(w)] = append(by[key(w)], w)
	}
	return &by
}

// stems yields the non-empty stems of n, a normal form: n, then n less each chain of
// harmless suffixes that ends it, longest first. For "apikeyb64" they are "apikeyb64",
// "apikeyb" (less the digits "64") and "apikey" (less "b64").
func stems(n string) iter.Seq[string] {
	return func(yield func(string) bool) {
		// chain[p] reports whether n[p:] is a chain of harmless suffixes.
		var buf [64]bool
		chain := buf[:0]
		if len(n) >= len(buf) {
			chain = make([]bool, 0, len(n)+1)
		}
		chain = chain[:len(n)+1]
		chain[len(n)] = true
		for p := len(n) - 1; p >= 0; p-- {
			switch {
			case isASCIIDigit(n[p]):
				chain[p] = chain[p+1]
			case n[p] == 'v' && p+1 < len(n) && isASCIIDigit(n[p+1]):
				chain[p] = chain[p+1]
			}
			for _, h := range harmlessStarting[n[p]] {
				if chain[p] {
					break
				}
				chain[p] = strings.HasPrefix(n[p:], h) && chain[p+len(h)]
			}
		}
		for p := len(n); p > 0; p-- {
			if chain[p] && !yield(n[:p]) {
				return
			}
		}
	}
}

func isASCIIDigit(c byte) bool { return '0' <= c && c <= '9' }

// normalizeKeys returns the distinct non-empty normal forms of keys.
func normalizeKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if n := normalizeKey(k); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// normalizeKey returns the normal form of key (see IsCredentialKey): what a reader sees
// in it, not how it is written. Letters are case-folded (so "K", "k" and the Kelvin sign
// are one letter, and so are the Turkish dotless "ı" and "i"); full-width ASCII is ASCII;
// decimal digits of any script are ASCII digits; everything that is neither a letter nor
// a digit is dropped. Look-alike letters of other scripts (a Cyrillic "а") are not
// mapped.
func normalizeKey(key string) string {
	normal := true
	for i := 0; i < len(key) && normal; i++ {
		c := key[i]
		normal = 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
	}
	if normal {
		return key
	}
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		if key[i] >= utf8.RuneSelf {
			return normalizeUnicode(key, &b)
		}
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		}
	}
	return b.String()
}

// normalizeUnicode is normalizeKey for a key with non-ASCII runes.
func normalizeUnicode(key string, b *strings.Builder) string {
	b.Reset()
	for _, r := range key {
		if 0xFF01 <= r && r <= 0xFF5E { // full-width ASCII
			r -= 0xFEE0
		}
		r = foldRune(r)
		switch {
		case '0' <= r && r <= '9':
			b.WriteByte(byte(r))
		case unicode.IsDigit(r):
			b.WriteByte('0' + byte(digitValue(r)))
		case unicode.IsLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// foldRune maps every rune of a case-folding orbit ("K", "k" and the Kelvin sign; "S",
// "s" and the long "ſ") to one of them: the lower case of the least. The dotless "ı",
// an orbit of its own, folds to "i" like its upper case "I".
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		return unicode.ToLower(r)
	}
	if r == 'ı' {
		return 'i'
	}
	least := r
	for f, n := unicode.SimpleFold(r), 0; f != r && n < 8; f, n = unicode.SimpleFold(f), n+1 {
		least = min(least, f)
	}
	return unicode.ToLower(least)
}

// digitValue is the value of r, a decimal digit. Unicode encodes the decimal digits of
// every script in runs of ten, 0 to 9, so the value is r's distance from the start of
// its run of digits, modulo ten.
func digitValue(r rune) rune {
	start := r
	for unicode.IsDigit(start - 1) {
		start--
	}
	return (r - start) % 10
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
