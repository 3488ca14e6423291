package harness

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestSnifferSawWhatReachedTheServer: a server that has received a request finds its
// header in the sniffer already, though the header is Huffman-coded on the wire (only
// the decoded frame holds it). A test checks the sniffer once its call returned; the
// sniffer used to forward the bytes before it decoded them, and now and then the check
// came first.
func TestSnifferSawWhatReachedTheServer(t *testing.T) {
	const value = "Bearer canary-4uTh0r1zAt10n"
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	if err := enc.WriteField(hpack.HeaderField{Name: "authorization", Value: value}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(block.Bytes(), []byte(value)) {
		t.Fatal("the header block holds the value as it is: the test proves nothing")
	}
	var req bytes.Buffer
	req.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&req, nil)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s, err := StartSniffer(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		saw := make(chan bool, 1)
		go func() {
			c, err := lis.Accept()
			if err != nil {
				saw <- false
				return
			}
			defer func() { _ = c.Close() }()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, req.Len())); err != nil {
				saw <- false
				return
			}
			saw <- s.Saw(value)
		}()
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		ok := <-saw
		_ = c.Close()
		_ = s.Close()
		_ = lis.Close()
		if !ok {
			t.Fatal("the server had the request before the sniffer saw its header")
		}
		if errs := s.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
	}
}

// TestSnifferPassesOtherProtocols: a client that is not HTTP/2 and sends less than a
// preface before it waits for an answer gets one: the sniffer held its bytes until a
// whole preface had come.
func TestSnifferPassesOtherProtocols(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = io.Copy(c, c) // an echo server
	}()
	s, err := StartSniffer(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "PING\r\n" {
		t.Fatalf("the echo through the sniffer: %q, %v", got, err)
	}
}
