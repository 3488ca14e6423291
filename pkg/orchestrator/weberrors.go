package orchestrator

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// protocolErrors has every error of the HTTP API answered in the request's protocol, as
// the API's own errors are (writeWebError), with a status a client can act on.
//
// The transcoder answers a request it cannot route or read in plain text, whatever its
// protocol: an unknown path (404), a method the path does not take (405), a body type it
// does not know (415), headers it cannot read (400, a bad Connect-Timeout-Ms answered with
// Go's own parse error). A REST or Connect client then found no error JSON to read, and a
// gRPC-Web client no grpc-status. Such answers are written again here: 404 NOT_FOUND for
// a REST path (UNIMPLEMENTED for a method of a Connect or gRPC-Web call), 405 and 415
// UNIMPLEMENTED (405 keeping its Allow), 400 INVALID_ARGUMENT naming the header.
//
// And a message larger than server.max_receive_bytes, which the gRPC server refuses as
// RESOURCE_EXHAUSTED, reached REST and Connect clients as a 429, which they retry as if
// the orchestrator were busy: it is a 413, with a BadRequest naming the body, as the
// body gate answers a body past its bound.
func protocolErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What the transcoder answers depends on the request as it came, which it
		// changes (a REST call's path becomes its method's, its Content-Type may go).
		asSent := &http.Request{Method: r.Method, URL: &url.URL{Path: r.URL.Path}, Header: http.Header{}}
		for _, h := range []string{"Content-Type", "Connect-Protocol-Version"} {
			if v := r.Header.Get(h); v != "" {
				asSent.Header.Set(h, v)
			}
		}
		if r.URL.Query().Get("connect") != "" {
			asSent.Header.Set("Connect-Protocol-Version", "1") // a Connect GET says so in its query
		}
		// A binary header the gRPC server cannot decode was an internal error ("unexpected
		// HTTP error: 400"): it is the client's, and named.
		if name, ok := badBinaryHeader(r.Header); !ok {
			e := fmt.Errorf("%s: a header whose name ends in -Bin holds base64, and this one does not decode", name)
			writeWebError(w, asSent, invalidRequest(name, e), http.StatusBadRequest)
			return
		}
		// The transcoder reads the header of Connect's calls alone (and answered a bad
		// one with Go's parse error).
		if v := r.Header.Get("Connect-Timeout-Ms"); v != "" && connectCall(asSent) && !connectTimeout(v) {
			e := fmt.Errorf("Connect-Timeout-Ms: must be a whole number of milliseconds of 1 to 10 digits, got %q", v)
			writeWebError(w, asSent, invalidRequest("Connect-Timeout-Ms", e), http.StatusBadRequest)
			return
		}
		ew := &errorWriter{ResponseWriter: w, r: asSent}
		next.ServeHTTP(ew, r)
		ew.finish()
	})
}

// connectCall reports whether r is a call of the Connect protocol: a stream, or a unary
// call of the API's or naming the protocol's version.
func connectCall(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/connect+") ||
		(!strings.HasPrefix(ct, "application/grpc") && (strings.HasPrefix(r.URL.Path, "/toolmesh.") || r.Header.Get("Connect-Protocol-Version") != ""))
}

// badBinaryHeader is the first header of h whose name ends in -Bin (binary metadata)
// and whose value is not base64 as gRPC reads it (padded or not); ok when there is none.
func badBinaryHeader(h http.Header) (name string, ok bool) {
	for k, vs := range h {
		if !strings.HasSuffix(strings.ToLower(k), "-bin") {
			continue
		}
		for _, v := range vs {
			enc := base64.RawStdEncoding
			if len(v)%4 == 0 {
				enc = base64.StdEncoding
			}
			if _, err := enc.DecodeString(v); err != nil {
				return k, false
			}
		}
	}
	return "", true
}

// restCall reports whether r, a call that is no stream, is a REST one: not one of
// Connect's unary calls, which name a method of a service or the protocol's version.
func restCall(r *http.Request) bool {
	return !strings.HasPrefix(r.URL.Path, "/toolmesh.") && r.Header.Get("Connect-Protocol-Version") == ""
}

// connectTimeout reports whether v is a timeout as Connect's protocol writes it.
func connectTimeout(v string) bool {
	if len(v) > 10 {
		return false
	}
	for i := range len(v) {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// maxErrorBody bounds the error body an errorWriter holds to write again: the
// transcoder's text is a line, an error JSON a few hundred bytes.
const maxErrorBody = 64 << 10

// errorWriter passes a response through, but for an error it writes again: it holds its
// body instead, until finish.
type errorWriter struct {
	http.ResponseWriter
	// r is the request as it came: its method, path and Content-Type.
	r *http.Request
	// held is the error being held: its status, and whether it is the transcoder's text
	// (plain) or a JSON error of RESOURCE_EXHAUSTED that may be the gRPC server's refusal
	// of a large message.
	held   bool
	plain  bool
	status int
	body   bytes.Buffer
	// over is set once the held body went past maxErrorBody: it is then passed through.
	over bool
	// sent: a status was passed through (or is held): a later one is not written.
	sent bool
}

func (ew *errorWriter) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		ew.ResponseWriter.WriteHeader(status) // informational: more follows
		return
	}
	if ew.sent {
		return
	}
	ew.sent = true
	if status >= 400 {
		h := ew.Header()
		ct := h.Get("Content-Type")
		switch {
		case ct == "text/plain; charset=utf-8" && h.Get("X-Content-Type-Options") == "nosniff":
			ew.held, ew.plain, ew.status = true, true, status // http.Error's
			return
		case status == http.StatusTooManyRequests && ct == "application/json":
			ew.held, ew.status = true, status
			return
		}
	}
	ew.ResponseWriter.WriteHeader(status)
}

func (ew *errorWriter) Write(p []byte) (int, error) {
	if !ew.held || ew.over {
		ew.sent = true // a Write sends 200 when nothing was written
		return ew.ResponseWriter.Write(p)
	}
	if ew.body.Len()+len(p) > maxErrorBody {
		// Not an error of the kind written again: let it through as it came.
		ew.over = true
		ew.ResponseWriter.WriteHeader(ew.status)
		if _, err := ew.ResponseWriter.Write(ew.body.Bytes()); err != nil {
			return 0, err
		}
		return ew.ResponseWriter.Write(p)
	}
	return ew.body.Write(p)
}

// Flush passes a flush through, but for a held error's (its end is written at finish).
func (ew *errorWriter) Flush() {
	if ew.held && !ew.over {
		return
	}
	if f, ok := ew.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (ew *errorWriter) Unwrap() http.ResponseWriter { return ew.ResponseWriter }

// finish writes the held error, again or as it came.
func (ew *errorWriter) finish() {
	if !ew.held || ew.over {
		return
	}
	if ew.plain {
		h := ew.Header()
		h.Del("Content-Type")
		ce, status := transcoderError(ew.r, h.Get("Allow"), ew.status, strings.TrimSpace(ew.body.String()))
		writeWebError(ew.ResponseWriter, ew.r, ce, status)
		return
	}
	if body, ok := messageTooLarge(ew.r, ew.body.Bytes()); ok {
		ew.Header().Del("Content-Length")
		ew.ResponseWriter.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = ew.ResponseWriter.Write(body)
		return
	}
	ew.ResponseWriter.WriteHeader(ew.status)
	_, _ = ew.ResponseWriter.Write(ew.body.Bytes())
}

// transcoderError is the error the transcoder answered r with in text, status and msg
// (allow the methods a 405's path takes), as the API's errors are, and its HTTP status.
func transcoderError(r *http.Request, allow string, status int, msg string) (*connect.Error, int) {
	rpc := strings.HasPrefix(r.URL.Path, "/toolmesh.") || streamed(r) || connectCall(r)
	switch status {
	case http.StatusNotFound:
		if v := r.Header.Get("Connect-Protocol-Version"); v != "" && v != "1" {
			return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("Connect-Protocol-Version %q is not served: 1 is", v)), http.StatusBadRequest
		}
		if apiMethod(r.URL.Path) {
			// A method of the API, in a request the transcoder took for none of its
			// protocols.
			return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s %s of Content-Type %q is not a call of the API: %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), apiMediaTypes)), http.StatusUnsupportedMediaType
		}
		if rpc {
			return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s is not a method of the API", r.URL.Path)), status
		}
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no method of the API is at %s %s (its paths: %s)", r.Method, r.URL.Path, restPathList())), status
	case http.StatusMethodNotAllowed:
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s is not taken at %s; %s is", r.Method, r.URL.Path, allow)), status
	case http.StatusUnsupportedMediaType:
		if strings.Contains(msg, "could not classify protocol") || strings.Contains(msg, "sub-format not supported") {
			return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("a body of Content-Type %q is not read here: %s", r.Header.Get("Content-Type"), apiMediaTypes)), status
		}
		// Another reason (a compression, a stream called as a unary call): the
		// transcoder's words say which.
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("the request cannot be served: %s", msg)), status
	case http.StatusBadRequest:
		return invalidRequest("header", fmt.Errorf("the request's headers cannot be read: %s", msg)), status
	case http.StatusHTTPVersionNotSupported:
		return connect.NewError(connect.CodeUnimplemented, errors.New(msg)), status
	}
	return connect.NewError(connect.CodeInternal, errors.New(msg)), status
}

// apiMediaTypes says what the HTTP API reads.
const apiMediaTypes = "REST and Connect's unary calls take application/json (Connect application/proto too), Connect's streams application/connect+json or application/connect+proto, gRPC-Web application/grpc-web+proto"

// apiMethod reports whether path is /toolmesh.v1.OrchestratorService/<a method of it>.
func apiMethod(path string) bool {
	service := toolpb.File_toolmesh_v1_orchestrator_proto.Services().ByName("OrchestratorService")
	name, ok := strings.CutPrefix(path, "/"+string(service.FullName())+"/")
	return ok && service.Methods().ByName(protoreflect.Name(name)) != nil
}

// restPathList is the API's REST paths, for a message.
var restPathList = sync.OnceValue(func() string {
	var paths []string
	for _, rule := range restRules() {
		paths = append(paths, rule.method+" "+rule.path)
	}
	return strings.Join(paths, ", ")
})

// grpcTooLarge begins the gRPC server's message when it refuses a message larger than
// its bound.
const grpcTooLarge = "grpc: received message larger than max"

// messageTooLarge is the error body to write, with a 413, for a 429 of a REST or Connect
// unary call whose body is the gRPC server's refusal of a message larger than its bound;
// ok false for any other (a tenant's rate, a quota: those are 429s).
func messageTooLarge(r *http.Request, body []byte) ([]byte, bool) {
	violation := &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "body"}}}
	if !restCall(r) {
		var e connectError
		if json.Unmarshal(body, &e) != nil || e.Code != connect.CodeResourceExhausted.String() || !strings.HasPrefix(e.Message, grpcTooLarge) {
			return nil, false
		}
		ce := connect.NewError(connect.CodeResourceExhausted, errors.New(tooLargeMessage(e.Message)))
		violation.FieldViolations[0].Description = ce.Message()
		b, err := json.Marshal(connectErrorOf(withDetails(ce, violation)))
		return b, err == nil
	}
	var st spb.Status
	if protojson.Unmarshal(body, &st) != nil || st.GetCode() != int32(connect.CodeResourceExhausted) || !strings.HasPrefix(st.GetMessage(), grpcTooLarge) {
		return nil, false
	}
	st.Message = tooLargeMessage(st.GetMessage())
	violation.FieldViolations[0].Description = st.Message
	ce := withDetails(connect.NewError(connect.CodeResourceExhausted, errors.New(st.Message)), violation)
	st.Details = append(st.Details, statusOf(ce).Details...)
	b, err := protojson.Marshal(&st)
	return b, err == nil
}

// tooLargeMessage says what the gRPC server's msg ("grpc: received message larger than
// max (N vs. M)") means to a client of the HTTP API.
func tooLargeMessage(msg string) string {
	var got, limit int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(msg, grpcTooLarge), " (%d vs. %d)", &got, &limit); err != nil {
		return "the request is larger than the orchestrator takes: " + msg
	}
	return fmt.Sprintf("the request is %d bytes as a message, larger than the %d bytes the orchestrator takes (server.max_receive_bytes)", got, limit)
}
