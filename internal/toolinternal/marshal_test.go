package toolinternal

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// MarshalJSON is json.Marshal without HTML escaping, whatever the size; what it returns
// is the caller's (a later call, which reuses the pooled buffer, does not change it).
func TestMarshalJSON(t *testing.T) {
	ref := func(v any) []byte {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	values := []any{
		map[string]any{"html": "<a href='x'>&</a>", "sep": "\u2028", "n": 1.5},
		json.RawMessage(" { \"a\" : 1 } "),
		strings.Repeat("x", 100<<10), // past what the pool keeps
		[]int{1, 2, 3},
	}
	var got [][]byte
	for _, v := range values {
		b, err := MarshalJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref(v); !bytes.Equal(b, want) {
			t.Fatalf("MarshalJSON(%T) = %.80q, want %.80q", v, b, want)
		}
		got = append(got, b)
	}
	for i, v := range values {
		if want := ref(v); !bytes.Equal(got[i], want) {
			t.Errorf("the encoding of %T changed after later calls: %.80q", v, got[i])
		}
	}
	if _, err := MarshalJSON(func() {}); err == nil {
		t.Error("MarshalJSON of a func: no error")
	}
}
