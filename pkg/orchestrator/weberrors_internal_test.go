package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A status written after the transcoder's error does not replace it: the error is
// written again, in its protocol, under its own status. The later status went to the
// client, with the held error's body under it.
func TestProtocolErrorsKeepTheFirstStatus(t *testing.T) {
	h := protocolErrors(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Not Found", http.StatusNotFound)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/nope", nil))
	if w.Code != http.StatusNotFound || w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"code":5`) {
		t.Errorf("HTTP %d %s %s; want 404 NOT_FOUND in JSON", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}
