package orchestrator

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// TestReadAllKeepsTheBodysSize: what the gate keeps of a body for its call is the body's
// size, not its buffer's (a buffer doubled as a chunked body came kept 17 MiB of an 8 MiB
// body, and one of a known length was copied whole to read its end).
func TestReadAllKeepsTheBodysSize(t *testing.T) {
	const size = 8<<20 + 12345
	for _, length := range []int64{-1, size} {
		g := newBodyGate(64<<20, 16<<20, true)
		b := &gatedBody{g: g, ctx: context.Background(), body: io.NopCloser(bytes.NewReader(make([]byte, size))), rc: http.NewResponseController(httptest.NewRecorder()), left: g.limit, started: time.Now()}
		if length > 0 {
			b.left = length
		}
		data, err := b.readAll(length)
		if err != nil || len(data) != size || cap(data) > size+size/8 {
			t.Errorf("length %d: read %d bytes in a buffer of %d (%v); want %d in at most %d", length, len(data), cap(data), err, size, size+size/8)
		}
		b.done()
		if !g.sem.TryAcquire(g.total) {
			t.Errorf("length %d: the body kept its room after its call", length)
		}
	}
}

// TestRefuseOverHTTP2KeepsTheConnection: a refusal over HTTP/2 ends its stream, not the
// connection (Connection: close made net/http end every stream on it).
func TestRefuseOverHTTP2KeepsTheConnection(t *testing.T) {
	for _, major := range []int{1, 2} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.ProtoMajor = major
		w := httptest.NewRecorder()
		newBodyGate(1<<20, 1<<10, false).refuse(w, r, errBusy)
		if got, want := w.Header().Get("Connection"), map[int]string{1: "close", 2: ""}[major]; got != want || w.Code != http.StatusServiceUnavailable {
			t.Errorf("HTTP/%d: %d, Connection %q; want 503, %q", major, w.Code, got, want)
		}
	}
}
