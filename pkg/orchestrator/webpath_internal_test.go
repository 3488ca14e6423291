package orchestrator

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestRESTVerbsAreTheAPIs(t *testing.T) {
	if got := slices.Sorted(maps.Keys(restVerbs())); !slices.Equal(got, []string{"approve", "cancel"}) {
		t.Errorf("the API's verbs: %q, want approve and cancel", got)
	}
}

// The transcoder gets the path as the client escaped it, with the colons of the last
// segment escaped but the verb's.
func TestRESTPathsKeepTheClientsEscapes(t *testing.T) {
	for _, tc := range []struct{ sent, want string }{
		{"/v1/runs/plain", "/v1/runs/plain"},
		{"/v1/runs/plain:cancel", "/v1/runs/plain:cancel"},
		{"/v1/runs/a%2Fb", "/v1/runs/a%2Fb"},
		{"/v1/runs/a%2Fb:cancel", "/v1/runs/a%2Fb:cancel"},
		{"/v1/runs/a%3Ab", "/v1/runs/a%3Ab"},
		{"/v1/runs/a:b", "/v1/runs/a%3Ab"},
		{"/v1/runs/a:b:cancel", "/v1/runs/a%3Ab:cancel"},
		{"/v1/runs/a:b:c", "/v1/runs/a%3Ab%3Ac"},
		{"/v1/runs/a%25b", "/v1/runs/a%25b"},
		{"/v1/runs/a%20b", "/v1/runs/a%20b"},
		{"/v1/runs/r:1/calls/c:2:approve", "/v1/runs/r:1/calls/c%3A2:approve"},
		{"/toolmesh.v1.OrchestratorService/GetRun", "/toolmesh.v1.OrchestratorService/GetRun"},
		// Bytes left raw that a URL escapes: Go keeps no escaped path then, and the
		// client's own escapes (%2F, %3A) must not be decoded on the way.
		{"/v1/runs/r/calls/call_\xc3\xa9%2F1:approve", "/v1/runs/r/calls/call_%C3%A9%2F1:approve"},
		{"/v1/runs/r/calls/c|%3Aapprove", "/v1/runs/r/calls/c%7C%3Aapprove"},
		{"/v1/runs/x\"%3Acancel", "/v1/runs/x%22%3Acancel"},
		// An escaped unreserved character is that character (the literal segments must
		// match), a reserved one stays escaped.
		{"/v1/%72uns/%61b%2D%2e%5F%7e%3A", "/v1/runs/ab-._~%3A"},
		{"/v1/runs/x%3a%63ancel", "/v1/runs/x%3acancel"},
		{"/v1/runs/x:%63ancel", "/v1/runs/x:cancel"},
	} {
		for _, target := range []string{tc.sent, "http://orchestrator" + tc.sent} { // origin form, absolute form
			var got string
			h := restPaths(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.URL.Path }))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, target, nil))
			if got != tc.want {
				t.Errorf("%s: the transcoder got %s, want %s", target, got, tc.want)
			}
		}
	}
}

// A REST path whose variable does not decode to UTF-8 text is a bad request naming the
// path, as a google.rpc.Status in JSON; the transcoder failed it as an internal error.
func TestRESTPathsRefuseBytesThatAreNotText(t *testing.T) {
	reached := false
	h := restPaths(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/runs/%FF", nil))
	body := w.Body.String()
	if reached || w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/json" ||
		!strings.Contains(body, `"code":3`) || !strings.Contains(body, `"field":"path"`) || !strings.Contains(body, "%FF") {
		t.Errorf("GET /v1/runs/%%FF: reached the transcoder %v, HTTP %d %s %s; want 400 naming the path", reached, w.Code, w.Header().Get("Content-Type"), body)
	}
	// Connect's paths are the transcoder's to answer.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/toolmesh.v1.OrchestratorService/%FF", nil))
	if !reached {
		t.Error("a Connect path was refused before the transcoder")
	}
}

// A Connect unary call that does not name the protocol's version (Connect's servers do not
// require it) reaches the transcoder as a Connect call; the header a client sends is kept.
func TestConnectUnaryWithoutItsVersion(t *testing.T) {
	for _, tc := range []struct {
		method, path, contentType, version, want string
	}{
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/ListRuns", "application/json", "", "1"},
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/ListRuns", "application/proto", "", "1"},
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/ListRuns", "application/json", "2", "2"},
		{http.MethodPost, "/toolmesh.v1.OrchestratorService/Run", "application/connect+json", "", ""},
		{http.MethodPost, "/v1/runs/a:cancel", "application/json", "", ""},
	} {
		var got string
		h := restPaths(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Get("Connect-Protocol-Version") }))
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}"))
		r.Header.Set("Content-Type", tc.contentType)
		if tc.version != "" {
			r.Header.Set("Connect-Protocol-Version", tc.version)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got != tc.want {
			t.Errorf("%s %s (%s, version %q): the transcoder got version %q, want %q", tc.method, tc.path, tc.contentType, tc.version, got, tc.want)
		}
	}
}
