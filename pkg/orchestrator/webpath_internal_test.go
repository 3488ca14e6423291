package orchestrator

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
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
	} {
		var got string
		h := restPaths(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.URL.Path }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://orchestrator"+tc.sent, nil))
		if got != tc.want {
			t.Errorf("%s: the transcoder got %s, want %s", tc.sent, got, tc.want)
		}
	}
}
