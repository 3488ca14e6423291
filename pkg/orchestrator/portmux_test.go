package orchestrator

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/devca"
)

// startMux serves a portMux on a loopback listener until the test ends.
func startMux(t *testing.T, tc *tls.Config) *portMux {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newPortMux(lis, tc)
	done := make(chan error, 1)
	go func() { done <- m.serve() }()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
	})
	return m
}

// accept is the next connection l is given, with the bytes that reach it first.
func accept(t *testing.T, l *chanListener, n int) (net.Conn, []byte) {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			got <- c
		}
	}()
	select {
	case c := <-got:
		t.Cleanup(func() { _ = c.Close() })
		b := make([]byte, n)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("reading what the client sent: %v", err)
		}
		return c, b
	case <-time.After(5 * time.Second):
		t.Fatal("no connection reached the listener")
		return nil, nil
	}
}

// TestPortMuxPlaintext: the HTTP/2 preface goes to gRPC, anything else to HTTP, each
// with every byte the client sent; a client that says nothing holds up no other.
func TestPortMuxPlaintext(t *testing.T) {
	m := startMux(t, nil)
	silent, err := net.Dial("tcp", m.lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, tc := range []struct {
		send string
		to   *chanListener
	}{
		{string(http2Preface) + "\x00\x00\x00\x04", m.grpc},
		{"GET /v1/runs HTTP/1.1\r\nHost: x\r\n\r\n", m.http},
		{"PRI * HTTP/1.1\r\n\r\n", m.http}, // not quite the preface
	} {
		c, err := net.Dial("tcp", m.lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		if _, got := accept(t, tc.to, len(tc.send)); string(got) != tc.send {
			t.Errorf("%q reached its listener as %q", tc.send, got)
		}
	}
}

// TestPortMuxTLS: over TLS, a client offering only h2 (gRPC) goes to gRPC; one that
// offers HTTP/1.1 (a browser, curl) gets HTTP/1.1 and goes to HTTP, as does one that
// offers nothing.
func TestPortMuxTLS(t *testing.T) {
	ca, err := devca.NewCA("toolmesh.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("/orchestrator", time.Now().Add(-time.Minute), time.Hour, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	m := startMux(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}})
	for _, tc := range []struct {
		offer []string
		want  string
		to    *chanListener
	}{
		{[]string{"h2"}, "h2", m.grpc},
		{[]string{"h2", "http/1.1"}, "http/1.1", m.http},
		{nil, "", m.http},
	} {
		c, err := tls.Dial("tcp", m.lis.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: tc.offer})
		if err != nil {
			t.Fatalf("offering %v: %v", tc.offer, err)
		}
		defer c.Close()
		if got := c.ConnectionState().NegotiatedProtocol; got != tc.want {
			t.Errorf("offering %v negotiated %q, want %q", tc.offer, got, tc.want)
		}
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, got := accept(t, tc.to, 5); string(got) != "hello" {
			t.Errorf("offering %v: %q", tc.offer, got)
		}
	}
}
