// Package telemetry is the OpenTelemetry API side of toolmesh: a Telemetry built over
// tracer and meter providers (FromProviders), the otelgrpc stats handlers for every gRPC
// server and client, span helpers that follow the GenAI semantic conventions
// (invoke_agent, chat, execute_tool), the metric instruments, and a log/slog handler that
// stamps records with trace, span, run, loop and call ids.
//
// It records through the OpenTelemetry API only and must not import the SDK
// (go.opentelemetry.io/otel/sdk/...), any exporter, the Prometheus client or autoexport:
// pkg/worker links it, and a worker author's binary should carry what a worker needs,
// not every exporter. Building SDK providers from the OTEL_* variables, exporting and
// serving /metrics belong to pkg/otelsetup.
//
// Trace context crosses process boundaries as W3C tracecontext only: no baggage, which
// would carry entries past the per-group ToolCallContext converters.
//
// It sits near the bottom of the dependency graph: of toolmesh it imports only pkg/tool,
// whose call info carries the run, loop and call ids the log handler stamps, and
// pkg/toolctx, which says what a credential key is (never recorded on a span).
package telemetry
