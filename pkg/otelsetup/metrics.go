package otelsetup

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the Prometheus exposition of the metrics: mount it at /metrics.
// It always answers with a valid exposition, empty when metrics do not go to prometheus
// (or p is nil), so probes and scrapers never see an error.
func (p *Providers) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	if p != nil && p.registry != nil {
		reg = p.registry
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// MetricsServer serves MetricsHandler at /metrics on its own listener, apart from the
// gRPC port, so that scraping needs no gRPC and the port can be policed separately.
type MetricsServer struct {
	srv  *http.Server
	lis  net.Listener
	done chan error
}

// ServeMetrics starts serving /metrics on addr ("127.0.0.1:0" picks a port) until
// Shutdown.
func (p *Providers) ServeMetrics(addr string) (*MetricsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.MetricsHandler())
	m := &MetricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		lis:  lis,
		done: make(chan error, 1),
	}
	go func() { m.done <- m.srv.Serve(lis) }()
	return m, nil
}

// Addr is the address the server listens on.
func (m *MetricsServer) Addr() string { return m.lis.Addr().String() }

// Shutdown stops the server, waiting for scrapes in progress until ctx ends.
func (m *MetricsServer) Shutdown(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serveErr := <-m.done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return err
}
