package orchestrator

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
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

// TestKnownHost: an orchestrator that takes requests without credentials answers to IP
// addresses, localhost and server.allowed_hosts, whatever their case, port or final dot;
// one that requires credentials answers to any name (DNS rebinding gains a page nothing
// there).
func TestKnownHost(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	open := &Orchestrator{cfg: config.Default(), log: slog.New(slog.DiscardHandler)}
	open.cfg.Server.AllowedHosts = []string{"mesh.internal"}
	withJWT := &Orchestrator{cfg: config.Default(), log: slog.New(slog.DiscardHandler)}
	withJWT.cfg.Auth.JWT = config.JWT{JWKSFile: "jwks.json", Issuer: "i", Audience: "a"}
	for _, tc := range []struct {
		o    *Orchestrator
		host string
		want int
	}{
		{open, "Mesh.Internal.:8090", http.StatusOK},
		{open, "mesh.internal", http.StatusOK},
		{open, "[::1]:8090", http.StatusOK},
		{open, "[fe80::1%25eth0]:8090", http.StatusOK}, // a link-local address with its zone
		{open, "10.0.0.5:8090", http.StatusOK},
		{open, "localhost", http.StatusOK},
		{open, "evil.example", http.StatusMisdirectedRequest},
		{open, "mesh.internal.evil.example", http.StatusMisdirectedRequest},
		{withJWT, "evil.example", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://10.0.0.5:8090/mcp", nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		tc.o.knownHost(ok).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Host %s (credentials required: %v): %d, want %d", tc.host, tc.o == withJWT, w.Code, tc.want)
		}
	}
}
