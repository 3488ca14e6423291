package ctxcodec

import (
	"errors"
	"fmt"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// The key caches stop growing at their bound, and keys past it still encode and decode;
// a metadata key the decoder refused is never cached, so it is refused again.
func TestKeyCachesBounded(t *testing.T) {
	for i := range maxCachedKeys + 100 {
		c := toolctx.MustOf(fmt.Sprintf("key-%05d", i), "v")
		md, err := Codec{}.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Codec{}.Decode(md)
		if err != nil || !got.Equal(c) {
			t.Fatalf("key %d: Decode(Encode) = %v, %v", i, got, err)
		}
	}
	if n, m := len(ptrMap(mdKeys.m.Load())), len(ptrMap(ctxKeys.m.Load())); n > maxCachedKeys || m > maxCachedKeys {
		t.Errorf("caches hold %d and %d keys, over the bound %d", n, m, maxCachedKeys)
	}
	bad := map[string][]string{MetadataPrefix + "orsw4yloorpwszb" + MetadataSuffix: {"v"}} // not canonical
	for range 2 {
		if _, err := (Codec{}).Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a non-canonical metadata key: %v, want ErrInvalid", err)
		}
	}
}

// AppendPairs carries what Encode carries, after what kv held; on an error kv comes back
// as it was.
func TestAppendPairs(t *testing.T) {
	c := toolctx.MustOf("tenant_id", "acme", "user_id", "u-1", "line", "a\r\nb")
	md, err := Codec{}.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := Codec{}.AppendPairs([]string{"x", "y"}, c)
	if err != nil || len(kv) != 2+2*len(md) || kv[0] != "x" || kv[1] != "y" {
		t.Fatalf("AppendPairs = %q, %v", kv, err)
	}
	for i := 2; i < len(kv); i += 2 {
		if vs := md[kv[i]]; len(vs) != 1 || vs[0] != kv[i+1] {
			t.Errorf("pair %q=%q, Encode has %q", kv[i], kv[i+1], vs)
		}
	}
	big := c.With("blob", string(make([]byte, DefaultMaxBytes)))
	kv, err = Codec{}.AppendPairs([]string{"x", "y"}, big)
	if !errors.Is(err, ErrTooLarge) || len(kv) != 2 {
		t.Errorf("AppendPairs over the bound = %q, %v; want the input back and ErrTooLarge", kv, err)
	}
}
