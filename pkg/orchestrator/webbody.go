package orchestrator

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
// before it hands it on. What they read at once is bounded here the way the gRPC side
// bounds its messages: by a budget of server.max_inflight_receive_bytes (half of it on
// the port, whose bodies become calls of the gRPC server, which count against its own
// budget while they come: clients of gRPC keep the other half), each body
// counted at its declared length (at the largest a body may be when it declares none),
// taken for as long as the body is being read; a body must keep coming (bodyIdle) and
// be done within bodyTotal, and may not be larger than its bound. A request that waits
// for the budget longer than bodyWait is refused (503, Retry-After). A compressed body
// is refused once it decompresses to more than its bound, as it decompresses.

// Bounds of the bodies of HTTP requests.
const (
	bodyWait  = 2 * time.Second
	bodyIdle  = 30 * time.Second
	bodyTotal = 2 * time.Minute
)

// bodyGate is the budget of request bodies being read.
type bodyGate struct {
	sem   *semaphore.Weighted
	total int64
	// limit bounds one body.
	limit int64
}

func newBodyGate(budget, limit int64) *bodyGate {
	limit = min(limit, budget)
	return &bodyGate{sem: semaphore.NewWeighted(budget), total: budget, limit: limit}
}

// wrap bounds the bodies of next's requests.
func (g *bodyGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > g.limit {
			http.Error(w, fmt.Sprintf("the request body is %d bytes, larger than the %d bytes the orchestrator takes", r.ContentLength, g.limit), http.StatusRequestEntityTooLarge)
			return
		}
		weight := g.limit
		if r.ContentLength > 0 {
			weight = r.ContentLength
		}
		ctx, cancel := context.WithTimeout(r.Context(), bodyWait)
		err := g.sem.Acquire(ctx, weight)
		cancel()
		if err != nil {
			if r.Context().Err() == nil {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "the orchestrator is receiving as many requests as it may at once; retry later", http.StatusServiceUnavailable)
			}
			return
		}
		b := &gatedBody{body: r.Body, rc: http.NewResponseController(w), left: g.limit, started: time.Now()}
		b.release = func() { g.sem.Release(weight) }
		defer b.done()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// errBodyTooLarge is a body that went past its bound.
var errBodyTooLarge = errors.New("the request body is larger than the orchestrator takes")

// gatedBody is a body counted against the budget until it is read to its end, fails,
// is closed, or its handler returns; until then each read has a deadline.
type gatedBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	left    int64
	started time.Time
	release func()
	once    sync.Once
	mu      sync.Mutex
	ended   bool
}

func (b *gatedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	ended := b.ended
	b.mu.Unlock()
	if ended {
		return b.body.Read(p)
	}
	if b.left <= 0 {
		b.finish(false)
		return 0, errBodyTooLarge
	}
	// A deadline the connection cannot take (not HTTP/1.1 nor HTTP/2) leaves the read
	// bounded by the budget's wait for others only.
	deadline := time.Now().Add(bodyIdle)
	if end := b.started.Add(bodyTotal); end.Before(deadline) {
		deadline = end
	}
	_ = b.rc.SetReadDeadline(deadline)
	if int64(len(p)) > b.left {
		p = p[:b.left+1] // one byte past the bound tells a body too large from one that fits
	}
	n, err := b.body.Read(p)
	if int64(n) > b.left {
		n, err = int(b.left), errBodyTooLarge
	}
	b.left -= int64(n)
	if err != nil {
		b.finish(errors.Is(err, io.EOF))
	}
	return n, err
}

func (b *gatedBody) Close() error {
	b.finish(false)
	return b.body.Close()
}

// done is finish for a handler that returned.
func (b *gatedBody) done() { b.finish(false) }

// finish gives the body's room back, once. A body read to its end lifts its read deadline
// (a streaming response's wait for the client to go has none); one that failed or was
// left keeps it, so that what reads the rest (net/http discards some of it before the
// connection's next request) is bounded as well, and the connection is closed.
func (b *gatedBody) finish(read bool) {
	b.once.Do(func() {
		b.mu.Lock()
		b.ended = true
		b.mu.Unlock()
		if read {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		b.release()
	})
}

// boundedGzip is the transcoder's gzip decompressor, which refuses a body once it
// decompresses to more than limit bytes (its own reads all of it, whatever its size:
// a body of a few hundred kilobytes took gigabytes).
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
