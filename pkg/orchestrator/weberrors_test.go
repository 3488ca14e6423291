package orchestrator_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/pkg/orchestrator"
)

// webErrorCase is a request of TestWebErrorsAreInTheirProtocol and the error it is answered with.
type webErrorCase struct {
	name, method, path, contentType string
	header                          map[string]string
	body                            []byte
	// status is the HTTP status; rest the google.rpc.Status code of a REST answer,
	// connect the Connect error code of a unary one (or, with grpc, gRPC-Web's
	// grpc-status), stream that of a Connect stream's end.
	status       int
	rest         int32
	connect      string
	grpc         string
	stream       string
	contains     string
	field, allow string
	// fine: the request is served.
	fine bool
}

// TestWebErrorsAreInTheirProtocol: every error of the HTTP API is answered in the
// request's protocol with a status a client acts on. The transcoder answered a request it
// could not route or read (an unknown path, a method the path does not take, a body type
// it does not read, a bad Connect-Timeout-Ms) in plain text: no error JSON for REST and
// Connect clients, no grpc-status for gRPC-Web. And a message larger than
// server.max_receive_bytes was a 429, which REST and Connect clients retry as if the
// orchestrator were busy: it is a 413 naming the body.
func TestWebErrorsAreInTheirProtocol(t *testing.T) {
	cfg := testConfig()
	cfg.Server.MaxReceiveBytes = 2 << 20
	o, ctx, _ := serving(t, orchestrator.Options{Config: cfg, Logger: quiet()})
	base := "http://" + o.Addr().String()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	large, _ := json.Marshal(map[string]string{"reason": strings.Repeat("x", 3<<20)}) // a message past 2 MiB, a body within twice that
	const service = "/toolmesh.v1.OrchestratorService/"
	for _, tc := range []webErrorCase{
		{name: "REST unknown path", method: "GET", path: "/v1/nope", status: 404, rest: 5, contains: "GET /v1/runs/{run_id}"},
		{name: "REST method not taken", method: "GET", path: "/v1/runs/r1:cancel", status: 405, rest: 12, allow: "POST", contains: "GET is not taken"},
		{name: "REST body type", method: "POST", path: "/v1/runs/r1:cancel", contentType: "text/plain", body: []byte("x"), status: 415, rest: 12, contains: `"text/plain"`},
		{name: "Connect unknown method", method: "POST", path: service + "Nope", contentType: "application/json", body: []byte("{}"), status: 404, connect: "unimplemented", contains: "Nope is not a method"},
		{name: "Connect body type", method: "POST", path: service + "GetRun", contentType: "text/xml", body: []byte("x"), status: 415, connect: "unimplemented", contains: `"text/xml"`},
		{name: "Connect timeout", method: "POST", path: service + "GetRun", contentType: "application/json", header: map[string]string{"Connect-Timeout-Ms": "abc"}, body: []byte("{}"), status: 400, connect: "invalid_argument", field: "Connect-Timeout-Ms"},
		{name: "Connect stream unknown method", method: "POST", path: service + "Nope", contentType: "application/connect+json", body: append(binary.BigEndian.AppendUint32([]byte{0}, 2), "{}"...), status: 200, stream: "unimplemented"},
		{name: "gRPC-Web unknown method", method: "POST", path: service + "Nope", contentType: "application/grpc-web+proto", body: []byte{0, 0, 0, 0, 0}, status: 200, grpc: "12"},
		{name: "REST message too large", method: "POST", path: "/v1/runs/r1/calls/c1:approve", contentType: "application/json", body: large, status: 413, rest: 8, field: "body", contains: "max_receive_bytes"},
		{name: "Connect message too large", method: "POST", path: service + "ApproveToolCall", contentType: "application/json", body: large, status: 413, connect: "resource_exhausted", field: "body", contains: "max_receive_bytes"},
		// The transcoder's own reason, where it is not the body's type.
		{name: "gRPC-Web compressed whole", method: "POST", path: service + "GetRun", contentType: "application/grpc-web+proto", header: map[string]string{"Content-Encoding": "gzip"}, body: []byte{0, 0, 0, 0, 0}, status: 200, grpc: "12", contains: "content-encoding"},
		{name: "a stream called as a unary call", method: "POST", path: service + "Run", contentType: "application/json", body: []byte("{}"), status: 415, connect: "unimplemented", contains: "stream type"},
		{name: "another Connect version", method: "POST", path: service + "GetRun", contentType: "application/json", header: map[string]string{"Connect-Protocol-Version": "2"}, body: []byte("{}"), status: 400, connect: "unimplemented", contains: "Connect-Protocol-Version"},
		{name: "Connect, another service", method: "POST", path: "/foo.v1.Svc/Method", contentType: "application/json", header: map[string]string{"Connect-Protocol-Version": "1"}, body: []byte("{}"), status: 404, connect: "unimplemented", contains: "not a method"},
		// Binary metadata the gRPC server cannot decode was an internal error.
		{name: "REST bad binary header", method: "GET", path: "/v1/runs", header: map[string]string{"X-Trace-Bin": "!!!"}, status: 400, rest: 3, field: "X-Trace-Bin"},
		{name: "Connect bad binary header", method: "POST", path: service + "ListRuns", contentType: "application/json", header: map[string]string{"X-Trace-Bin": "!!!"}, body: []byte("{}"), status: 400, connect: "invalid_argument", field: "X-Trace-Bin"},
		{name: "REST good binary header", method: "GET", path: "/v1/runs", header: map[string]string{"X-Trace-Bin": "AAE"}, status: 200, fine: true},
		// A header only Connect reads is not REST's to refuse.
		{name: "REST with a Connect timeout", method: "GET", path: "/v1/runs", header: map[string]string{"Connect-Timeout-Ms": "1.5"}, status: 200, fine: true},
		// Errors of the API itself are as they were.
		{name: "REST no such run", method: "GET", path: "/v1/runs/r1", status: 404, rest: 5, field: "run_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.allow != "" && resp.Header.Get("Allow") != tc.allow {
				t.Errorf("Allow %q, want %q", resp.Header.Get("Allow"), tc.allow)
			}
			message, field, ok := webErrorOf(t, tc, resp, body)
			if !ok {
				return
			}
			if !strings.Contains(message, tc.contains) {
				t.Errorf("message %q, want it to say %q", message, tc.contains)
			}
			if field != tc.field {
				t.Errorf("field %q, want %q (%s)", field, tc.field, body)
			}
		})
	}
}

// webErrorOf checks the error resp answers tc with in its protocol, and returns its
// message and the field it names; ok false when there is nothing more to check.
func webErrorOf(t *testing.T, tc webErrorCase, resp *http.Response, body []byte) (message, field string, ok bool) {
	t.Helper()
	switch {
	case tc.fine:
		return
	case tc.grpc != "":
		if got := resp.Header.Get("Grpc-Status"); got != tc.grpc {
			t.Errorf("grpc-status %q, want %s", got, tc.grpc)
		}
		if msg, _ := url.PathUnescape(resp.Header.Get("Grpc-Message")); !strings.Contains(msg, tc.contains) {
			t.Errorf("grpc-message %q, want it to say %q", msg, tc.contains)
		}
		return
	case tc.stream != "":
		if len(body) < 5 || body[0] != 2 {
			t.Fatalf("the stream's answer %q is no end of stream", body)
		}
		var end struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(body[5:], &end); err != nil || end.Error.Code != tc.stream {
			t.Errorf("end of stream %s (%v), want code %s", body[5:], err, tc.stream)
		}
		return
	case tc.connect != "":
		var e struct {
			Code, Message string
			Details       []struct{ Type, Value string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Code != tc.connect || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s (%v), want Connect's error JSON with code %s", resp.Header.Get("Content-Type"), body, err, tc.connect)
		}
		message = e.Message
		for _, d := range e.Details {
			var br errdetails.BadRequest
			if b, err := base64.RawStdEncoding.DecodeString(d.Value); d.Type == "google.rpc.BadRequest" && err == nil &&
				proto.Unmarshal(b, &br) == nil && len(br.GetFieldViolations()) > 0 {
				field = br.GetFieldViolations()[0].GetField()
			}
		}
	default:
		var st spb.Status
		if err := protojson.Unmarshal(body, &st); err != nil || st.GetCode() != tc.rest || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s (%v), want a google.rpc.Status in JSON with code %d", resp.Header.Get("Content-Type"), body, err, tc.rest)
		}
		message = st.GetMessage()
		for _, d := range st.GetDetails() {
			var br errdetails.BadRequest
			var info errdetails.ErrorInfo
			if d.UnmarshalTo(&br) == nil && len(br.GetFieldViolations()) > 0 {
				field = br.GetFieldViolations()[0].GetField()
			} else if d.UnmarshalTo(&info) == nil && field == "" {
				field = info.GetMetadata()["field"]
			}
		}
	}
	return message, field, true
}
