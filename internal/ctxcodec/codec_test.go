package ctxcodec_test

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// grpcKey is the set of metadata keys gRPC accepts (grpc-go internal/metadata.ValidateKey).
var grpcKey = regexp.MustCompile(`^[0-9a-z_.-]+$`)

// checkEncoding asserts what every encoding must satisfy: one entry per context entry,
// keys gRPC accepts and never reserved, values the raw value bytes.
func checkEncoding(t *testing.T, c toolctx.Context, md map[string][]string) {
	t.Helper()
	if len(md) != c.Len() {
		t.Fatalf("%d metadata entries for %d context entries", len(md), c.Len())
	}
	for k, v := range c.All() {
		mk := ctxcodec.MetadataKey(k)
		if !grpcKey.MatchString(mk) || strings.HasPrefix(mk, "grpc-") || !strings.HasPrefix(mk, "tm-ctx-") || !strings.HasSuffix(mk, "-bin") {
			t.Errorf("metadata key %q for %q is not a safe gRPC binary key", mk, k)
		}
		vs, ok := md[mk]
		if !ok || len(vs) != 1 || vs[0] != v {
			t.Errorf("metadata[%q] = %q, want exactly the raw value %q", mk, vs, v)
		}
	}
}

func roundTrip(t *testing.T, cd ctxcodec.Codec, c toolctx.Context) {
	t.Helper()
	md, err := cd.Encode(c)
	if err != nil {
		t.Fatalf("Encode(%q): %v", c.Map(), err)
	}
	checkEncoding(t, c, md)
	got, err := cd.Decode(md)
	if err != nil {
		t.Fatalf("Decode(Encode(%q)): %v", c.Map(), err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("round trip of %q (-want +got):\n%s", c.Map(), diff)
	}
}

func TestCodecRoundTripTable(t *testing.T) {
	tests := []struct {
		name string
		c    toolctx.Context
	}{
		{"ascii", toolctx.MustOf("tenantId", "acme", "correlationId", "c-42")},
		{"upper case, dots and spaces in keys", toolctx.MustOf("Tenant.ID", "x", "tenant.id", "y", "a key with spaces", "z")},
		{"unicode", toolctx.MustOf("租户", "值 é 🙂", "Ключ", "ǅ")},
		{"CR LF NUL and DEL in values", toolctx.MustOf("multi", "line1\r\nline2\n", "nul", "a\x00b", "del", "\x7f\t")},
		{"control characters in keys", toolctx.MustOf("\r\n", "crlf", "\x00", "nul", "\t tab", "t")},
		{"empty value", toolctx.MustOf("flag", "")},
		{"reserved-looking keys", toolctx.MustOf("grpc-status", "0", ":authority", "evil", "content-type", "x", "te", "trailers", "user-agent", "u")},
		{"loop id", toolctx.Empty.With(toolctx.LoopIDKey, "loop-1")},
		{"key of one byte", toolctx.MustOf("a", "1")},
		{"long key", toolctx.MustOf(strings.Repeat("k", 300), "v")},
		{"U+FFFD is valid UTF-8", toolctx.MustOf("\uFFFD", "\uFFFD")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { roundTrip(t, ctxcodec.Codec{}, tt.c) })
	}
}

func TestMetadataKeyIsBase32(t *testing.T) {
	for key, want := range map[string]string{
		"a":        "tm-ctx-me-bin",
		"abc":      "tm-ctx-mfrgg-bin",
		"tenantId": "tm-ctx-orsw4yloorewi-bin",
	} {
		if got := ctxcodec.MetadataKey(key); got != want {
			t.Errorf("MetadataKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestEncodeEmptySendsNothing(t *testing.T) {
	md, err := ctxcodec.Codec{}.Encode(toolctx.Empty)
	if err != nil || md != nil {
		t.Errorf("Encode(Empty) = %#v, %v; want nil, nil", md, err)
	}
}

func TestEncodeRejectsInvalidEntries(t *testing.T) {
	tests := []struct {
		name    string
		c       toolctx.Context
		wantMsg string
	}{
		{"empty key", toolctx.MustOf("", "v"), "empty key"},
		{"key not UTF-8", toolctx.MustOf("k\xff", "v"), `key "k\xff" is not valid UTF-8`},
		{"value not UTF-8", toolctx.MustOf("tenantId", "\xc3\x28"), `value of key "tenantId" is not valid UTF-8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := ctxcodec.Codec{}.Encode(tt.c)
			if !errors.Is(err, ctxcodec.ErrInvalid) || md != nil {
				t.Fatalf("Encode = %v, %v; want ErrInvalid", md, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
			if err2 := (ctxcodec.Codec{}).Check(tt.c); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Check = %v, want the Encode error %v", err2, err)
			}
		})
	}
}

// size is the encoded size of one entry, by the rule of Codec.MaxBytes.
func size(key string, valueLen int) int {
	return len(ctxcodec.MetadataKey(key)) + (valueLen+2)/3*4 + 32
}

func TestEncodeSizeLimit(t *testing.T) {
	big := toolctx.MustOf("big", strings.Repeat("x", 9000), "small", "s")
	_, err := ctxcodec.Codec{}.Encode(big)
	var tl *ctxcodec.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ctxcodec.ErrTooLarge) {
		t.Fatalf("Encode of a 9000-byte value = %v, want *TooLargeError wrapping ErrTooLarge", err)
	}
	wantSize := size("big", 9000) + size("small", 1)
	if wantSize != 16+12000+32+19+4+32 {
		t.Fatalf("test arithmetic: %d", wantSize)
	}
	want := &ctxcodec.TooLargeError{Size: wantSize, Max: ctxcodec.DefaultMaxBytes, LargestKey: "big"}
	if diff := cmp.Diff(want, tl); diff != "" {
		t.Errorf("TooLargeError (-want +got):\n%s", diff)
	}
	if got, wantMsg := err.Error(), `tool call context is 12103 bytes encoded, over the 8192-byte limit (largest entry: "big")`; got != wantMsg {
		t.Errorf("message = %q, want %q", got, wantMsg)
	}
	if err := (ctxcodec.Codec{}).Check(big); !errors.As(err, &tl) || tl.Size != wantSize {
		t.Errorf("Check = %v, want the same TooLargeError", err)
	}

	// The limit is inclusive and MaxBytes overrides the default.
	c := toolctx.MustOf("k", "0123456789")
	n := size("k", 10)
	if _, err := (ctxcodec.Codec{MaxBytes: n}).Encode(c); err != nil {
		t.Errorf("Encode at exactly MaxBytes = %v, want ok", err)
	}
	if _, err := (ctxcodec.Codec{MaxBytes: n - 1}).Encode(c); !errors.Is(err, ctxcodec.ErrTooLarge) {
		t.Errorf("Encode one byte over MaxBytes = %v, want ErrTooLarge", err)
	}
	md, err := ctxcodec.Codec{MaxBytes: 100000}.Encode(big)
	if err != nil {
		t.Fatalf("Encode with a raised limit: %v", err)
	}
	if _, err := (ctxcodec.Codec{}).Decode(md); !errors.As(err, &tl) || tl.LargestKey != "big" || tl.Size != wantSize {
		t.Errorf("Decode over the default limit = %v, want TooLargeError naming \"big\"", err)
	}
	if got, err := (ctxcodec.Codec{MaxBytes: 100000}).Decode(md); err != nil || !got.Equal(big) {
		t.Errorf("Decode with a raised limit = %v, %v", got, err)
	}
}

func TestDecodeIgnoresForeignKeys(t *testing.T) {
	md := map[string][]string{
		"authorization":               {"Bearer secret"},
		"grpc-timeout":                {"1S"},
		":authority":                  {"host"},
		"tm-ctx-mfrgg":                {"no -bin suffix"},
		"tm-ctx-bin":                  {"too short to carry a key"},
		"x-tm-ctx-mfrgg-bin":          {"wrong prefix"},
		ctxcodec.MetadataKey("abc"):   {"kept"},
		ctxcodec.MetadataKey("other"): {""},
	}
	got, err := ctxcodec.Codec{}.Decode(md)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(toolctx.MustOf("abc", "kept", "other", ""), got); diff != "" {
		t.Errorf("Decode (-want +got):\n%s", diff)
	}
	for _, md := range []map[string][]string{nil, {}, {"authorization": {"x"}}} {
		if got, err := (ctxcodec.Codec{}).Decode(md); err != nil || !got.IsEmpty() {
			t.Errorf("Decode(%v) = %v, %v; want Empty", md, got, err)
		}
	}
}

func TestDecodeRejectsMalformedMetadata(t *testing.T) {
	tests := []struct {
		name    string
		md      map[string][]string
		wantMsg string
	}{
		{"upper-case base32", map[string][]string{"tm-ctx-MFRGG-bin": {"v"}}, `"MFRGG" is not lowercase base32`},
		{"digit outside the alphabet", map[string][]string{"tm-ctx-mfrg1-bin": {"v"}}, `"mfrg1" is not lowercase base32`},
		{"padding", map[string][]string{"tm-ctx-me======-bin": {"v"}}, `is not lowercase base32`},
		{"impossible length", map[string][]string{"tm-ctx-m-bin": {"v"}}, `"m" is not canonical unpadded base32`},
		{"non-zero trailing bits", map[string][]string{"tm-ctx-mfrgh-bin": {"v"}}, `"mfrgh" is not canonical unpadded base32`},
		{"empty key", map[string][]string{"tm-ctx--bin": {"v"}}, `metadata key "tm-ctx--bin" carries an empty key`},
		{"key not UTF-8", map[string][]string{ctxcodec.MetadataKey("\xff"): {"v"}}, `carries key "\xff", which is not valid UTF-8`},
		{"value not UTF-8", map[string][]string{ctxcodec.MetadataKey("abc"): {"\xff"}}, `value of key "abc" is not valid UTF-8`},
		{"two values", map[string][]string{ctxcodec.MetadataKey("abc"): {"1", "2"}}, `(context key "abc") has 2 values, want 1`},
		{"no value", map[string][]string{ctxcodec.MetadataKey("abc"): {}}, `(context key "abc") has 0 values, want 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ctxcodec.Codec{}.Decode(tt.md)
			if !errors.Is(err, ctxcodec.ErrInvalid) {
				t.Fatalf("Decode = %v, %v; want ErrInvalid", got, err)
			}
			if !got.IsEmpty() {
				t.Errorf("Decode returned %v with its error", got)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
		})
	}
}

// alphabet mixes what keys and values may hold: case, dots, dashes, spaces,
// control characters (CR, LF, NUL, DEL), multi-byte runes and U+FFFD.
var alphabet = []rune("aZ09.-_ :/=,\r\n\t\x00\x7f\u00e9\u00df\u0130\u212a\u4e2d\U0001F600\uFFFD\u2014\"'\\")

func randomString(r *rand.Rand, maxLen int) string {
	n := r.IntN(maxLen + 1)
	var b strings.Builder
	for range n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func randomContext(r *rand.Rand) toolctx.Context {
	m := map[string]string{}
	for range r.IntN(8) {
		k := randomString(r, 12)
		if k == "" {
			k = "k"
		}
		m[k] = randomString(r, 40)
	}
	return toolctx.FromMap(m)
}

func TestCodecRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(20260817, 1))
	for i := range 2000 {
		c := randomContext(r)
		if t.Failed() {
			t.Fatalf("failed at iteration %d", i)
		}
		roundTrip(t, ctxcodec.Codec{}, c)
	}
}
