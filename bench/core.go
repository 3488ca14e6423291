package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/meshtest"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// core is the orchestrator's machinery inside the benchmark process: a router, the
// server adapters (registry and OrchestratorService) and a gRPC server on loopback, wired
// as cmd/orchestrator wires them. Workers register with it over the network, so calls
// through its router cross a real process boundary, while its CPU is the benchmark's own
// and shows in the benchmark's profile.
type core struct {
	router *router.Router
	owns   bool // close closes the router too
	srv    *server.Server
	grpc   *grpc.Server
	addr   string
}

type coreOptions struct {
	// dial replaces the router's Dial (telemetry on); nil keeps the router's default.
	dial     func(string) (*grpc.ClientConn, error)
	provider llm.Provider
	// tel is handed to the router and the server as cmd/orchestrator hands it; nil: off.
	tel *telemetry.Telemetry
	// certs turns mutual TLS on as cmd/orchestrator does (tls.* and trust.workers in cfg):
	// the server's credentials and authorisation, the router dialling each worker
	// expecting its identity.
	certs *trust.Source
	cfg   *config.Config
	// journal records the core's runs; nil keeps them in memory only.
	journal runlog.Store
}

func startCore(o coreOptions) (*core, error) {
	ro := router.Options{Dial: o.dial, Telemetry: o.tel, Logger: slog.New(slog.DiscardHandler)}
	if o.certs != nil {
		ro.CallToken = o.certs.MintCallToken
		ro.DialAs = func(address, identity string) (*grpc.ClientConn, error) {
			id, err := trust.ParseID(identity)
			if err != nil {
				return nil, err
			}
			return grpc.NewClient(address, append(router.DialOptions(), grpc.WithTransportCredentials(o.certs.ClientCredentials(id)))...)
		}
	}
	rt := router.New(ro)
	c, err := serveWith(rt, o.provider, o.tel, o.journal, o.certs, o.cfg)
	if err != nil {
		rt.Close()
		return nil, err
	}
	c.owns = true
	return c, nil
}

// startCoreWith serves a router someone else owns: close leaves it open. A journal, when
// given, records its runs.
func startCoreWith(rt *router.Router, provider llm.Provider, journal runlog.Store) (*core, error) {
	return serve(rt, provider, nil, journal)
}

func serve(rt *router.Router, provider llm.Provider, tel *telemetry.Telemetry, journal runlog.Store) (*core, error) {
	return serveWith(rt, provider, tel, journal, nil, nil)
}

func serveWith(rt *router.Router, provider llm.Provider, tel *telemetry.Telemetry, journal runlog.Store, certs *trust.Source, cfg *config.Config) (*core, error) {
	log := slog.New(slog.DiscardHandler)
	conf := config.Default()
	if cfg != nil {
		conf = *cfg
	}
	srv, err := meshtest.NewServer(compose.Options{Router: rt, Provider: provider, Telemetry: tel, Logger: log, Journal: journal, Owner: "bench", Config: conf})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := config.Default()
	if cfg != nil {
		served = *cfg
	}
	// The options cmd/orchestrator serves with: its interceptor, bounds and flow control.
	opts := append(server.PortOptions(served, log), tel.ServerOptions()...)
	if certs != nil {
		opts = append(append(opts, grpc.Creds(certs.ServerCredentials(false))), srv.AuthOptions()...)
	}
	g := grpc.NewServer(opts...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	return &core{router: rt, srv: srv, grpc: g, addr: lis.Addr().String()}, nil
}

// waitTool waits until a worker serving name has registered.
func (c *core) waitTool(ctx context.Context, name string) error {
	for {
		if _, err := c.router.Tool(name); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a worker serving %q to register: %w", name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *core) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
	c.grpc.Stop()
	if c.owns {
		c.router.Close()
	}
}
