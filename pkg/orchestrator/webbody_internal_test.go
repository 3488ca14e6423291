package orchestrator

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"golang.org/x/sync/semaphore"
)

// TestBoundedGzip: a message that decompresses to its bound is read whole; one byte more
// is refused, as it decompresses; what it decompressed counts against a shared budget
// until the decompressor is done with it.
func TestBoundedGzip(t *testing.T) {
	const limit = 1000
	for _, tc := range []struct {
		size    int
		refused bool
	}{{0, false}, {limit - 1, false}, {limit, false}, {limit + 1, true}, {100 * limit, true}} {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write([]byte(strings.Repeat("a", tc.size)))
		_ = zw.Close()
		budget := semaphore.NewWeighted(limit)
		d := newBoundedGzip(limit, budget)()
		for range 2 { // a decompressor is reused
			if err := d.Reset(bytes.NewReader(z.Bytes())); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(d)
			if refused := err != nil && strings.Contains(err.Error(), "decompresses to more than 1000 bytes"); refused != tc.refused || (!tc.refused && (err != nil || len(got) != tc.size)) {
				t.Errorf("%d bytes: read %d, %v; want refused %v", tc.size, len(got), err, tc.refused)
			}
			if !tc.refused {
				// Done with the message (a refused one, at once), the decompressor gives
				// back its room in the budget of them all.
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if !budget.TryAcquire(limit) {
				t.Fatalf("%d bytes: the decompressor kept its room after the message", tc.size)
			}
			budget.Release(limit)
		}
	}
}
