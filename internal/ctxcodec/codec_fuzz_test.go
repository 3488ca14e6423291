package ctxcodec_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// FuzzCodec checks, for any key and value: whenever Encode accepts a context, Decode
// gives it back, with gRPC-safe keys and raw values; Encode refuses exactly invalid
// entries. It also feeds the pair to Decode as raw metadata: Decode must not panic and
// whatever it accepts must encode back to the same metadata (one form per key).
func FuzzCodec(f *testing.F) {
	for _, s := range [][2]string{
		{"tenantId", "acme"}, {"", "v"}, {"Tenant.ID with space", "line1\r\nline2"},
		{"租户", "\x00\x7f🙂"}, {"k\xff", "v"}, {"k", "\xc3\x28"}, {":authority", "evil"},
		{"tm-ctx-mfrgg-bin", "v"}, {"tm-ctx-mfrgh-bin", "v"}, {"tm-ctx--bin", ""},
	} {
		f.Add(s[0], s[1])
	}
	cd := ctxcodec.Codec{}
	f.Fuzz(func(t *testing.T, key, value string) {
		c := toolctx.MustOf(key, value)
		md, err := cd.Encode(c)
		valid := key != "" && utf8.ValidString(key) && utf8.ValidString(value)
		switch {
		case err == nil:
			if !valid {
				t.Fatalf("Encode accepted invalid entry %q=%q", key, value)
			}
			checkEncoding(t, c, md)
			got, err := cd.Decode(md)
			if err != nil {
				t.Fatalf("Decode(Encode(%q=%q)): %v", key, value, err)
			}
			if diff := cmp.Diff(c, got); diff != "" {
				t.Fatalf("round trip of %q=%q (-want +got):\n%s", key, value, diff)
			}
		case errors.Is(err, ctxcodec.ErrTooLarge):
		case errors.Is(err, ctxcodec.ErrInvalid):
			if valid {
				t.Fatalf("Encode refused valid entry %q=%q: %v", key, value, err)
			}
		default:
			t.Fatalf("Encode error %v wraps neither ErrInvalid nor ErrTooLarge", err)
		}

		raw := map[string][]string{key: {value}}
		dc, err := cd.Decode(raw)
		if err != nil {
			return
		}
		back, err := cd.Encode(dc)
		if err != nil {
			t.Fatalf("Encode(Decode(%q)) = %v", raw, err)
		}
		if dc.IsEmpty() {
			return // a foreign key, ignored
		}
		if diff := cmp.Diff(raw, back); diff != "" {
			t.Fatalf("metadata %q decodes to %v but encodes back differently (-raw +back):\n%s", raw, dc, diff)
		}
	})
}
