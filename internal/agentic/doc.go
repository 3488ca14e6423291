// Package agentic holds toolmesh's agentic tools: tools whose call runs a nested tool
// loop over sub-tools, in the orchestrator. There are three kinds: simple (every sub-tool
// visible), playbook (sub-tools locked until their conditions hold) and state machine
// (sub-tools available in some states, moving the machine on success). Clients declare
// them as specs in a run request and operators in the config; both compile here (Compile)
// into tool.Tool values.
//
// An agentic tool needs the run it is called in: the run puts a Nester in the call's
// context, which decorates sub-tools as the run decorates its own, runs nested loops
// with their own loop ids, and bounds how deep and how many they nest. A spec's system
// prompt may be a template (ParsePrompt), rendered for each call over its arguments, the
// run's context less the keys the run hides (Hider), and the run's blackboard. Likewise a
// chaining source's predicate reads the run's blackboard and context less the hidden
// keys (Bindings.Hiding): the config that names the secrets lives in internal/config,
// above this package, so the run passes them in.
//
// It sits above internal/loop and internal/decorators and below internal/run; like the
// loop, it must not import gRPC, generated protos or the router.
package agentic
