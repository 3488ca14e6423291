package ctxcodec

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// typicalEntries is a ToolCallContext as a run usually carries it: four identifiers.
var typicalEntries = []string{
	"tenant_id", "acme-corp",
	"user_id", "user-7f3c9a2e-5d41-4b8e-9c07-1a2b3c4d5e6f",
	"request_id", "req-01HZX4Q7N8P9R2S3T4V5W6X7Y8",
	"session_id", "sess-9b1d2f3e4a5c6b7d8e9f",
}

// encodedSize is the size Check counts for c.
func encodedSize(c toolctx.Context) int {
	n := 0
	for k, v := range c.All() {
		n += entrySize(MetadataKey(k), v)
	}
	return n
}

// benchContexts returns the typical context and one that is the typical context plus a
// bearer token and a conversation summary, filled up to within 64 bytes of the default
// bound.
func benchContexts(b *testing.B) map[string]toolctx.Context {
	b.Helper()
	typical := toolctx.MustOf(typicalEntries...)
	withToken := typical.With("auth_token", "eyJhbGciOiJSUzI1NiJ9."+strings.Repeat("eyJzdWIiOiJ1c2VyLTdmM2M5YTJlIn0", 30)+".c2lnbmF0dXJl")
	sentence := "The customer asked about the order of 3 May and wants it delivered before Friday, ideally in the morning. "
	summary := strings.Repeat(sentence, DefaultMaxBytes/len(sentence))
	near := withToken.With("conversation_summary", summary)
	for encodedSize(near) > DefaultMaxBytes {
		summary = summary[:len(summary)-1]
		near = withToken.With("conversation_summary", summary)
	}
	if size := encodedSize(near); size < DefaultMaxBytes-64 {
		b.Fatalf("the near-bound context is %d bytes encoded, want within 64 bytes of %d", size, DefaultMaxBytes)
	}
	return map[string]toolctx.Context{"4-entries": typical, "near-8KiB": near}
}

// eachContext runs bench, allocations reported, as a sub-benchmark for each context of
// benchContexts.
func eachContext(b *testing.B, bench func(b *testing.B, c toolctx.Context)) {
	cs := benchContexts(b)
	for _, name := range []string{"4-entries", "near-8KiB"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			bench(b, cs[name])
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	eachContext(b, func(b *testing.B, c toolctx.Context) {
		md, err := Codec{}.Encode(c)
		if err != nil || len(md) != c.Len() {
			b.Fatalf("Encode: %d entries for %d, error %v", len(md), c.Len(), err)
		}
		for b.Loop() {
			_, _ = Codec{}.Encode(c)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	eachContext(b, func(b *testing.B, c toolctx.Context) {
		md, err := Codec{}.Encode(c)
		if err != nil {
			b.Fatal(err)
		}
		// Metadata as a server sees it also holds gRPC's own entries, which Decode skips.
		md["content-type"] = []string{"application/grpc"}
		md[":authority"] = []string{"127.0.0.1:7070"}
		md["user-agent"] = []string{"grpc-go/1.85.0"}
		got, err := Codec{}.Decode(md)
		if err != nil || !got.Equal(c) {
			b.Fatalf("Decode(Encode(c)) = %v, %v; want c back", got, err)
		}
		for b.Loop() {
			_, _ = Codec{}.Decode(md)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	eachContext(b, func(b *testing.B, c toolctx.Context) {
		if err := (Codec{}).Check(c); err != nil {
			b.Fatal(err)
		}
		if err := (Codec{MaxBytes: encodedSize(c) - 1}).Check(c); err == nil {
			b.Fatal("Check accepts a context one byte over its bound")
		}
		for b.Loop() {
			_ = Codec{}.Check(c)
		}
	})
}

func BenchmarkAppendPairs(b *testing.B) {
	eachContext(b, func(b *testing.B, c toolctx.Context) {
		kv, err := Codec{}.AppendPairs(nil, c)
		if err != nil || len(kv) != 2*c.Len() {
			b.Fatalf("AppendPairs: %d strings for %d entries, error %v", len(kv), c.Len(), err)
		}
		for b.Loop() {
			_, _ = Codec{}.AppendPairs(kv[:0], c)
		}
	})
}
