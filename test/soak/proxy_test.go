package soak

import (
	"net"
	"sync"
	"sync/atomic"
)

// faultProxy forwards TCP connections to a target; while blackholed it keeps every
// connection open and accepts new ones but drops every byte in both directions, as a
// partitioned network does (no reset, no answer).
type faultProxy struct {
	lis    net.Listener
	target string
	hole   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startProxy(target string) (*faultProxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{lis: lis, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *faultProxy) addr() string { return p.lis.Addr().String() }

// blackhole starts (on) or ends a partition.
func (p *faultProxy) blackhole(on bool) { p.hole.Store(on) }

func (p *faultProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *faultProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

func (p *faultProxy) serve(client net.Conn) {
	defer func() { _ = client.Close() }()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the worker is down: the client sees the connection close
	}
	defer func() { _ = server.Close() }()
	p.track(client, server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.hole.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
}

func (p *faultProxy) close() {
	_ = p.lis.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
