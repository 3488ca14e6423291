package compose

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func TestParseConverter(t *testing.T) {
	tests := []struct {
		kind string
		keys []string
		want string // String of the converter
	}{
		{"", nil, "pass-through"},
		{"pass-through", nil, "pass-through"},
		{"pass-through", []string{}, "pass-through"},
		{"none", nil, "none"},
		{"allow-keys", []string{"tenantId", "locale"}, "allow-keys(tenantId, locale)"},
		{"allow-keys", nil, "allow-keys()"},
		{"deny-keys", []string{"authToken"}, "deny-keys(authToken)"},
		{"deny-keys", nil, "deny-keys()"},
	}
	for _, tt := range tests {
		conv, err := parseConverter("g", config.ConverterSpec{Kind: tt.kind, Keys: tt.keys})
		if err != nil {
			t.Errorf("parseConverter(%q, %q): %v", tt.kind, tt.keys, err)
			continue
		}
		if got := fmt.Sprint(conv); got != tt.want {
			t.Errorf("parseConverter(%q, %q) = %s, want %s", tt.kind, tt.keys, got, tt.want)
		}
	}
	if conv, _ := parseConverter("g", config.ConverterSpec{Kind: "allow-keys", Keys: []string{"tenantId"}}); !conv.Convert(toolctx.MustOf("tenantId", "acme", "locale", "en")).Equal(toolctx.MustOf("tenantId", "acme")) {
		t.Error("a parsed allow-keys does not filter")
	}
}

func TestParseConverterErrors(t *testing.T) {
	tests := []struct {
		kind    string
		keys    []string
		wantMsg string
	}{
		{"allow", []string{"a"}, `invalid converter: unknown kind "allow" (want "pass-through", "none", "allow-keys", "deny-keys" or "cel")`},
		{"PASS-THROUGH", nil, `unknown kind "PASS-THROUGH"`},
		{"pass-through", []string{"a"}, `invalid converter: "pass-through" takes no keys, got 1 (a)`},
		{"", []string{"a", "b"}, `"pass-through" takes no keys, got 2 (a, b)`},
		{"none", []string{"a"}, `"none" takes no keys, got 1 (a)`},
		{"allow-keys", []string{"a", ""}, `invalid converter: "allow-keys": key 1 is empty`},
		{"deny-keys", []string{""}, `"deny-keys": key 0 is empty`},
		{"allow-keys", []string{"a", "b", "a"}, `"allow-keys": key "a" is listed twice`},
		{"allow-keys", []string{toolctx.LoopIDKey}, `"allow-keys": key "toolmesh.loop_id" is reserved (prefix "toolmesh."); it never crosses a process boundary`},
	}
	for _, tt := range tests {
		conv, err := parseConverter("g", config.ConverterSpec{Kind: tt.kind, Keys: tt.keys})
		if !errors.Is(err, errInvalidConverter) || conv != nil {
			t.Errorf("parseConverter(%q, %q) = %v, %v; want ErrInvalidConverter", tt.kind, tt.keys, conv, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("parseConverter(%q, %q) error %q does not say %q", tt.kind, tt.keys, err, tt.wantMsg)
		}
	}
}

// TestConverterKindsRoundTrip: the names a converter is written with in the
// configuration are the names its String starts with, so logs and errors speak the
// configuration's language.
func TestConverterKindsRoundTrip(t *testing.T) {
	for _, kind := range []string{kindPassThrough, kindNone, kindAllowKeys, kindDenyKeys, kindCEL} {
		spec := config.ConverterSpec{Kind: kind}
		switch kind {
		case kindAllowKeys, kindDenyKeys:
			spec.Keys = []string{"k"}
		case kindCEL:
			spec.Keep = "true"
		}
		conv, err := parseConverter("g", spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(conv); !strings.HasPrefix(got, kind) {
			t.Errorf("parseConverter(%q).String() = %q, want it to start with %q", kind, got, kind)
		}
	}
}
