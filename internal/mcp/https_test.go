package mcp_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/devca"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// An MCP server over HTTPS that verifies its clients' certificates: the group reaches it
// with the CA bundle and the client certificate it is configured with; without the
// certificate, or against another CA, it does not.
func TestHTTPSWithClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.NewCA("mcp.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) trust.Files {
		leaf, err := ca.Issue("/"+name, time.Now().Add(-time.Minute), time.Hour, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.Write(dir, name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	srvF, cliF := issue("server"), issue("client")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	cert, err := tls.LoadX509KeyPair(srvF.Cert, srvF.Key)
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "secure", Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "ping", Description: "Ping."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil, nil
	})
	srv := httptest.NewUnstartedServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	good, err := trust.HTTPSConfig(cliF.CA, cliF.Cert, cliF.Key)
	if err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "secure", URL: srv.URL, TLS: good}})
	if res := call(t, testCtx(t), byName(t, g, "ping"), `{}`); res.Content != "pong" {
		t.Errorf("ping over mutual TLS: %+v", res)
	}

	noCert, err := trust.HTTPSConfig(cliF.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := devca.NewCA("mcp.test", time.Hour)
	otherCA := dir + "/other-ca.pem"
	if err := os.WriteFile(otherCA, other.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongCA, err := trust.HTTPSConfig(otherCA, cliF.Cert, cliF.Key)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{"no client certificate": noCert, "another CA": wrongCA} {
		g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "secure", URL: srv.URL, TLS: tc}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := g.Tools(ctx); err == nil {
			t.Errorf("%s: the server's tools were listed", name)
		}
		cancel()
	}
	if _, err := trust.HTTPSConfig(cliF.CA, cliF.Cert, ""); err == nil {
		t.Error("a certificate without its key was taken")
	}
}
