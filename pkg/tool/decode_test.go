package tool

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

type decodePair struct {
	A int    `json:"a"`
	S string `json:"s"`
}

// TestPooledArgumentDecodersLeakNothing: decoders are pooled across calls; under -race,
// from many goroutines at once, each call decodes its own arguments and nothing of
// another's — not after a call that failed (an unknown field, a wrong type), not after
// arguments that are not one object.
func TestPooledArgumentDecodersLeakNothing(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				n := g*1000 + i
				switch i % 5 {
				case 0: // refused, mid-object
					var v decodePair
					if err := decodeArguments(fmt.Sprintf(`{"a":%d,"zz":1}`, n), &v); err == nil || !strings.Contains(err.Error(), "zz") {
						t.Errorf("an unknown field: %v", err)
					}
				case 1: // refused, a wrong type
					var v decodePair
					if err := decodeArguments(`{"a":"x"}`, &v); err == nil {
						t.Error("a string for an int was decoded")
					}
				case 2: // not an object: never pooled
					var v decodePair
					if err := decodeArguments(`[1]`, &v); err == nil {
						t.Error("an array was decoded into a struct")
					}
				default:
					var v decodePair
					in := fmt.Sprintf(`{"a":%d,"s":"call-%d-%s"}`, n, n, strings.Repeat("x", n%700))
					if err := decodeArguments(in, &v); err != nil || v.A != n || v.S != fmt.Sprintf("call-%d-%s", n, strings.Repeat("x", n%700)) {
						t.Errorf("call %d decoded %+v, %v", n, v, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkDecodeArguments(b *testing.B) {
	in := `{"a":12345,"s":"the second operand"}`
	b.ReportAllocs()
	for b.Loop() {
		var v decodePair
		if err := decodeArguments(in, &v); err != nil {
			b.Fatal(err)
		}
	}
}
