// Package telemetry owns toolmesh's OpenTelemetry setup: tracer and meter providers
// configured from the standard OTEL_* environment variables, the otelgrpc stats handlers
// for every gRPC server and client, span helpers that follow the GenAI semantic
// conventions (invoke_agent, chat, execute_tool), the metric instruments, a Prometheus
// /metrics handler, and a log/slog handler that stamps records with trace, span, run and
// loop ids.
//
// Trace context crosses process boundaries as W3C tracecontext only: no baggage, which
// would carry entries past the per-group ToolCallContext converters.
//
// It sits at the bottom of the dependency graph: it imports no other toolmesh package.
package telemetry
