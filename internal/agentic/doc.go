// Package agentic will hold toolmesh's agentic tools: simple, playbook and
// state-machine tools declared as specs by clients, whose nested loops run in the
// orchestrator, plus tool chaining from returned domain objects.
//
// It sits above internal/loop and internal/decorators and below internal/server; like the
// loop, it must not import gRPC, generated protos or the router.
package agentic
