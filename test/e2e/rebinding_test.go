package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// TestDNSRebindingRefused: an orchestrator that takes requests without credentials (the
// default, on a developer's loopback) refuses an HTTP request whose Host names a DNS name
// it was not told it answers to, on its API and its console: a page of evil.example can
// have evil.example resolve to 127.0.0.1 (DNS rebinding), and its fetches then come from
// the page's own origin as far as the browser is concerned — Origin and Host agree, so the
// same-origin check let them read runs and start them. IP addresses, localhost, names
// under .localhost and server.allowed_hosts are served.
func TestDNSRebindingRefused(t *testing.T) {
	mcpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", "console: {enabled: true}\nserver: {allowed_hosts: [orchestrator.internal]}\nmcp_serve: {listen: "+mcpAddr+"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, port, _ := strings.Cut(m.orch.Addr, ":")
	_, mcpPort, _ := strings.Cut(mcpAddr, ":")
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		host, path string
		refused    bool
	}{
		{"evil.example:" + port, "/v1/runs", true},
		{"evil.example:" + port, "/console/", true},
		{"evil.example:" + port, "/", true}, // the console's redirect
		{"evil.example:" + mcpPort, "mcp", true},
		{"orchestrator.internal:" + mcpPort, "mcp", false}, // the MCP SDK's own guard refused it
		{"127.0.0.1:" + mcpPort, "mcp", false},
		{"EVIL.example.:" + port, "/v1/tools", true},
		{"127.0.0.1:" + port, "/v1/runs", false},
		{"localhost:" + port, "/v1/runs", false},
		{"app.localhost:" + port, "/console/", false},
		{"orchestrator.internal:" + port, "/v1/runs", false},
		{"Orchestrator.Internal", "/v1/tools", false},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.orch.Addr+tc.path, nil)
		if tc.path == "mcp" {
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+mcpAddr+"/mcp", strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req.Host = tc.host
		req.Header.Set("Origin", "http://"+tc.host) // a page of that origin: the same origin
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		switch {
		case tc.refused && (resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "server.allowed_hosts")):
			t.Errorf("GET %s with Host %s: HTTP %d %q; want 421 naming server.allowed_hosts", tc.path, tc.host, resp.StatusCode, body)
		case !tc.refused && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusFound:
			t.Errorf("GET %s with Host %s: HTTP %d %q; want it served", tc.path, tc.host, resp.StatusCode, body)
		}
	}
}
