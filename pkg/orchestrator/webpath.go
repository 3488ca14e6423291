package orchestrator

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"
)

// restPaths hands the transcoder each request's path as the client escaped it.
//
// The transcoder matches the API's REST paths (GET /v1/runs/{run_id}, POST
// /v1/runs/{run_id}:cancel, ...) against the path Go's server has decoded already, and
// decodes each variable again. A run id with a '/' (sent as %2F) then read as two
// segments, one with a ':' (%3A) as a custom verb, one with a '%' (%25) failed its
// second decoding: each was a bare 404 with no status, for a run that exists. Given the
// escaped path, the transcoder splits it at the client's own slashes and decodes each
// variable once.
//
// A ':' the client left unescaped in the last segment separates a verb only before a
// verb of the API (cancel, approve): GET /v1/runs/team:42 reads run team:42, and POST
// /v1/runs/team:42:cancel cancels it. An id that ends in ":cancel" itself must be sent
// escaped, as the API's path rules ask of every reserved character in a variable.
//
// A REST path whose variables decode to bytes that are not UTF-8 text is refused as a bad
// request naming the path, where the transcoder failed it as an internal error; so is a
// query the REST rules do not take (restQueryError) and a GET with a body.
func restPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := escapedRESTPath(clientPath(r))
		if !strings.HasPrefix(p, "/toolmesh.") {
			if seg, ok := notText(p); ok {
				writeRESTError(w, invalidRequest("path", fmt.Errorf("path: the segment %q does not decode to UTF-8 text", seg)))
				return
			}
			if strings.Contains(r.URL.RawQuery, ";") {
				r = r.Clone(r.Context())
				r.URL.RawQuery = semicolonsEscaped(r.URL.RawQuery)
			}
			if ce := restRequestError(r, p); ce != nil {
				writeRESTError(w, ce)
				return
			}
		}
		if connectUnaryWithoutVersion(r, p) {
			// Connect's unary calls name the protocol's version in a header, which
			// Connect's own servers do not require (nor its curl examples send): without
			// it the transcoder took the call for a REST one, and answered a bare 404.
			r = r.Clone(r.Context())
			r.Header.Set("Connect-Protocol-Version", "1")
		}
		if p != r.URL.Path {
			u := *r.URL
			u.Path, u.RawPath = p, ""
			r2 := *r
			r2.URL = &u
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// connectUnaryWithoutVersion reports whether r is a Connect unary call (a POST of JSON or
// protobuf to /toolmesh.v1.<Service>/<Method>) that does not name the protocol's version.
func connectUnaryWithoutVersion(r *http.Request, p string) bool {
	if r.Method != http.MethodPost || !strings.HasPrefix(p, "/toolmesh.") || r.Header.Get("Connect-Protocol-Version") != "" {
		return false
	}
	mt, _, _ := strings.Cut(strings.ToLower(r.Header.Get("Content-Type")), ";")
	mt = strings.TrimSpace(mt)
	return mt == "application/json" || mt == "application/proto"
}

// clientPath is r's path as the client escaped it. Where the client left bytes raw that
// a URL escapes (UTF-8 text, '|', '"', ...), Go keeps no escaped form of the path
// (URL.RawPath) and URL.EscapedPath escapes the decoded one again, turning the client's
// %2F into a '/': the path is then taken from the request line itself, those bytes
// escaped and the client's escapes kept as they came, but those of characters that a
// URL never escapes, which are those characters.
func clientPath(r *http.Request) string {
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	if _, rest, ok := strings.Cut(raw, "://"); ok && !strings.HasPrefix(raw, "/") {
		raw = "" // the absolute form (a proxy's request): its path follows the host
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			raw = rest[i:]
		}
	}
	if !strings.HasPrefix(raw, "/") {
		return r.URL.EscapedPath()
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '%' && i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]):
			if u := unhex(raw[i+1])<<4 | unhex(raw[i+2]); unreserved(u) {
				// An escaped letter, digit, '-', '.', '_' or '~' is that character
				// (RFC 3986 6.2.2.2): /v1/%72uns is /v1/runs.
				b.WriteByte(u)
			} else {
				b.WriteString(raw[i : i+3])
			}
			i += 2
		case c <= ' ' || c >= 0x7f || strings.IndexByte("\"%<>\\^`{|}", c) >= 0:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// unhex is the value of the hexadecimal digit c.
func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// unreserved reports whether c is a character a URL never needs to escape.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}

// notText returns the first segment of the escaped path p that does not decode to UTF-8
// text.
func notText(p string) (string, bool) {
	for seg := range strings.SplitSeq(p, "/") {
		if v, err := url.PathUnescape(seg); err == nil && !utf8.ValidString(v) {
			return seg, true
		}
	}
	return "", false
}

// escapedRESTPath is the escaped path p with each ':' of its last segment escaped but
// the one before a verb of the API.
func escapedRESTPath(p string) string {
	slash := strings.LastIndexByte(p, '/')
	last := p[slash+1:]
	colon := strings.LastIndexByte(last, ':')
	if colon < 0 {
		return p
	}
	id, verb := last[:colon], ""
	if restVerbs()[last[colon+1:]] {
		verb = last[colon:]
	} else {
		id = last
	}
	if !strings.Contains(id, ":") {
		return p
	}
	return p[:slash+1] + strings.ReplaceAll(id, ":", "%3A") + verb
}

// restVerbs are the custom verbs of the API's REST path rules (the part after the last
// ':' of a rule).
var restVerbs = sync.OnceValue(func() map[string]bool {
	verbs := map[string]bool{}
	for _, rule := range restRules() {
		if rule.verb != "" {
			verbs[rule.verb] = true
		}
	}
	return verbs
})

// challenged adds to a 401 of the HTTP API the challenge HTTP requires of one
// (WWW-Authenticate, RFC 9110): a bearer token is what the API takes. The transcoder
// answered UNAUTHENTICATED with a 401 and no challenge, which HTTP clients' auth
// libraries wait for before they send credentials.
func challenged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&challengeWriter{ResponseWriter: w}, r)
	})
}

// challengeWriter sets WWW-Authenticate on a 401 written through it.
type challengeWriter struct {
	http.ResponseWriter
}

func (c *challengeWriter) WriteHeader(code int) {
	if code == http.StatusUnauthorized && c.Header().Get("WWW-Authenticate") == "" {
		c.Header().Set("WWW-Authenticate", `Bearer realm="toolmesh"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

// Flush keeps streams flowing through the wrapper.
func (c *challengeWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *challengeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
