// Package meshtest runs an orchestrator inside the calling process, on in-memory
// connections (grpc's bufconn), for examples and tests of code that talks to one: a
// worker built on pkg/worker registers with it and serves its calls, a client built on
// pkg/client runs prompts through it, and a scripted model drives the runs.
//
// Nothing listens on a socket. Workers serve on a Listener the mesh makes
// (WorkerListener) and advertise any host:port; the orchestrator reaches them by that
// address over memory.
package meshtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/server"
)

// orchestratorTarget is the address clients and workers dial the orchestrator at.
const orchestratorTarget = "passthrough:///orchestrator"

const bufSize = 1 << 20

// Mesh is an orchestrator in this process.
type Mesh struct {
	lis    *bufconn.Listener
	grpc   *grpc.Server
	srv    *server.Server
	router *router.Router
	served chan struct{}

	mu      sync.Mutex
	workers map[string]*bufconn.Listener // advertised address → listener
}

// Start starts an orchestrator whose model is the given script. A nil logger discards.
func Start(script scripted.Script, log *slog.Logger) (*Mesh, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	model, err := scripted.New(script)
	if err != nil {
		return nil, err
	}
	m := &Mesh{lis: bufconn.Listen(bufSize), served: make(chan struct{}), workers: map[string]*bufconn.Listener{}}
	cfg := config.Default()
	m.router = router.New(router.Options{Logger: log, Dial: m.dialWorker})
	m.srv, err = NewServer(compose.Options{Router: m.router, Provider: model, Config: cfg, Logger: log})
	if err != nil {
		m.router.Close()
		return nil, err
	}
	m.grpc = grpc.NewServer(server.PortOptions(cfg, log)...)
	m.srv.Register(m.grpc)
	go func() { defer close(m.served); _ = m.grpc.Serve(m.lis) }()
	return m, nil
}

// NewServer builds the run service of o and the gRPC server over it, as an orchestrator
// does, for tests that serve it themselves.
func NewServer(o compose.Options) (*server.Server, error) {
	o.Codec = server.RunCodec()
	runs, err := compose.Runs(o)
	if err != nil {
		return nil, err
	}
	return server.New(server.Options{Router: o.Router, Runs: runs, Config: &o.Config, Logger: o.Logger, Journal: o.Journal, Owner: o.Owner})
}

// Addr is the orchestrator's address for a worker (Options.Orchestrator) or a client,
// with Dialer.
func (m *Mesh) Addr() string { return orchestratorTarget }

// Dialer reaches the orchestrator over memory: the dial option a client needs (with
// insecure credentials), or a worker's Options.DialOptions.
func (m *Mesh) Dialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return m.lis.DialContext(ctx) })
}

// WorkerListener returns a listener for a worker that advertises address (any
// host:port): give it as Options.Listener with Options.Advertise set to address.
func (m *Mesh) WorkerListener(address string) net.Listener {
	m.mu.Lock()
	defer m.mu.Unlock()
	lis := bufconn.Listen(bufSize)
	m.workers[address] = lis
	return lis
}

// dialWorker is the router's Dial: the advertised address of a worker listener.
func (m *Mesh) dialWorker(address string) (*grpc.ClientConn, error) {
	m.mu.Lock()
	lis, ok := m.workers[address]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("meshtest: no worker listens at %q", address)
	}
	opts := append(router.DialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	return grpc.NewClient("passthrough:///"+address, opts...)
}

// Close stops the orchestrator: runs in progress are cancelled, workers are told the
// orchestrator is going away.
func (m *Mesh) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.srv.Shutdown(ctx)
	m.grpc.Stop()
	<-m.served
	m.router.Close()
	return errors.Join(m.lis.Close())
}
