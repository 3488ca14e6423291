package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSameOriginTakesThePublicOrigin: a page of the endpoint's public origin (behind a
// reverse proxy that rewrites Host) is not refused as another site's; any other is.
func TestSameOriginTakesThePublicOrigin(t *testing.T) {
	h := sameOrigin(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), publicOrigin("https://mcp.example.com/mcp")...)
	for _, tc := range []struct {
		origin string
		want   int
	}{{"https://mcp.example.com", http.StatusOK}, {"http://10.0.0.5:8090", http.StatusOK}, {"https://evil.example", http.StatusForbidden}, {"null", http.StatusForbidden}} {
		r := httptest.NewRequest(http.MethodPost, "http://10.0.0.5:8090/mcp", nil)
		r.Header.Set("Origin", tc.origin)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Origin %s: %d, want %d", tc.origin, w.Code, tc.want)
		}
	}
	if publicOrigin("") != nil {
		t.Error("an endpoint without a public URL takes no other origin")
	}
}
