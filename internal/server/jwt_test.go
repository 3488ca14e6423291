package server

import (
	"strings"
	"testing"
)

// A key set is read strictly: what it cannot use is refused with the reason.
func TestParseJWKS(t *testing.T) {
	for _, tc := range []struct{ name, js, want string }{
		{"not JSON", `{`, "not a JSON Web Key Set"},
		{"no keys", `{"keys":[]}`, "no keys"},
		{"unknown type", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, `key type "oct"`},
		{"small RSA key", `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`, "at least 2048"},
		{"unknown curve", `{"keys":[{"kty":"EC","crv":"P-521","x":"AQ","y":"AQ"}]}`, `curve "P-521"`},
		{"short coordinates", `{"keys":[{"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}]}`, "32-byte base64url coordinates"},
		{"off the curve", `{"keys":[{"kty":"EC","crv":"P-256","x":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`, "not on P-256"},
		{"bad base64", `{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`, "bad base64url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseJWKS([]byte(tc.js))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Encryption keys are skipped; a set of nothing else has nothing to verify with.
	if _, err := parseJWKS([]byte(`{"keys":[{"kty":"oct","use":"enc"}]}`)); err == nil || !strings.Contains(err.Error(), "no signing keys") {
		t.Errorf("a set with an encryption key only: %v", err)
	}
}
