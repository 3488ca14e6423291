package ctxconv_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

var full = toolctx.MustOf("tenantId", "acme", "correlationId", "c-1", "locale", "en", "authToken", "xyz")

func TestConverters(t *testing.T) {
	var seen toolctx.Context
	tests := []struct {
		name string
		conv ctxconv.Converter
		in   toolctx.Context
		want toolctx.Context
	}{
		{"pass-through forwards all", ctxconv.PassThrough(), full, full},
		{"pass-through of Empty is Empty", ctxconv.PassThrough(), toolctx.Empty, toolctx.Empty},
		{"none suppresses all", ctxconv.None(), full, toolctx.Empty},
		{"none of Empty is Empty", ctxconv.None(), toolctx.Empty, toolctx.Empty},
		{"allow-keys keeps only allowed", ctxconv.AllowKeys("tenantId", "locale", "absent"), full,
			toolctx.MustOf("tenantId", "acme", "locale", "en")},
		{"allow-keys single key", ctxconv.AllowKeys("tenantId"), full, toolctx.MustOf("tenantId", "acme")},
		{"allow-keys without a match is Empty", ctxconv.AllowKeys("absent"), full, toolctx.Empty},
		{"allow-keys of Empty is Empty", ctxconv.AllowKeys("tenantId"), toolctx.Empty, toolctx.Empty},
		{"allow-keys with no keys is none", ctxconv.AllowKeys(), full, toolctx.Empty},
		{"deny-keys removes denied", ctxconv.DenyKeys("authToken", "absent"), full,
			toolctx.MustOf("tenantId", "acme", "correlationId", "c-1", "locale", "en")},
		{"deny-keys without a match forwards all", ctxconv.DenyKeys("absent"), full, full},
		{"deny-keys of Empty is Empty", ctxconv.DenyKeys("authToken"), toolctx.Empty, toolctx.Empty},
		{"deny-keys denying every key is Empty", ctxconv.DenyKeys(full.Keys()...), full, toolctx.Empty},
		{"custom function transforms", ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			return toolctx.MustOf("tenant", strings.ToUpper(c.GetOr("tenantId", "")))
		}), full, toolctx.MustOf("tenant", "ACME")},
		{"custom function may return Empty", ctxconv.ConverterFunc(func(toolctx.Context) toolctx.Context {
			return toolctx.Empty
		}), full, toolctx.Empty},
		{"custom function receives the full context", ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			seen = c
			return c
		}), full, full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.conv.Convert(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%v.Convert(%v) (-want +got):\n%s", tt.conv, tt.in, diff)
			}
		})
	}
	if diff := cmp.Diff(full, seen); diff != "" {
		t.Errorf("custom function saw (-want +got):\n%s", diff)
	}
}

func TestConvertersDoNotChangeTheirInput(t *testing.T) {
	in := full.With(toolctx.LoopIDKey, "loop-1")
	before := in.Map()
	for _, conv := range []ctxconv.Converter{
		ctxconv.PassThrough(), ctxconv.None(), ctxconv.AllowKeys("tenantId"), ctxconv.DenyKeys("tenantId"),
		ctxconv.Secured(ctxconv.PassThrough(), "authToken"),
		ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context { return c.With("tenantId", "x") }),
	} {
		conv.Convert(in)
		if diff := cmp.Diff(before, in.Map()); diff != "" {
			t.Errorf("%v changed its input:\n%s", conv, diff)
		}
	}
}

func TestAllowEqualsDenyOfComplement(t *testing.T) {
	keys := full.Keys()
	for i := range 1 << len(keys) {
		var allowed, denied []string
		for j, k := range keys {
			if i&(1<<j) != 0 {
				allowed = append(allowed, k)
			} else {
				denied = append(denied, k)
			}
		}
		a := ctxconv.AllowKeys(allowed...).Convert(full)
		d := ctxconv.DenyKeys(denied...).Convert(full)
		if diff := cmp.Diff(a, d); diff != "" {
			t.Errorf("allow%v != deny%v (-allow +deny):\n%s", allowed, denied, diff)
		}
	}
}

func TestReservedKeysNeverCross(t *testing.T) {
	in := full.With(toolctx.LoopIDKey, "loop-1").With("toolmesh.other", "x")
	var seen toolctx.Context
	for _, conv := range []ctxconv.Converter{
		ctxconv.PassThrough(),
		ctxconv.AllowKeys(toolctx.LoopIDKey, "toolmesh.other", "tenantId"),
		ctxconv.DenyKeys("authToken"),
		ctxconv.Secured(ctxconv.AllowKeys(toolctx.LoopIDKey, "tenantId"), toolctx.LoopIDKey),
		ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			seen = c
			return c.With(toolctx.LoopIDKey, "forged").With("toolmesh.injected", "y")
		}),
		ctxconv.Secured(ownConverter{}),
	} {
		out := conv.Convert(in)
		for _, k := range out.Keys() {
			if toolctx.IsReserved(k) {
				t.Errorf("%v forwarded reserved key %q", conv, k)
			}
		}
		if out.IsEmpty() {
			t.Errorf("%v forwarded nothing", conv)
		}
	}
	if diff := cmp.Diff(full, seen); diff != "" {
		t.Errorf("a custom function saw reserved keys (-want +got):\n%s", diff)
	}
}

// ownConverter is a Converter that does not strip reserved keys itself.
type ownConverter struct{}

func (ownConverter) Convert(c toolctx.Context) toolctx.Context {
	return c.With(toolctx.LoopIDKey, "forged")
}

func TestSecured(t *testing.T) {
	const secret = "authToken"
	tests := []struct {
		name string
		conv ctxconv.Converter
		want toolctx.Context
	}{
		{"pass-through drops the secret", ctxconv.Secured(ctxconv.PassThrough(), secret),
			full.Without(secret)},
		{"nil means pass-through", ctxconv.Secured(nil, secret), full.Without(secret)},
		{"deny-keys drops the secret", ctxconv.Secured(ctxconv.DenyKeys("locale"), secret),
			full.Without(secret, "locale")},
		{"allow-keys without the secret drops it", ctxconv.Secured(ctxconv.AllowKeys("tenantId"), secret),
			toolctx.MustOf("tenantId", "acme")},
		{"allow-keys listing the secret forwards it", ctxconv.Secured(ctxconv.AllowKeys("tenantId", secret), secret),
			toolctx.MustOf("tenantId", "acme", secret, "xyz")},
		{"nested Secured keeps an explicit allow", ctxconv.Secured(ctxconv.Secured(ctxconv.AllowKeys(secret), secret), secret, "locale"),
			toolctx.MustOf(secret, "xyz")},
		{"a custom function cannot add the secret back", ctxconv.Secured(ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			return c.With(secret, "re-added").With("AUTHTOKEN", "case-folded")
		}), secret), full.Without(secret)},
		{"secrets match case-insensitively", ctxconv.Secured(ctxconv.PassThrough(), "AUTHTOKEN"), full.Without(secret)},
		{"an explicit allow is exact", ctxconv.Secured(ctxconv.AllowKeys("AuthToken", "tenantId"), secret),
			toolctx.MustOf("tenantId", "acme")},
		{"without a list, credential keys are still secrets", ctxconv.Secured(ctxconv.PassThrough()), full.Without(secret)},
		{"none stays none", ctxconv.Secured(ctxconv.None(), secret), toolctx.Empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.conv.Convert(full.With(toolctx.LoopIDKey, "loop-1"))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%v (-want +got):\n%s", tt.conv, diff)
			}
		})
	}
}

// TestWellKnownCredentialsAreSecrets: a pass-through converter never forwards a key that
// names a credential, whatever its spelling, and forwards the rest; allow-keys forwards a
// credential it lists, and only that one.
func TestWellKnownCredentialsAreSecrets(t *testing.T) {
	credentials := []string{"Authorization", "authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "api_key",
		"apiKey", "OPENAI_API_KEY", "access_token", "refresh-token", "authToken", "githubToken", "password", "dbPassword",
		"client_secret", "privateKey", "session.id", "AWS_CREDENTIALS", "bearer",
		"api_keys", "X-Auth", "basic_auth", "Proxy-Auth", "auth", "cookies", "passwords", "PASS", "pin", "otp",
		"passcode", "client_secrets", "secret_key", "AWS_SECRET_ACCESS_KEY", "ssh_key", "signing-key", "encryptionKey",
		"private_keys", "private_key_pem", "id_jwt", "DATABASE_CONNECTION_STRING", "DATABASE_DSN", "sid",
		"access_tokens", "refresh_tokens", "session_key"}
	plain := []string{"tenantId", "correlationId", "maxTokens", "max_tokens", "totalTokens", "tokenizer", "keyId",
		"locale", "secretary_name", "author", "AWS_ACCESS_KEY_ID", "passenger", "pinned", "spin", "sidebar", "region",
		"user", "chat_session", "PWD", "OLDPWD", "requireAuth", "skip_auth", "default_auth", "two_factor_auth", "hasAuth",
		"oauth_provider"}
	var kv []string
	for _, k := range append(slices.Clone(credentials), plain...) {
		kv = append(kv, k, "v-"+k)
	}
	in := toolctx.MustOf(kv...)
	for _, k := range credentials {
		if !ctxconv.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = false", k)
		}
	}
	for _, k := range plain {
		if ctxconv.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = true", k)
		}
	}
	if got := ctxconv.Secured(ctxconv.PassThrough()).Convert(in).Keys(); !cmp.Equal(got, slices.Sorted(slices.Values(plain))) {
		t.Errorf("pass-through forwarded %v, want %v", got, plain)
	}
	got := ctxconv.Secured(ctxconv.AllowKeys("Authorization", "tenantId")).Convert(in)
	if diff := cmp.Diff(toolctx.MustOf("Authorization", "v-Authorization", "tenantId", "v-tenantId"), got); diff != "" {
		t.Errorf("allow-keys listing Authorization (-want +got):\n%s", diff)
	}
}

func TestConverterStrings(t *testing.T) {
	tests := []struct {
		conv ctxconv.Converter
		want string
	}{
		{ctxconv.PassThrough(), "pass-through"},
		{ctxconv.None(), "none"},
		{ctxconv.AllowKeys("a", "b"), "allow-keys(a, b)"},
		{ctxconv.DenyKeys("a"), "deny-keys(a)"},
		{ctxconv.Secured(nil, "a", "b"), "secured(pass-through, secrets: a, b)"},
		{ctxconv.ConverterFunc(nil), "custom"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(tt.conv); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestConverterKeysAreCopied(t *testing.T) {
	keys := []string{"tenantId"}
	allow, deny := ctxconv.AllowKeys(keys...), ctxconv.DenyKeys(keys...)
	keys[0] = "authToken"
	if got := allow.Convert(full).Keys(); !slices.Equal(got, []string{"tenantId"}) {
		t.Errorf("AllowKeys follows its caller's slice: %v", got)
	}
	if deny.Convert(full).Contains("tenantId") {
		t.Error("DenyKeys follows its caller's slice")
	}
}

// TestPassThroughDropsDisguisedCredentials: the hostile tester's keys. A zero-width space
// appended to Authorization, the British spelling, an encoding suffix and a bare session
// name each got through a pass-through group when the filter matched names as written.
func TestPassThroughDropsDisguisedCredentials(t *testing.T) {
	in := toolctx.MustOf("Authorization\u200b", "Bearer x", "authorisation", "Bearer y", "api_key_b64", "a2V5",
		"session", "s-1", "tenantId", "acme")
	for _, conv := range []ctxconv.Converter{
		ctxconv.Secured(ctxconv.PassThrough()),
		ctxconv.Secured(nil),
		ctxconv.Secured(ctxconv.DenyKeys("locale")),
		ctxconv.Secured(ctxconv.ConverterFunc(func(c toolctx.Context) toolctx.Context { return c })),
	} {
		if diff := cmp.Diff(toolctx.MustOf("tenantId", "acme"), conv.Convert(in)); diff != "" {
			t.Errorf("%v forwarded a credential (-want +got):\n%s", conv, diff)
		}
	}
}

// credentialKeys name credentials, however they are spelled; the fuzz target starts from
// them.
var credentialKeys = []string{
	// Spelling: case, separators, zero-width and format runes, full width.
	"Authorization", "Authorization\u200b", "Author\u200cization", "\ufeffAuthorization", "Autho\u2060rization",
	"Author\u00adization", "AUTHORIZATION", "Proxy-Authorization", "Ａｕｔｈｏｒｉｚａｔｉｏｎ", "x\u3000api\u00a0key",
	"api/key", "api:key", "api\tkey", "paſsword", "to\u212aen", "authorısation",
	// British spelling.
	"authorisation", "Proxy-Authorisation",
	// Encodings and wrappings after a credential word.
	"api_key_b64", "apiKeyBase64", "token_hex", "password_enc", "secret_encoded", "cookie_raw", "jwt_value",
	"authorization_header", "bearer_token_value", "api_key_2", "token1", "token_v2", "client_secret_b64url",
	"password_sha256", "password_confirmation", "credentials_json", "private_key_pem", "auth_header", "pass_b64",
	"pin_code", "auth_code", "mfa_code", "totp_seed", "hmac_key", "pw_hash", "token٣",
	// Sessions, single sign-on and the like.
	"session", "sessions", "sess", "session_token", "sessionToken", "user_session", "_gitlab_session",
	"PHPSESSID", "JSESSIONID", "connect.sid", "sso", "saml", "SAMLResponse", "oauth", "oauth_token", "oauth2",
	"refresh", "XSRF-TOKEN", "csrf", "_csrf", "mfa", "totp", "otp", "2fa", "hmac", "hmac_sha256",
	"X-Hub-Signature-256", "signature", "sig", "privkey", "ssh_privkey", "dbPwd", "MYSQL_PWD", "pw", "creds",
	"aws_creds", "cred", "secretAccessKey", "clientSecret", "webhookSecret", "pat", "SECRET_KEY_BASE",
	"Ocp-Apim-Subscription-Key", "client_assertion", "X-Vault-Token", "PRIVATE-TOKEN",
}

// plainKeys hold no credential, though some look close to one.
var plainKeys = []string{
	"maxTokens", "max_tokens", "tokens", "tokenCount", "token_count", "token_limit", "tokenizer", "totalTokens",
	"token_url", "requireAuth", "author", "authorName", "authority", "authentic", "keyId", "AWS_ACCESS_KEY_ID",
	"secret_name", "secretary_name", "password_policy", "cookie_domain", "session_timeout", "sessionCount",
	"max_sessions", "chat_session", "signature_version", "refresh_interval", "autoRefresh", "mfa_enabled",
	"otp_length", "csrf_protection", "hmac_algorithm", "saml_provider", "oauth_provider", "sso_enabled", "path",
	"pattern", "compass", "bypass", "passenger", "pinned", "spin", "sidebar", "signal", "lasso", "assess",
	"possession", "sacred", "credit", "monkey", "PWD", "OLDPWD", "country_code", "cache_key", "tenantId", "locale",
	"two_factor_auth", "",
}

func TestIsCredentialKey(t *testing.T) {
	for _, k := range credentialKeys {
		if !ctxconv.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = false, want true", k)
		}
	}
	for _, k := range plainKeys {
		if ctxconv.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = true, want false", k)
		}
	}
}

// TestSecretListIsNormalised: a listed secret covers its other spellings and its
// harmless suffixes, not the words it is part of.
func TestSecretListIsNormalised(t *testing.T) {
	for _, k := range []string{"ssn", "SSN", "s-s-n", "ss\u200bn", "ｓｓｎ", "ssn_b64", "ssn2", "SSN_HEX"} {
		if !ctxconv.IsSecretKey(k, "ssn") {
			t.Errorf("IsSecretKey(%q, ssn) = false", k)
		}
	}
	for _, k := range []string{"ssnx", "my_ssn_count", "tenantId", ""} {
		if ctxconv.IsSecretKey(k, "ssn") {
			t.Errorf("IsSecretKey(%q, ssn) = true", k)
		}
	}
	// A secret with no letter or digit matches its own spelling only.
	if !ctxconv.IsSecretKey("--", "--") || ctxconv.IsSecretKey("tenantId", "--") || ctxconv.IsSecretKey("", "--") {
		t.Error("a secret with no letter or digit matches other keys, or not itself")
	}
	in := toolctx.MustOf("Ssn", "1", "s_s_n\u200b", "2", "ssn_b64", "3", "tenantId", "acme")
	got := ctxconv.Secured(ctxconv.PassThrough(), "ssn").Convert(in)
	if diff := cmp.Diff(toolctx.MustOf("tenantId", "acme"), got); diff != "" {
		t.Errorf("pass-through with secret ssn (-want +got):\n%s", diff)
	}
}

// TestAllowKeysForwardsOnlyTheListedSpelling: allow-keys forwards a secret under the
// exact spelling it lists, and no other spelling of it.
func TestAllowKeysForwardsOnlyTheListedSpelling(t *testing.T) {
	in := toolctx.MustOf("authorization", "a", "authorization\u200b", "b", "Authorization", "c", "ａｕｔｈｏｒｉｚａｔｉｏｎ", "d",
		"ssn", "e", "SSN", "f")
	for _, conv := range []ctxconv.Converter{
		ctxconv.Secured(ctxconv.AllowKeys("authorization", "ssn"), "ssn"),
		ctxconv.Secured(ctxconv.Secured(ctxconv.AllowKeys("authorization", "ssn"), "SSN")),
	} {
		if diff := cmp.Diff(toolctx.MustOf("authorization", "a", "ssn", "e"), conv.Convert(in)); diff != "" {
			t.Errorf("%v (-want +got):\n%s", conv, diff)
		}
	}
	// Listing a variant forwards that variant, and only it.
	got := ctxconv.Secured(ctxconv.AllowKeys("authorization\u200b")).Convert(in)
	if diff := cmp.Diff(toolctx.MustOf("authorization\u200b", "b"), got); diff != "" {
		t.Errorf("allow-keys listing a zero-width variant (-want +got):\n%s", diff)
	}
}

// credentialPreserving are the changes of spelling that leave a credential key a
// credential: FuzzCredentialKey's oracle.
var credentialPreserving = []struct {
	name string
	f    func(string) string
}{
	{"upper case", strings.ToUpper},
	{"lower case", strings.ToLower},
	{"title case", strings.ToTitle},
	{"swapped case", func(s string) string {
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s)
	}},
	{"full width", func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '\u3000'
			case 0x21 <= r && r <= 0x7e:
				return r + 0xfee0
			}
			return r
		}, s)
	}},
}

// inserted are the runes whose insertion leaves a credential key a credential: every
// format rune (Unicode category Cf: zero-width spaces and joiners, the byte order mark,
// the soft hyphen, bidirectional controls, tags), every space and separator (Z), and
// every ASCII rune that is neither a letter nor a digit.
var inserted = func() []rune {
	var rs []rune
	for _, table := range []*unicode.RangeTable{unicode.Cf, unicode.Z} {
		for _, r16 := range table.R16 {
			for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
				rs = append(rs, r)
			}
		}
		for _, r32 := range table.R32 {
			for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
				rs = append(rs, r)
			}
		}
	}
	for r := rune(0); r < utf8.RuneSelf; r++ {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			rs = append(rs, r)
		}
	}
	return rs
}()

// FuzzCredentialKey: a credential key stays one when a format rune or a separator is
// inserted anywhere in it, when its case changes and when it is written in full width.
func FuzzCredentialKey(f *testing.F) {
	for i, k := range credentialKeys {
		f.Add(k, uint(i), uint(i*7))
	}
	f.Fuzz(func(t *testing.T, key string, at, pick uint) {
		if !utf8.ValidString(key) || !ctxconv.IsCredentialKey(key) {
			return
		}
		// Insert at a rune boundary: a key is UTF-8.
		var bounds []int
		for i := range key {
			bounds = append(bounds, i)
		}
		bounds = append(bounds, len(key))
		i, r := bounds[at%uint(len(bounds))], inserted[pick%uint(len(inserted))]
		if k := key[:i] + string(r) + key[i:]; !ctxconv.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = true, but with %U inserted: IsCredentialKey(%q) = false", key, r, k)
		}
		for _, c := range credentialPreserving {
			if k := c.f(key); !ctxconv.IsCredentialKey(k) {
				t.Errorf("IsCredentialKey(%q) = true, but in %s: IsCredentialKey(%q) = false", key, c.name, k)
			}
		}
	})
}
