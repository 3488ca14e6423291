package toolctx_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

var full = toolctx.MustOf("tenantId", "acme", "correlationId", "c-1", "locale", "en", "authToken", "xyz")

func TestConverters(t *testing.T) {
	var seen toolctx.Context
	tests := []struct {
		name string
		conv toolctx.Converter
		in   toolctx.Context
		want toolctx.Context
	}{
		{"pass-through forwards all", toolctx.PassThrough(), full, full},
		{"pass-through of Empty is Empty", toolctx.PassThrough(), toolctx.Empty, toolctx.Empty},
		{"none suppresses all", toolctx.None(), full, toolctx.Empty},
		{"none of Empty is Empty", toolctx.None(), toolctx.Empty, toolctx.Empty},
		{"allow-keys keeps only allowed", toolctx.AllowKeys("tenantId", "locale", "absent"), full,
			toolctx.MustOf("tenantId", "acme", "locale", "en")},
		{"allow-keys single key", toolctx.AllowKeys("tenantId"), full, toolctx.MustOf("tenantId", "acme")},
		{"allow-keys without a match is Empty", toolctx.AllowKeys("absent"), full, toolctx.Empty},
		{"allow-keys of Empty is Empty", toolctx.AllowKeys("tenantId"), toolctx.Empty, toolctx.Empty},
		{"allow-keys with no keys is none", toolctx.AllowKeys(), full, toolctx.Empty},
		{"deny-keys removes denied", toolctx.DenyKeys("authToken", "absent"), full,
			toolctx.MustOf("tenantId", "acme", "correlationId", "c-1", "locale", "en")},
		{"deny-keys without a match forwards all", toolctx.DenyKeys("absent"), full, full},
		{"deny-keys of Empty is Empty", toolctx.DenyKeys("authToken"), toolctx.Empty, toolctx.Empty},
		{"deny-keys denying every key is Empty", toolctx.DenyKeys(full.Keys()...), full, toolctx.Empty},
		{"custom function transforms", toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			return toolctx.MustOf("tenant", strings.ToUpper(c.GetOr("tenantId", "")))
		}), full, toolctx.MustOf("tenant", "ACME")},
		{"custom function may return Empty", toolctx.ConverterFunc(func(toolctx.Context) toolctx.Context {
			return toolctx.Empty
		}), full, toolctx.Empty},
		{"custom function receives the full context", toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context {
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
	for _, conv := range []toolctx.Converter{
		toolctx.PassThrough(), toolctx.None(), toolctx.AllowKeys("tenantId"), toolctx.DenyKeys("tenantId"),
		toolctx.Secured(toolctx.PassThrough(), "authToken"),
		toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context { return c.With("tenantId", "x") }),
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
		a := toolctx.AllowKeys(allowed...).Convert(full)
		d := toolctx.DenyKeys(denied...).Convert(full)
		if diff := cmp.Diff(a, d); diff != "" {
			t.Errorf("allow%v != deny%v (-allow +deny):\n%s", allowed, denied, diff)
		}
	}
}

func TestReservedKeysNeverCross(t *testing.T) {
	in := full.With(toolctx.LoopIDKey, "loop-1").With("toolmesh.other", "x")
	var seen toolctx.Context
	for _, conv := range []toolctx.Converter{
		toolctx.PassThrough(),
		toolctx.AllowKeys(toolctx.LoopIDKey, "toolmesh.other", "tenantId"),
		toolctx.DenyKeys("authToken"),
		toolctx.Secured(toolctx.AllowKeys(toolctx.LoopIDKey, "tenantId"), toolctx.LoopIDKey),
		toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			seen = c
			return c.With(toolctx.LoopIDKey, "forged").With("toolmesh.injected", "y")
		}),
		toolctx.Secured(ownConverter{}),
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
		conv toolctx.Converter
		want toolctx.Context
	}{
		{"pass-through drops the secret", toolctx.Secured(toolctx.PassThrough(), secret),
			full.Without(secret)},
		{"nil means pass-through", toolctx.Secured(nil, secret), full.Without(secret)},
		{"deny-keys drops the secret", toolctx.Secured(toolctx.DenyKeys("locale"), secret),
			full.Without(secret, "locale")},
		{"allow-keys without the secret drops it", toolctx.Secured(toolctx.AllowKeys("tenantId"), secret),
			toolctx.MustOf("tenantId", "acme")},
		{"allow-keys listing the secret forwards it", toolctx.Secured(toolctx.AllowKeys("tenantId", secret), secret),
			toolctx.MustOf("tenantId", "acme", secret, "xyz")},
		{"nested Secured keeps an explicit allow", toolctx.Secured(toolctx.Secured(toolctx.AllowKeys(secret), secret), secret, "locale"),
			toolctx.MustOf(secret, "xyz")},
		{"a custom function cannot add the secret back", toolctx.Secured(toolctx.ConverterFunc(func(c toolctx.Context) toolctx.Context {
			return c.With(secret, "re-added").With("AUTHTOKEN", "case-folded")
		}), secret), full.Without(secret)},
		{"secrets match case-insensitively", toolctx.Secured(toolctx.PassThrough(), "AUTHTOKEN"), full.Without(secret)},
		{"an explicit allow is exact", toolctx.Secured(toolctx.AllowKeys("AuthToken", "tenantId"), secret),
			toolctx.MustOf("tenantId", "acme")},
		{"without a list, credential keys are still secrets", toolctx.Secured(toolctx.PassThrough()), full.Without(secret)},
		{"none stays none", toolctx.Secured(toolctx.None(), secret), toolctx.Empty},
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
		if !toolctx.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = false", k)
		}
	}
	for _, k := range plain {
		if toolctx.IsCredentialKey(k) {
			t.Errorf("IsCredentialKey(%q) = true", k)
		}
	}
	if got := toolctx.Secured(toolctx.PassThrough()).Convert(in).Keys(); !cmp.Equal(got, slices.Sorted(slices.Values(plain))) {
		t.Errorf("pass-through forwarded %v, want %v", got, plain)
	}
	got := toolctx.Secured(toolctx.AllowKeys("Authorization", "tenantId")).Convert(in)
	if diff := cmp.Diff(toolctx.MustOf("Authorization", "v-Authorization", "tenantId", "v-tenantId"), got); diff != "" {
		t.Errorf("allow-keys listing Authorization (-want +got):\n%s", diff)
	}
}

func TestConverterStrings(t *testing.T) {
	tests := []struct {
		conv toolctx.Converter
		want string
	}{
		{toolctx.PassThrough(), "pass-through"},
		{toolctx.None(), "none"},
		{toolctx.AllowKeys("a", "b"), "allow-keys(a, b)"},
		{toolctx.DenyKeys("a"), "deny-keys(a)"},
		{toolctx.Secured(nil, "a", "b"), "secured(pass-through, secrets: a, b)"},
		{toolctx.ConverterFunc(nil), "custom"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(tt.conv); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestConverterKeysAreCopied(t *testing.T) {
	keys := []string{"tenantId"}
	allow, deny := toolctx.AllowKeys(keys...), toolctx.DenyKeys(keys...)
	keys[0] = "authToken"
	if got := allow.Convert(full).Keys(); !slices.Equal(got, []string{"tenantId"}) {
		t.Errorf("AllowKeys follows its caller's slice: %v", got)
	}
	if deny.Convert(full).Contains("tenantId") {
		t.Error("DenyKeys follows its caller's slice")
	}
}
