package otelsetup_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/otelsetup"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// A worker's main sets the SDK up from the environment, hands the providers to
// pkg/worker, serves /metrics, and shuts the SDK down last. With no OTEL_* variable set,
// as here, traces go nowhere and metrics (with Prometheus) to MetricsHandler.
func Example() {
	ctx := context.Background()
	p, err := otelsetup.FromEnv(ctx, otelsetup.Options{ServiceName: "inventory-worker", Prometheus: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = p.Shutdown(ctx) }()

	stock := tool.MustFunc("stock_level", "Units in stock for a SKU",
		func(context.Context, struct{ SKU string }) (int, error) { return 7, nil })
	w, err := worker.New(worker.Options{
		Orchestrator:   "127.0.0.1:7070",
		ID:             "inventory-1",
		TracerProvider: p.TracerProvider,
		MeterProvider:  p.MeterProvider,
	}, worker.Group{Role: "inventory", Description: "Inventory tools", Tools: []tool.Tool{stock}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worker", w.ID(), "traced and metered") // w.Run(ctx) would serve

	// Anything recorded through the providers is on /metrics (p.ServeMetrics serves it on
	// an address of its own).
	orders, _ := p.MeterProvider.Meter("inventory").Int64Counter("inventory.orders")
	orders.Add(ctx, 3)
	rec := httptest.NewRecorder()
	p.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for sc := bufio.NewScanner(rec.Body); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "inventory_orders") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// worker inventory-1 traced and metered
	// inventory_orders_total{otel_scope_name="inventory",otel_scope_schema_url="",otel_scope_version=""} 3
}
