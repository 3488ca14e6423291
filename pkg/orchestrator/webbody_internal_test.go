package orchestrator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
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

// TestRefusalsCarryTheirDetails: a refused body's error has the same details in every
// protocol, as the transcoder's errors do: REST's google.rpc.Status, Connect's error
// JSON (unary, and a stream's end), gRPC-Web's grpc-status-details-bin. They had the
// code and message alone.
func TestRefusalsCarryTheirDetails(t *testing.T) {
	g := newBodyGate(1<<20, 1<<10, true)
	for _, tc := range []struct {
		name string
		err  error
		want proto.Message // one of the details, as it must come back
	}{
		{"busy", errBusy, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}},
		{"too large", g.tooLarge(), &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "body", Description: "the request body is larger than the 1024 bytes the orchestrator takes"}}}},
		{"stopped coming", os.ErrDeadlineExceeded, &errdetails.ErrorInfo{Domain: "toolmesh.dev", Reason: "REQUEST_TIMEOUT"}},
	} {
		for _, p := range []struct{ path, contentType string }{
			{"/v1/runs/x:cancel", "application/json"},
			{"/toolmesh.v1.OrchestratorService/CancelRun", "application/json"},
			{"/toolmesh.v1.OrchestratorService/Run", "application/connect+json"},
			{"/toolmesh.v1.OrchestratorService/Run", "application/grpc-web+proto"},
		} {
			r := httptest.NewRequest(http.MethodPost, p.path, nil)
			r.Header.Set("Content-Type", p.contentType)
			w := httptest.NewRecorder()
			g.refuse(w, r, tc.err)
			details, err := refusalDetails(w, p.contentType, strings.HasPrefix(p.path, "/v1/"))
			if err != nil {
				t.Errorf("%s over %s %s: %v (HTTP %d, %s)", tc.name, p.path, p.contentType, err, w.Code, w.Body)
				continue
			}
			if !slices.ContainsFunc(details, func(m proto.Message) bool { return proto.Equal(m, tc.want) }) {
				t.Errorf("%s over %s %s: details %v, want %v among them", tc.name, p.path, p.contentType, details, tc.want)
			}
		}
	}
}

// refusalDetails reads the details of a refusal as a client of its protocol does.
func refusalDetails(w *httptest.ResponseRecorder, contentType string, rest bool) ([]proto.Message, error) {
	fromAnys := func(anys []*anypb.Any) ([]proto.Message, error) {
		var out []proto.Message
		for _, a := range anys {
			m, err := a.UnmarshalNew()
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	fromConnect := func(b []byte) ([]proto.Message, error) {
		var e struct {
			Details []struct{ Type, Value string }
		}
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, err
		}
		var anys []*anypb.Any
		for _, d := range e.Details {
			v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
			if err != nil {
				return nil, err
			}
			anys = append(anys, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: v})
		}
		return fromAnys(anys)
	}
	switch {
	case rest:
		st := &spb.Status{}
		if err := protojson.Unmarshal(w.Body.Bytes(), st); err != nil {
			return nil, err
		}
		return fromAnys(st.GetDetails())
	case strings.HasPrefix(contentType, "application/grpc-web"):
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(w.Header().Get("Grpc-Status-Details-Bin"), "="))
		if err != nil {
			return nil, err
		}
		st := &spb.Status{}
		if err := proto.Unmarshal(b, st); err != nil {
			return nil, err
		}
		return fromAnys(st.GetDetails())
	case strings.HasPrefix(contentType, "application/connect+"):
		body := w.Body.Bytes()
		if len(body) < 5 || body[0] != 2 {
			return nil, errors.New("no end-of-stream message")
		}
		var end struct{ Error json.RawMessage }
		if err := json.Unmarshal(body[5:], &end); err != nil {
			return nil, err
		}
		return fromConnect(end.Error)
	}
	return fromConnect(w.Body.Bytes())
}

// TestGateStreamBodies: a stream's request whose messages decompress past the body's
// bound together is refused, as one message past it is (three small messages of 60% of
// the bound each held 1.8 bounds of the budget); a torn message, compressed or not, is a
// bad request naming the body (the transcoder took an uncompressed one for an internal
// error); and the coding's name is case-insensitive (GZIP was refused as unsupported).
func TestGateStreamBodies(t *testing.T) {
	const limit = 1 << 10
	gz := func(n int) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(bytes.Repeat([]byte("a"), n))
		_ = zw.Close()
		return z.Bytes()
	}
	envelope := func(flags byte, msg []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flags}, uint32(len(msg))), msg...)
	}
	three := append(append(envelope(1, gz(limit*6/10)), envelope(1, gz(limit*6/10))...), envelope(1, gz(limit*6/10))...)
	for _, tc := range []struct {
		name, contentType string
		header            map[string]string
		body              []byte
		refusal           string // "": reaches the transcoder; else the code it is refused with
	}{
		{"messages past the bound together", "application/grpc-web+proto", map[string]string{"Grpc-Encoding": "gzip"}, three, "8"},
		{"one message within it", "application/connect+json", map[string]string{"Connect-Content-Encoding": "gzip"}, envelope(1, gz(limit/2)), ""},
		{"a torn message", "application/connect+json", nil, []byte("\x00\x00\x00\x00\x64{\"prompt\":\"hi\"}"), "invalid_argument"},
		{"a torn header", "application/grpc-web+proto", nil, []byte("\x00\x00\x00"), "3"},
		{"whole messages", "application/connect+json", nil, envelope(0, []byte(`{"prompt":"hi"}`)), ""},
		{"GZIP", "application/json", map[string]string{"Content-Encoding": "GZIP"}, gz(10), ""},
		{"gRPC-Web's text form", "application/grpc-web-text", nil, []byte("AAAAAAZ"), ""}, // base64: the transcoder's to refuse
	} {
		reached := false
		var got []byte
		h := newBodyGate(8<<20, limit, true).wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			reached = true
			got, _ = io.ReadAll(r.Body)
		}))
		r := httptest.NewRequest(http.MethodPost, "/toolmesh.v1.OrchestratorService/Run", bytes.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.contentType)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		code := w.Header().Get("Grpc-Status") // gRPC-Web's
		if strings.HasPrefix(tc.contentType, "application/connect+") && strings.Contains(w.Body.String(), `"code":"invalid_argument"`) {
			code = "invalid_argument"
		}
		switch {
		case tc.refusal == "" && !reached:
			t.Errorf("%s: refused (HTTP %d, %v, %s); want it to reach the transcoder", tc.name, w.Code, w.Header(), w.Body)
		case tc.refusal != "" && (reached || code != tc.refusal):
			t.Errorf("%s: reached the transcoder %v, refused with %q (%v %s); want refused with %s", tc.name, reached, code, w.Header(), w.Body, tc.refusal)
		case tc.name == "GZIP" && string(got) != strings.Repeat("a", 10):
			t.Errorf("GZIP: the transcoder read %q, want the body decompressed", got)
		}
	}
}

// A body whose Content-Length is past the bound is refused with the BadRequest naming
// body that a body found past it as it comes has.
func TestRefusalByLengthCarriesItsDetails(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/runs/x:cancel", bytes.NewReader(make([]byte, 2048)))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	newBodyGate(8<<20, 1<<10, true).wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), `"field":"body"`) {
		t.Errorf("HTTP %d %s; want 413 with a BadRequest naming body", w.Code, w.Body)
	}
}
