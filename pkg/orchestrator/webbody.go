package orchestrator

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"golang.org/x/sync/semaphore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The HTTP side of the port (and the MCP endpoint) read request bodies before the gRPC
// server's own bounds apply: the transcoder buffers a whole message, decompressed,
// before it hands it on. What they hold at once is bounded here the way the gRPC side
// bounds its messages: by a budget of server.max_inflight_receive_bytes (half of it on
// the port, whose bodies become calls of the gRPC server, which count against its own
// budget while they come: clients of gRPC keep the other half). A body counts for the
// bytes it has delivered, taken from the budget a chunk at a time as they come (a client
// that sends a byte now and then holds a chunk, not the largest body there may be), and
// for as long as its handler may still hold them: until the handler returns, or bodyHold
// after the body's end (a call that streams its answer for an hour does not hold its
// request for an hour). A body must keep coming (bodyIdle), be done within bodyTotal,
// and may not be larger than its bound. A request that waits for the budget longer than
// bodyWait is refused (503, Retry-After; a body that waits for its next chunk, its call
// UNAVAILABLE). A body compressed whole (Content-Encoding: gzip, as Connect's unary
// calls and REST send it) is decompressed here, so that its bound and the budget count
// what it decompresses to, as it decompresses.

// Bounds of the bodies of HTTP requests.
const (
	bodyWait  = 2 * time.Second
	bodyIdle  = 30 * time.Second
	bodyTotal = 2 * time.Minute
	bodyHold  = 10 * time.Second
	// bodyChunk is what a body takes from the budget at a time.
	bodyChunk = 32 << 10
)

// bodyGate is the budget of request bodies being read.
type bodyGate struct {
	sem   *semaphore.Weighted
	total int64
	// limit bounds one body; web says that the bodies are those of the transcoder's
	// calls: a unary call's compressed whole is decompressed here, and one of unknown
	// size read here.
	limit int64
	web   bool
}

func newBodyGate(budget, limit int64, web bool) *bodyGate {
	limit = min(limit, budget)
	return &bodyGate{sem: semaphore.NewWeighted(budget), total: budget, limit: limit, web: web}
}

// wrap bounds the bodies of next's requests.
func (g *bodyGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > g.limit {
			g.refuse(w, r, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request body is %d bytes, larger than the %d bytes the orchestrator takes", r.ContentLength, g.limit)))
			return
		}
		b := &gatedBody{g: g, ctx: r.Context(), body: r.Body, raw: r.Body, rc: http.NewResponseController(w), left: g.limit, started: time.Now()}
		unary := g.web && !streamed(r)
		if unary && r.Header.Get("Content-Encoding") == "gzip" && len(r.Header.Values("Content-Encoding")) == 1 {
			// The transcoder sees the body as it was before it was compressed.
			b.gunzip = true
			r.Header.Del("Content-Encoding")
		}
		// The first chunk is taken before the handler starts: a request refused for want
		// of room is told when to come back.
		first := int64(bodyChunk)
		if r.ContentLength > 0 && !b.gunzip {
			first = min(first, r.ContentLength+1)
		}
		if err := b.take(first); err != nil {
			if r.Context().Err() == nil {
				g.refuse(w, r, errBusy)
			}
			return
		}
		defer b.done()
		r.Body = b
		if unary && (r.ContentLength < 0 || b.gunzip) {
			// A unary call's body whose size is not known until its end is read here, as
			// the transcoder would read it, so that one past its bound, compressed
			// wrong, or too slow is answered as such (the transcoder answers any failure
			// to read a body UNAVAILABLE, which clients retry).
			data, err := io.ReadAll(b)
			if err != nil {
				if r.Context().Err() == nil {
					g.refuse(w, r, err)
				}
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(data)), int64(len(data))
			r.Header.Set("Content-Length", strconv.Itoa(len(data)))
		}
		next.ServeHTTP(w, r)
	})
}

// streamed reports whether r is a call whose request is a stream of messages (Connect's
// streams, gRPC-Web, gRPC), each compressed on its own; the others (Connect's unary
// calls, REST) send one message, compressed whole (Content-Encoding).
func streamed(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")
}

// errBusy is a body refused for want of room in the budget.
var errBusy = connect.NewError(connect.CodeUnavailable, errors.New("the orchestrator is receiving as many requests as it may at once; retry later"))

// refuse answers a request whose body the gate refused, as the transcoder answers an
// error: in Connect's form on Connect's paths (/package.Service/Method), in REST's
// (google.rpc.Status) on the others. A body too large is 413, a busy gate 503 with
// Retry-After; the connection is closed (what is left of the body is not read).
func (g *bodyGate) refuse(w http.ResponseWriter, r *http.Request, err error) {
	ce := new(connect.Error)
	switch {
	case errors.As(err, &ce):
	case errors.Is(err, os.ErrDeadlineExceeded):
		ce = connect.NewError(connect.CodeDeadlineExceeded, errors.New("the request body stopped coming"))
	default:
		ce = connect.NewError(connect.CodeCanceled, errors.New("the request body could not be read"))
	}
	status, ok := httpStatus[ce.Code()]
	if !ok {
		status = http.StatusInternalServerError
	}
	if ce.Code() == connect.CodeResourceExhausted {
		status = http.StatusRequestEntityTooLarge
	}
	if ce.Code() == connect.CodeUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	var body []byte
	if strings.HasPrefix(r.URL.Path, "/toolmesh.") {
		body, _ = json.Marshal(struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{ce.Code().String(), ce.Message()})
	} else {
		body, _ = json.Marshal(struct {
			Code    int      `json:"code"`
			Message string   `json:"message"`
			Details []string `json:"details"`
		}{int(ce.Code()), ce.Message(), []string{}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// httpStatus is the HTTP status of each code the gate answers with, as Connect maps it.
var httpStatus = map[connect.Code]int{
	connect.CodeInvalidArgument:  http.StatusBadRequest,
	connect.CodeDeadlineExceeded: http.StatusGatewayTimeout,
	connect.CodeUnavailable:      http.StatusServiceUnavailable,
	connect.CodeCanceled:         499,
}

// tooLarge is a body that went past its bound: RESOURCE_EXHAUSTED to the transcoder,
// and an *http.MaxBytesError (413) to the MCP endpoint's server.
type tooLarge struct{ limit int64 }

func (e tooLarge) Error() string {
	return fmt.Sprintf("the request body is larger than the %d bytes the orchestrator takes", e.limit)
}
func (e tooLarge) Unwrap() error { return &http.MaxBytesError{Limit: e.limit} }

func (g *bodyGate) tooLarge() error {
	return connect.NewError(connect.CodeResourceExhausted, tooLarge{g.limit})
}

// gatedBody is a body counted against the budget for what it delivered, until its
// handler returns, bodyHold after it is read to its end, or once it fails or is closed;
// until it ends, each read has a deadline.
type gatedBody struct {
	g   *bodyGate
	ctx context.Context
	// body is what Read reads: raw, or a gzip reader of it (gunzip) once the first read
	// has made it.
	body, raw io.ReadCloser
	gunzip    bool
	zr        *gzip.Reader
	rc        *http.ResponseController
	started   time.Time

	mu sync.Mutex
	// held is what the body took from the budget, room what of it is not delivered yet;
	// left is what the bound lets it deliver still.
	held, room, left int64
	ended, released  bool
	hold             *time.Timer
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
		return errors.New("the request body was closed")
	}
	b.held += n
	b.room += n
	return nil
}

func (b *gatedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	ended, room, left := b.ended, b.room, b.left
	b.mu.Unlock()
	if ended {
		return b.body.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if room == 0 {
		if err := b.take(min(int64(bodyChunk), left+1)); err != nil {
			b.finish(false)
			return 0, errBusy
		}
		room = min(int64(bodyChunk), left+1)
	}
	// A deadline the connection cannot take (not HTTP/1.1 nor HTTP/2) leaves the read
	// bounded by the budget's wait for others only.
	deadline := time.Now().Add(bodyIdle)
	if end := b.started.Add(bodyTotal); end.Before(deadline) {
		deadline = end
	}
	_ = b.rc.SetReadDeadline(deadline)
	// At most one byte past the bound: it tells a body too large from one that fits.
	p = p[:min(int64(len(p)), room, left+1)]
	n, err := b.read(p)
	if int64(n) > left {
		n, err = int(left), b.g.tooLarge()
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
		zr, err := gzip.NewReader(&boundedReader{r: b.raw, left: b.g.limit, err: b.g.tooLarge()})
		if err != nil {
			return 0, b.badGzip(err)
		}
		b.zr = zr
		b.body = readCloser{zr, b.raw}
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

// readCloser reads r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

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

func (b *gatedBody) Close() error {
	b.finish(false)
	return b.raw.Close()
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
// all of it, whatever its size: a body of a few hundred kilobytes took gigabytes).
type boundedGzip struct {
	zr    gzip.Reader
	limit int64
	left  int64
}

func newBoundedGzip(limit int64) func() connect.Decompressor {
	return func() connect.Decompressor { return &boundedGzip{limit: limit} }
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request decompresses to more than %d bytes, the most the orchestrator takes", d.limit))
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.zr.Read(p)
	d.left -= int64(n)
	if err == nil && d.left <= 0 {
		// Exactly the limit: only more data makes it too large.
		var one [1]byte
		if m, _ := d.zr.Read(one[:]); m > 0 {
			return n, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request decompresses to more than %d bytes, the most the orchestrator takes", d.limit))
		}
		return n, io.EOF
	}
	return n, err
}

func (d *boundedGzip) Close() error { return d.zr.Close() }

func (d *boundedGzip) Reset(r io.Reader) error {
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
func invalidRequest(field string, err error) error {
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
