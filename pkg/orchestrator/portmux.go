package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// The orchestrator's port serves gRPC and HTTP/1.1 side by side: gRPC (HTTP/2) to
// grpc-go's own server, on its fast path; everything else (Connect, gRPC-Web and REST
// for browsers and curl, the console) to an http.Server. A plaintext connection is told
// by its first bytes: HTTP/2's client preface goes to gRPC. Over TLS the protocol is
// chosen in the handshake: a client that offers HTTP/1.1 (a browser, curl, a Connect
// client) gets it; one that offers only h2 (a gRPC client) gets gRPC. Connect and
// gRPC-Web therefore travel over HTTP/1.1, where their unary and server-streaming calls
// (every client call of OrchestratorService) work.

// http2Preface starts every HTTP/2 connection of a client that knows the server speaks it.
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// sniffTimeout bounds how long a new connection may take to say what it speaks.
const sniffTimeout = 10 * time.Second

// portMux splits the connections of one listener between gRPC and HTTP.
type portMux struct {
	lis        net.Listener
	tls        *tls.Config // nil: plaintext
	grpc, http *chanListener
	wg         sync.WaitGroup
}

func newPortMux(lis net.Listener, tc *tls.Config) *portMux {
	m := &portMux{lis: lis, grpc: newChanListener(lis.Addr()), http: newChanListener(lis.Addr())}
	if tc != nil {
		m.tls = tc.Clone()
		base := m.tls
		// The server picks the protocol from what the client offers (see above).
		m.tls.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.GetConfigForClient = nil
			if slices.Contains(hello.SupportedProtos, "http/1.1") || len(hello.SupportedProtos) == 0 {
				c.NextProtos = []string{"http/1.1"}
			} else {
				c.NextProtos = []string{"h2"}
			}
			return c, nil
		}
	}
	return m
}

// serve accepts connections until the listener closes, then closes both halves.
func (m *portMux) serve() error {
	defer func() {
		m.wg.Wait()
		m.grpc.close()
		m.http.close()
	}()
	var delay time.Duration
	for {
		c, err := m.lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		m.wg.Go(func() { m.route(c) })
	}
}

// route hands c to the half that speaks its protocol, or closes it.
func (m *portMux) route(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(sniffTimeout))
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			_ = c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			m.grpc.give(tc)
		} else {
			m.http.give(tc)
		}
		return
	}
	br := bufio.NewReaderSize(c, len(http2Preface))
	h2, err := isPreface(br)
	if err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br}
	if h2 {
		m.grpc.give(pc)
	} else {
		m.http.give(pc)
	}
}

// isPreface reads ahead in br until its bytes either are HTTP/2's client preface or
// differ from it (a short HTTP/1.1 request is told at its first byte, without waiting
// for more).
func isPreface(br *bufio.Reader) (bool, error) {
	for n := 1; ; n++ {
		head, err := br.Peek(n)
		if len(head) < n {
			return false, err
		}
		if !bytes.Equal(head, http2Preface[:n]) {
			return false, nil
		}
		if n == len(http2Preface) {
			return true, nil
		}
	}
}

// peekedConn is a connection whose first bytes were read ahead into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener is a listener fed connections by the mux.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to whoever accepts, or closes it once the listener is closed.
func (l *chanListener) give(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error { l.close(); return nil }
func (l *chanListener) close()       { l.closed.Do(func() { close(l.done) }) }
func (l *chanListener) Addr() net.Addr {
	return l.addr
}

// tlsDone are gRPC server credentials for connections the mux already took through the
// TLS handshake: the peer's TLS state reaches the server's interceptors as grpc-go's own
// TLS credentials would give it (credentials.TLSInfo).
type tlsDone struct{}

func (tlsDone) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil, errors.New("orchestrator: a connection that did not come through TLS")
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (tlsDone) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("orchestrator: server-side credentials")
}

func (tlsDone) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (t tlsDone) Clone() credentials.TransportCredentials { return t }
func (tlsDone) OverrideServerName(string) error           { return nil }
