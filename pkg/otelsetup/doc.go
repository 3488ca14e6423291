// Package otelsetup builds a process's OpenTelemetry SDK from the standard OTEL_*
// environment variables: a TracerProvider and a MeterProvider, a Prometheus /metrics
// handler, and a Shutdown that flushes what is buffered. The toolmesh binaries use it,
// and so can the program of a worker author:
//
//	p, err := otelsetup.FromEnv(ctx, otelsetup.Options{ServiceName: "inventory-worker"})
//	if err != nil {
//		return err
//	}
//	defer func() { _ = p.Shutdown(shutdownCtx) }() // flushes the last spans; give it a deadline
//	w, err := worker.New(worker.Options{
//		Orchestrator:   "orchestrator:7070",
//		TracerProvider: p.TracerProvider, // a server span and an execute_tool span per call
//		MeterProvider:  p.MeterProvider,  // toolmesh.worker.calls.in_flight, call durations
//	}, group)
//
// Then OTEL_TRACES_EXPORTER=otlp and OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318
// send the worker's spans to a collector, joined to the orchestrator's trace of the run.
//
// The exporters come from the OpenTelemetry autoexport package
// (go.opentelemetry.io/contrib/exporters/autoexport), so the OTLP exporters read their
// own variables (OTEL_EXPORTER_OTLP_PROTOCOL, default http/protobuf, and the endpoint,
// headers, timeout, compression and certificate variables, general or per signal); the
// SDK reads the sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), the batching
// (OTEL_BSP_*) and the metric export interval (OTEL_METRIC_EXPORT_INTERVAL). This
// package adds what autoexport leaves to its caller:
//
//   - OTEL_TRACES_EXPORTER: otlp, console or none; unset means none, so that a process
//     never tries to reach a collector nobody configured. console writes to
//     Options.Console.
//   - OTEL_METRICS_EXPORTER: otlp, prometheus, console or none; unset means prometheus
//     with Options.Prometheus and none without. prometheus keeps the metrics in a
//     registry of this process, served by MetricsHandler and ServeMetrics at the address
//     the program chooses (the binaries' --metrics-listen), with the Go runtime and
//     process collectors.
//   - The resource: service.name from Options.ServiceName, overridden by
//     OTEL_RESOURCE_ATTRIBUTES and then by OTEL_SERVICE_NAME, plus the telemetry.sdk.*
//     attributes.
//   - OTEL_SDK_DISABLED=true: no-op providers, nothing exported or served.
//   - OTEL_PROPAGATORS: toolmesh propagates W3C tracecontext only, never baggage, so that
//     context entries cannot travel past the orchestrator's per-group converters; any
//     other value is ignored with a warning to Options.Logger.
//   - Spans an exporter failed to export are counted, and Shutdown reports them.
//
// The package imports the SDK and every exporter autoexport knows. Only a main package
// should import it, never a library: pkg/worker takes plain providers, so that a worker
// that never calls FromEnv links none of it. It imports no other toolmesh package.
package otelsetup
