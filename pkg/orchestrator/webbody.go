package orchestrator

import (
	"bytes"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"golang.org/x/sync/semaphore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The HTTP side of the port (and the MCP endpoint) read request bodies before the gRPC
// server's own bounds apply: the transcoder buffers a whole message, decompressed,
// before it hands it on. What they hold at once is bounded here the way the gRPC side
// bounds its messages: by a budget of server.max_inflight_receive_bytes (half of it on
// the port, whose bodies become calls of the gRPC server, which count against its own
// budget while they come: clients of gRPC keep the other half). A body counts for the
// bytes it has delivered, taken from the budget a chunk at a time as they come (a client
// that sends nothing, or a byte now and then, holds a small first chunk),
// and for as long as its handler may still hold them: until the handler returns, or
// bodyHold after the body's end (a call that streams its answer for an hour does not hold
// its request for an hour). A body must keep coming (bodyIdle), be done within
// bodyTotal, and may not be larger than its bound. Every body is read here whole before
// its handler starts (wrap): what is compressed is decompressed here, counted and bounded
// as it decompresses, and whatever goes wrong is answered here, in the request's
// protocol, with the status it deserves (the transcoder answers a body it fails to read
// UNAVAILABLE, which clients retry).

// Bounds of the bodies of HTTP requests.
const (
	bodyWait  = 2 * time.Second
	bodyIdle  = 30 * time.Second
	bodyTotal = 2 * time.Minute
	bodyHold  = 10 * time.Second
	// bodyChunk is what a body takes from the budget at a time, firstChunk at its first
	// read.
	bodyChunk  = 32 << 10
	firstChunk = 4 << 10
)

// bodyGate is the budget of request bodies being read.
type bodyGate struct {
	sem   *semaphore.Weighted
	total int64
	// limit bounds one body; web says that the bodies are those of the transcoder's
	// calls (decompressed here, refused in their protocols), not the MCP endpoint's.
	limit int64
	web   bool
}

func newBodyGate(budget, limit int64, web bool) *bodyGate {
	limit = min(limit, budget)
	return &bodyGate{sem: semaphore.NewWeighted(budget), total: budget, limit: limit, web: web}
}

// wrap bounds the bodies of next's requests. Every body is read here whole before next
// sees it (the transcoder and the MCP server read one whole anyway; over HTTP/1.1 a
// stream's request is whole before its answer starts: Connect and gRPC-Web stream
// answers only), so that one past its bound, malformed, compressed wrong, too slow, or
// waiting for room is answered as such (the transcoder answers any failure to read a body
// UNAVAILABLE, which clients retry; the MCP server 400). What is compressed
// (Content-Encoding: gzip on a unary call, gzip messages of a stream) is decompressed
// here, counted and bounded as it decompresses, and next is given what it decompressed
// to.
func (g *bodyGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			if g.web {
				// An empty body is an empty message, compressed or not (the gRPC server
				// fails to decompress nothing).
				r.Header.Del("Content-Encoding")
			}
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > g.limit {
			e := fmt.Errorf("the request body is %d bytes, larger than the %d bytes the orchestrator takes", r.ContentLength, g.limit)
			g.refuse(w, r, withDetails(connect.NewError(connect.CodeResourceExhausted, e),
				&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "body", Description: e.Error()}}}))
			return
		}
		b := &gatedBody{g: g, ctx: r.Context(), body: r.Body, rc: http.NewResponseController(w), left: g.limit, started: time.Now()}
		defer b.done()
		encoding, err := g.encoding(r)
		if err != nil {
			g.refuse(w, r, err)
			return
		}
		b.gunzip = encoding == "Content-Encoding"
		if r.ContentLength > 0 && !b.gunzip {
			b.left = r.ContentLength // net/http ends the body there
		}
		data, err := b.readAll(r.ContentLength)
		switch {
		case err != nil:
		case encoding != "" && !b.gunzip:
			data, err = b.decompressMessages(data, encoding)
		case g.web && streamed(r) && !strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/grpc-web-text"):
			err = checkFraming(data) // the transcoder took a torn one for an internal error (gRPC-Web's text form, base64, it does not serve)
		}
		if err != nil {
			g.refuse(w, r, err)
			return
		}
		if encoding != "" {
			r.Header.Del(encoding)
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(data)), int64(len(data))
		r.Header.Set("Content-Length", strconv.Itoa(len(data)))
		next.ServeHTTP(w, r)
	})
}

// encoding is the header that says r's body, or its messages, are compressed with gzip
// (the one compression taken), "" when they are not; another compression, or two, is an
// error.
func (g *bodyGate) encoding(r *http.Request) (string, error) {
	if !g.web || strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/grpc-web-text") {
		// gRPC-Web's text form (base64) the transcoder does not serve: it answers so.
		return "", nil
	}
	h := "Content-Encoding"
	if streamed(r) {
		h = messageEncoding(r)
	}
	switch v := r.Header.Values(h); {
	case len(v) == 0 || len(v) == 1 && strings.EqualFold(v[0], "identity"):
		return "", nil
	case len(v) == 1 && strings.EqualFold(v[0], "gzip"): // content codings are case-insensitive
		return h, nil
	default:
		return "", connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s %q is not taken: gzip or none", h, strings.Join(v, ", ")))
	}
}

// readAll reads the body to its end, into a buffer that grows as it comes (to its length
// at most, where that is known): memory follows what was delivered, not what was
// declared, and what is kept for the call is the body's size, not the buffer's.
func (b *gatedBody) readAll(length int64) ([]byte, error) {
	known := length > 0 && !b.gunzip
	size := int64(bodyChunk)
	if known {
		size = min(size, length)
	}
	data := make([]byte, 0, size)
	for {
		if len(data) == cap(data) {
			if known && int64(len(data)) == length {
				// All of it came: only its end may follow, read without growing it.
				var one [1]byte
				if n, err := b.Read(one[:]); n > 0 || !errors.Is(err, io.EOF) {
					return nil, cmp.Or(err, b.g.tooLarge())
				}
				return data, nil
			}
			grow := max(int64(len(data)), bodyChunk)
			if known {
				grow = min(grow, length-int64(len(data)))
			}
			data = slices.Grow(data, int(grow))
		}
		n, err := b.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			if cap(data)-len(data) > len(data)/8 {
				data = bytes.Clone(data) // the buffer's doubling is not kept for the call
			}
			return data, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// messageEncoding is the header that names the compression of the messages of r, a
// stream: Connect's or gRPC-Web's.
func messageEncoding(r *http.Request) string {
	if strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/connect+") {
		return "Connect-Content-Encoding"
	}
	return "Grpc-Encoding"
}

// checkFraming checks that a stream's request, read whole (wire), is whole messages.
func checkFraming(wire []byte) error {
	for len(wire) > 0 {
		if len(wire) < 5 {
			return invalidRequest("body", errors.New("the request body ends inside a message's header"))
		}
		n := binary.BigEndian.Uint32(wire[1:5])
		if int64(n) > int64(len(wire)-5) {
			return invalidRequest("body", errors.New("the request body ends inside a message"))
		}
		wire = wire[5+n:]
	}
	return nil
}

// decompressMessages decompresses the messages of a stream's request, read whole
// (wire), compressed as header h says. What they decompress to counts against the budget
// with the body, and is bounded as a body is, all messages together: a request of a few
// small messages each decompressing to the bound held many times the bound.
func (b *gatedBody) decompressMessages(wire []byte, h string) ([]byte, error) {
	var out []byte
	var zr gzip.Reader
	for len(wire) > 0 {
		if len(wire) < 5 {
			return nil, invalidRequest("body", errors.New("the request body ends inside a message's header"))
		}
		flags, n := wire[0], binary.BigEndian.Uint32(wire[1:5])
		if int64(n) > int64(len(wire)-5) {
			return nil, invalidRequest("body", errors.New("the request body ends inside a message"))
		}
		msg := wire[5 : 5+n]
		wire = wire[5+n:]
		if flags&1 == 0 {
			out = append(binary.BigEndian.AppendUint32(append(out, flags), n), msg...)
			continue
		}
		if err := zr.Reset(bytes.NewReader(msg)); err != nil {
			return nil, invalidRequest("body", fmt.Errorf("a message (%s: gzip) does not decompress: %w", h, err))
		}
		start := len(out)
		out = append(out, flags&^1, 0, 0, 0, 0)
		for {
			if int64(len(out)-5) > b.g.limit {
				return nil, b.g.tooLarge()
			}
			if b.fresh < int64(len(out))+bodyChunk {
				if err := b.take(bodyChunk); err != nil {
					return nil, errBusy
				}
				b.fresh += bodyChunk
			}
			if len(out) == cap(out) {
				out = slices.Grow(out, min(len(out), 4<<20)+bodyChunk)
			}
			m, err := zr.Read(out[len(out):min(cap(out), len(out)+bodyChunk)])
			out = out[:len(out)+m]
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, invalidRequest("body", fmt.Errorf("a message (%s: gzip) does not decompress: %w", h, err))
			}
		}
		size := len(out) - start - 5
		if int64(len(out)-5) > b.g.limit {
			return nil, b.g.tooLarge()
		}
		binary.BigEndian.PutUint32(out[start+1:], uint32(size))
	}
	return out, nil
}

// streamed reports whether r is a call whose request is a stream of messages (Connect's
// streams, gRPC-Web, gRPC), each compressed on its own; the others (Connect's unary
// calls, REST) send one message, compressed whole (Content-Encoding).
func streamed(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")
}

// errBusy is a body refused for want of room in the budget: retry in a second.
var errBusy = withDetails(connect.NewError(connect.CodeUnavailable, errors.New("the orchestrator is receiving as many requests as it may at once; retry later")),
	&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})

// withDetails adds details to ce and returns it.
func withDetails(ce *connect.Error, details ...proto.Message) *connect.Error {
	for _, m := range details {
		if d, err := connect.NewErrorDetail(m); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// refuse answers a request whose body the gate refused, in the request's protocol
// (writeWebError). A body too large is 413, a busy gate 503 with Retry-After (HTTP 200
// for the streams, as their protocols have it); the connection is closed (what is left of
// the body is not read). The MCP endpoint's server answers in text.
func (g *bodyGate) refuse(w http.ResponseWriter, r *http.Request, err error) {
	ce := refusal(r, err)
	if r.ProtoMajor == 1 {
		// What is left of the body is not read. (Over HTTP/2 the stream ends alone; the
		// header would end the connection, every other stream on it too.)
		w.Header().Set("Connection", "close")
	}
	if ce.Code() == connect.CodeUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	status, ok := httpStatus[ce.Code()]
	if !ok {
		status = http.StatusInternalServerError
	}
	if !g.web {
		http.Error(w, ce.Message(), status)
		return
	}
	writeWebError(w, r, ce, status)
}

// writeWebError answers r with ce as the transcoder answers an error, in the request's
// protocol: gRPC-Web in headers (grpc-status), Connect's streams as their end of stream
// (both HTTP 200), Connect's unary calls (/package.Service/Method) as their error JSON,
// REST as a google.rpc.Status in JSON, with the HTTP status given.
func writeWebError(w http.ResponseWriter, r *http.Request, ce *connect.Error, status int) {
	h := w.Header()
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "application/grpc"):
		h.Set("Content-Type", r.Header.Get("Content-Type"))
		h.Set("Grpc-Status", strconv.Itoa(int(ce.Code())))
		h.Set("Grpc-Message", url.PathEscape(ce.Message()))
		if len(ce.Details()) > 0 {
			if b, err := proto.Marshal(statusOf(ce)); err == nil {
				h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
			}
		}
		w.WriteHeader(http.StatusOK)
		return
	case strings.HasPrefix(ct, "application/connect+"):
		end, _ := json.Marshal(struct {
			Error connectError `json:"error"`
		}{connectErrorOf(ce)})
		h.Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(binary.BigEndian.AppendUint32([]byte{2}, uint32(len(end))))
		_, _ = w.Write(end)
		return
	}
	if restCall(r) {
		writeRESTErrorWith(w, ce, status)
		return
	}
	body, _ := json.Marshal(connectErrorOf(ce))
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeRESTError answers a REST request with ce as the transcoder answers an error: a
// google.rpc.Status in JSON, its details included, with the HTTP status of its code.
func writeRESTError(w http.ResponseWriter, ce *connect.Error) {
	status, ok := httpStatus[ce.Code()]
	if !ok {
		status = http.StatusInternalServerError
	}
	writeRESTErrorWith(w, ce, status)
}

// writeRESTErrorWith is writeRESTError with the HTTP status given.
func writeRESTErrorWith(w http.ResponseWriter, ce *connect.Error, status int) {
	body, err := protojson.Marshal(statusOf(ce))
	if err != nil {
		body, _ = json.Marshal(struct {
			Code    int      `json:"code"`
			Message string   `json:"message"`
			Details []string `json:"details"`
		}{int(ce.Code()), ce.Message(), []string{}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// statusOf is ce as a google.rpc.Status, details included: REST's error body, and
// gRPC-Web's grpc-status-details-bin.
func statusOf(ce *connect.Error) *spb.Status {
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return st
}

// connectError is the Connect protocol's error JSON.
type connectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details []connectDetail `json:"details,omitempty"`
}

type connectDetail struct {
	Type  string `json:"type"`
	Value string `json:"value"` // the detail's protobuf encoding, in base64
}

func connectErrorOf(ce *connect.Error) connectError {
	e := connectError{Code: ce.Code().String(), Message: ce.Message()}
	for _, d := range ce.Details() {
		e.Details = append(e.Details, connectDetail{Type: d.Type(), Value: base64.RawStdEncoding.EncodeToString(d.Bytes())})
	}
	return e
}

// refusal is the error a request is refused with for err, met reading its body.
func refusal(r *http.Request, err error) *connect.Error {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// As over gRPC, where a request that does not arrive in time is REQUEST_TIMEOUT,
		// retried after a second.
		return withDetails(connect.NewError(connect.CodeDeadlineExceeded, errors.New("the request body stopped coming")),
			&errdetails.ErrorInfo{Domain: "toolmesh.dev", Reason: "REQUEST_TIMEOUT"}, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	case r.Context().Err() != nil || errors.Is(err, io.ErrUnexpectedEOF):
		return connect.NewError(connect.CodeCanceled, errors.New("the request body ended before its end"))
	}
	return invalidRequest("body", fmt.Errorf("the request body could not be read: %w", err))
}

// httpStatus is the HTTP status of each code the gate answers with, as Connect maps it
// (but RESOURCE_EXHAUSTED, which is the body's size here: 413).
var httpStatus = map[connect.Code]int{
	connect.CodeInvalidArgument:   http.StatusBadRequest,
	connect.CodeDeadlineExceeded:  http.StatusGatewayTimeout,
	connect.CodeUnavailable:       http.StatusServiceUnavailable,
	connect.CodeCanceled:          499,
	connect.CodeUnimplemented:     http.StatusUnsupportedMediaType,
	connect.CodeResourceExhausted: http.StatusRequestEntityTooLarge,
}

// tooLarge is a body that went past its bound: RESOURCE_EXHAUSTED to the transcoder,
// and an *http.MaxBytesError (413) to the MCP endpoint's server.
type tooLarge struct{ limit int64 }

func (e tooLarge) Error() string {
	return fmt.Sprintf("the request body is larger than the %d bytes the orchestrator takes", e.limit)
}
func (e tooLarge) Unwrap() error { return &http.MaxBytesError{Limit: e.limit} }

func (g *bodyGate) tooLarge() error {
	e := tooLarge{g.limit}
	return withDetails(connect.NewError(connect.CodeResourceExhausted, e),
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "body", Description: e.Error()}}})
}

// gatedBody is a body being read by wrap, counted against the budget for what it
// delivered, until its handler returns, bodyHold after it is read to its end, or once it
// fails; until it ends, each read has a deadline.
type gatedBody struct {
	g   *bodyGate
	ctx context.Context
	// body is the request's; zr reads it where it is compressed whole (gunzip), made at
	// the first read.
	body    io.Reader
	gunzip  bool
	zr      *gzip.Reader
	rc      *http.ResponseController
	started time.Time

	mu sync.Mutex
	// held is what the body took from the budget, room what of it is not delivered yet;
	// left is what the bound lets it deliver still.
	held, room, left int64
	// fresh is what decompressMessages took for what it decompressed.
	fresh           int64
	ended, released bool
	hold            *time.Timer
}

// take takes n more from the budget for the body, waiting bodyWait at most.
func (b *gatedBody) take(n int64) error {
	ctx, cancel := context.WithTimeout(b.ctx, bodyWait)
	err := b.g.sem.Acquire(ctx, n)
	cancel()
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		b.g.sem.Release(n)
		return errors.New("the request body's room was given back")
	}
	b.held += n
	b.room += n
	return nil
}

func (b *gatedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	ended, room, left, held := b.ended, b.room, b.left, b.held
	b.mu.Unlock()
	if ended {
		return 0, io.EOF // read to its end, or failed: readAll reads no more
	}
	if len(p) == 0 {
		return 0, nil
	}
	if room == 0 && left > 0 {
		// A body takes its room a chunk at a time as it comes, the first one small: a
		// connection that sends nothing, or a byte now and then, holds 4 KiB (it takes
		// thousands of them to fill the budget, not hundreds).
		chunk := int64(bodyChunk)
		if held == 0 {
			chunk = firstChunk
		}
		chunk = min(chunk, left)
		if err := b.take(chunk); err != nil {
			b.finish(false)
			return 0, errBusy
		}
		room = chunk
	}
	// A deadline the connection cannot take (not HTTP/1.1 nor HTTP/2) leaves the read
	// bounded by the budget's wait for others only.
	deadline := time.Now().Add(bodyIdle)
	if end := b.started.Add(bodyTotal); end.Before(deadline) {
		deadline = end
	}
	_ = b.rc.SetReadDeadline(deadline)
	var n int
	var err error
	if left == 0 {
		// The bound reached: only the body's end may come (a byte more is a body too
		// large), and it takes nothing from the budget.
		var one [1]byte
		if n, err = b.read(one[:]); n > 0 {
			n, err = 0, b.g.tooLarge()
		}
	} else {
		n, err = b.read(p[:min(int64(len(p)), room)])
	}
	b.mu.Lock()
	b.left -= int64(n)
	b.room -= int64(n)
	b.mu.Unlock()
	if err != nil {
		b.finish(errors.Is(err, io.EOF))
	}
	return n, err
}

// read reads the body, through gzip where it is compressed whole; the compressed bytes
// are bounded as well (many empty gzip members decompress to nothing).
func (b *gatedBody) read(p []byte) (int, error) {
	if !b.gunzip {
		return b.body.Read(p)
	}
	if b.zr == nil {
		zr, err := gzip.NewReader(&boundedReader{r: b.body, left: b.g.limit, err: b.g.tooLarge()})
		if errors.Is(err, io.EOF) {
			return 0, io.EOF // an empty body: an empty message, as the Connect protocol has it
		}
		if err != nil {
			return 0, b.badGzip(err)
		}
		b.zr = zr
	}
	n, err := b.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.badGzip(err)
	}
	return n, err
}

// badGzip is a body that does not decompress: the client's error, not one of reading it.
func (b *gatedBody) badGzip(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.EOF) {
		return invalidRequest("body", fmt.Errorf("the request body (Content-Encoding: gzip) does not decompress: %w", err))
	}
	var fe flate.CorruptInputError
	if errors.As(err, &fe) {
		return invalidRequest("body", fmt.Errorf("the request body (Content-Encoding: gzip) does not decompress: %w", err))
	}
	return err
}

// boundedReader reads at most left bytes of r, then fails with err.
type boundedReader struct {
	r    io.Reader
	left int64
	err  error
}

func (r *boundedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		var one [1]byte
		if n, err := r.r.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, r.err
	}
	p = p[:min(int64(len(p)), r.left)]
	n, err := r.r.Read(p)
	r.left -= int64(n)
	return n, err
}

// done is for a handler that returned: what it held of the body is given back.
func (b *gatedBody) done() {
	b.finish(false)
	b.giveBack()
}

// finish ends the body's reading, once. A body read to its end lifts its read deadline
// (a streaming response's wait for the client to go has none), and is held for bodyHold
// at most; one that failed or was left keeps it, so that what reads the rest (net/http
// discards some of it before the connection's next request) is bounded as well, and the
// connection is closed, and gives its room back.
func (b *gatedBody) finish(read bool) {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return
	}
	b.ended = true
	if read {
		b.hold = time.AfterFunc(bodyHold, b.giveBack)
	}
	b.mu.Unlock()
	if read {
		_ = b.rc.SetReadDeadline(time.Time{})
		return
	}
	b.giveBack()
}

// giveBack returns what the body took from the budget, once.
func (b *gatedBody) giveBack() {
	b.mu.Lock()
	n := b.held
	if b.released {
		n = 0
	}
	b.released, b.held, b.room = true, 0, 0
	if b.hold != nil {
		b.hold.Stop()
	}
	b.mu.Unlock()
	if n > 0 {
		b.g.sem.Release(n)
	}
}

// boundedGzip is the transcoder's gzip decompressor (of the messages of Connect's streams
// and gRPC-Web, each compressed on its own, and of the gRPC server's answers to them),
// which refuses a message once it decompresses to more than limit bytes (its own reads
// all of it, whatever its size: a body of a few hundred kilobytes took gigabytes), and
// counts what it decompressed against a budget shared by all of them, until it is done
// with the message.
type boundedGzip struct {
	zr    gzip.Reader
	limit int64
	left  int64
	// budget is shared, held what this one took of it and has not given back.
	budget *semaphore.Weighted
	held   int64
}

func newBoundedGzip(limit int64, budget *semaphore.Weighted) func() connect.Decompressor {
	return func() connect.Decompressor { return &boundedGzip{limit: limit, budget: budget} }
}

func (d *boundedGzip) tooLarge() error {
	d.release()
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the message decompresses to more than %d bytes, the most the orchestrator takes", d.limit))
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, d.tooLarge()
	}
	used := d.limit - d.left
	if d.held <= used {
		n := min(int64(bodyChunk), d.left)
		ctx, cancel := context.WithTimeout(context.Background(), bodyWait)
		err := d.budget.Acquire(ctx, n)
		cancel()
		if err != nil {
			d.release()
			return 0, errBusy
		}
		d.held += n
	}
	p = p[:min(int64(len(p)), d.held-used)]
	n, err := d.zr.Read(p)
	d.left -= int64(n)
	if err == nil && d.left <= 0 {
		// Exactly the limit: only more data makes it too large.
		var one [1]byte
		if m, _ := d.zr.Read(one[:]); m > 0 {
			return n, d.tooLarge()
		}
		return n, io.EOF
	}
	if err != nil && !errors.Is(err, io.EOF) {
		d.release()
	}
	return n, err
}

// release gives back what the decompressor holds of the budget.
func (d *boundedGzip) release() {
	if d.held > 0 {
		d.budget.Release(d.held)
		d.held = 0
	}
}

func (d *boundedGzip) Close() error {
	d.release()
	return d.zr.Close()
}

func (d *boundedGzip) Reset(r io.Reader) error {
	d.release()
	d.left = d.limit
	return d.zr.Reset(r)
}

// strictJSON is the transcoder's JSON codec. A request body (or a REST query parameter)
// that does not decode is the client's error, answered INVALID_ARGUMENT with the reason
// INVALID_REQUEST and what is wrong (the transcoder's own codec answered 500 unknown:
// malformed JSON, a value of the wrong type, text that is not UTF-8); and a field or an
// enum value the API does not have is refused rather than dropped (a ListRuns whose state
// filter was misspelt listed every run).
type strictJSON struct{ vanguard.JSONCodec }

func newStrictJSON(res vanguard.TypeResolver) vanguard.Codec {
	return strictJSON{vanguard.JSONCodec{
		MarshalOptions:   protojson.MarshalOptions{Resolver: res, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{Resolver: res},
	}}
}

func (c strictJSON) Unmarshal(data []byte, msg proto.Message) error {
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return invalidRequest("body", fmt.Errorf("the request is not a %s in JSON: %w", msg.ProtoReflect().Descriptor().Name(), err))
	}
	return nil
}

func (c strictJSON) UnmarshalField(data []byte, msg proto.Message, field protoreflect.FieldDescriptor) error {
	if err := c.JSONCodec.UnmarshalField(data, msg, field); err != nil {
		return invalidRequest(field.JSONName(), fmt.Errorf("%s: %w", field.JSONName(), err))
	}
	return nil
}

// invalidRequest is a request the transcoder could not read, as a toolmesh handler
// answers a bad request: INVALID_ARGUMENT, ErrorInfo with the reason and the field,
// BadRequest naming it.
func invalidRequest(field string, err error) *connect.Error {
	ce := connect.NewError(connect.CodeInvalidArgument, err)
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: "toolmesh.dev", Reason: "INVALID_REQUEST", Metadata: map[string]string{"field": field}}); derr == nil {
		ce.AddDetail(d)
	}
	if d, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: err.Error()}}}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// mediaTypes writes a request's Content-Type the one way the transcoder reads it: a type
// in capitals, or with the charset UTF-8 (application/json;charset=UTF-8, as Spring,
// axios and jQuery send it; what JSON always is), was refused as unsupported (415).
func mediaTypes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, params, err := mime.ParseMediaType(ct); err == nil {
				if strings.EqualFold(params["charset"], "utf-8") {
					delete(params, "charset")
				}
				if v := mime.FormatMediaType(mt, params); v != "" && v != ct {
					r.Header.Set("Content-Type", v)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
