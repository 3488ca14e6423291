// Package bench is toolmesh's benchmark harness: the cost of a hop and of a
// loop, side by side with the limit (a raw grpc-go call) and with MCP (the official Go
// SDK), measured in one run on loopback and written as bench/results/latest.md and
// latest.json.
//
// Variants, run in round-robin rounds so that drift of the machine affects them alike:
//
//	limit        raw grpc-go unary call to bench/cmd/rawadd (ToolWorkerService, hand-written handler)
//	limit+4md    the same with the four context entries as metadata (informative)
//	hop          router.Tool("add") + decorators.Default() → bin/toolworker --groups math
//	hop+otel     the same with telemetry on (an execute_tool span a side, batching OTLP exporters to an in-process receiver)
//	hop+mtls     the hop with mutual TLS on both sides, on a long-lived connection
//	mcp-http     the Go MCP SDK's client → bench/cmd/mcpadd over streamable HTTP, one session
//	mcp-stdio    the same over stdio
//	mcp-group    toolmesh's MCP hop: mcpadd's add as an MCP group in the run's decorator chain
//	mcp-everything  the same hop to the echo of @modelcontextprotocol/server-everything (when installed)
//	inproc       a direct Go call with JSON decode and encode
//	loop-grpc    a whole Run over gRPC with the scripted model making N tool calls
//	loop-nested  the same N calls in one agentic tool's nested loop (one level of nesting)
//	loop-inproc  loop.Run in process with a no-op local tool
//
// For each: p50 and p99 at concurrency 1, throughput and CPU per call (both processes) at
// concurrency 32, allocations per call. Besides: the orchestrator's memory per open run,
// routing-table lookups at 10 to 100,000 tools and first-request tool definitions at 10
// to 10,000, facades at 1,000 and 10,000 tools, the registration of 100 workers (and of
// 1,000 in the first round), a quiet tenant's run latency alone and while another tenant
// floods the mutual-TLS orchestrator within its limits (bench/cmd/flood: a thousand runs
// at once, 100 MiB requests, 10,000-message conversations; then again ignoring
// RetryInfo), toolmesh's loop against cloudwego/eino's ReAct agent (bench/cmd/looppeer
// and bench/peers/eino, each in its own process with the same fake model, tool and
// measurement code), and the performance goals judged on this run's ratios, with a CPU
// profile of the benchmark process for each missed toolmesh goal.
//
// Run it with make bench (a few minutes) or make bench-quick (under a minute); both
// build bin/ first. cmd/benchrun builds nothing itself. The package imports whatever it
// measures (router, server, loop, worker SDK, telemetry); nothing imports it.
package bench
