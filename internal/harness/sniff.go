package harness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Sniffer is a TCP proxy in front of a gRPC server that decodes the HTTP/2 frames the
// client sends, so a test can see exactly which headers and bytes went over the wire.
type Sniffer struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	headers []hpack.HeaderField
	raw     bytes.Buffer
	errs    []error
	wg      sync.WaitGroup
}

// StartSniffer listens on 127.0.0.1 and forwards every connection to target.
func StartSniffer(target string) (*Sniffer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sniffer{lis: lis, target: target}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address clients should dial instead of the target.
func (s *Sniffer) Addr() string { return s.lis.Addr().String() }

// Close stops the proxy and cuts its connections.
func (s *Sniffer) Close() error {
	err := s.lis.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// track records a live connection; it reports false once the sniffer is closed.
func (s *Sniffer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Sniffer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Sniffer) accept() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			s.proxy(c)
		}()
	}
}

func (s *Sniffer) proxy(client net.Conn) {
	defer func() { _ = client.Close() }()
	if !s.track(client) {
		return
	}
	defer s.untrack(client)
	server, err := net.Dial("tcp", s.target)
	if err != nil {
		s.fail(err)
		return
	}
	defer func() { _ = server.Close() }()
	if !s.track(server) {
		return
	}
	defer s.untrack(server)
	done := make(chan struct{}, 2)
	go func() {
		s.forward(client, server)
		if tc, ok := server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, server)
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// forward copies what the client sends to the server a frame at a time, each once it
// is decoded and recorded: whatever the server answers, the sniffer saw what led to it
// (a test that checks the sniffer once its call returned never races its decoding).
// After the preface is not HTTP/2's, or a frame fails to decode, the rest is copied as
// it comes (and recorded raw).
func (s *Sniffer) forward(client io.Reader, server io.Writer) {
	var frame bytes.Buffer
	r := io.TeeReader(client, &frame)
	// pass sends the bytes read since the last pass to the server and records them.
	pass := func() error {
		s.mu.Lock()
		s.raw.Write(frame.Bytes())
		s.mu.Unlock()
		_, err := server.Write(frame.Bytes())
		frame.Reset()
		return err
	}
	if s.parse(r, pass) {
		return
	}
	if pass() == nil {
		_, _ = io.Copy(server, io.TeeReader(client, s.rawWriter()))
	}
}

type rawWriter struct{ s *Sniffer }

func (w rawWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	w.s.raw.Write(p)
	w.s.mu.Unlock()
	return len(p), nil
}

func (s *Sniffer) rawWriter() io.Writer { return rawWriter{s} }

// parse reads the client preface and then frames, decoding every header block, and
// calls pass after each; it reports whether it is done with the connection (it ended,
// or the server cannot be written), false when what came is not HTTP/2 it could decode.
func (s *Sniffer) parse(r io.Reader, pass func() error) bool {
	// The preface is read as it comes: what differs from it is passed on at once (a
	// client of another protocol may send less than a preface and wait for an answer).
	preface := make([]byte, len(http2.ClientPreface))
	for got := 0; got < len(preface); {
		n, err := r.Read(preface[got:])
		got += n
		if string(preface[:got]) != http2.ClientPreface[:got] {
			s.fail(errors.New("not an HTTP/2 client preface"))
			return false
		}
		if err != nil {
			_ = pass()
			return true
		}
	}
	if pass() != nil {
		return true
	}
	fr := http2.NewFramer(nil, r)
	fr.SetMaxReadFrameSize(1 << 24)
	fr.ReadMetaHeaders = hpack.NewDecoder(1<<16, nil)
	fr.MaxHeaderListSize = 1 << 24
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "closed") {
				_ = pass()
				return true
			}
			s.fail(err)
			return false
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			s.mu.Lock()
			s.headers = append(s.headers, mh.Fields...)
			s.mu.Unlock()
		}
		if pass() != nil {
			return true
		}
	}
}

func (s *Sniffer) fail(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

// Headers returns every header field the clients sent, with "-bin" values
// base64-decoded to their raw bytes.
func (s *Sniffer) Headers() []hpack.HeaderField {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]hpack.HeaderField, 0, len(s.headers))
	for _, h := range s.headers {
		if strings.HasSuffix(h.Name, "-bin") {
			if b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(h.Value, "=")); err == nil {
				h.Value = string(b)
			}
		}
		out = append(out, h)
	}
	return out
}

// Saw reports whether needle went over the wire from the clients: in a decoded header
// name or value, or anywhere in the raw bytes (message bodies are not compressed).
func (s *Sniffer) Saw(needle string) bool {
	for _, h := range s.Headers() {
		if strings.Contains(h.Name, needle) || strings.Contains(h.Value, needle) {
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.raw.Bytes(), []byte(needle))
}

// Errors returns what went wrong while proxying or parsing.
func (s *Sniffer) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}
