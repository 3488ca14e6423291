package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// GenAI attribute keys, from semantic conventions v1.41.0: the newest release shipped
// with otel v1.47 that still defines them (v1.42 moved GenAI to its own registry).
const (
	KeyOperationName     = semconv.GenAIOperationNameKey         // gen_ai.operation.name
	KeyProviderName      = semconv.GenAIProviderNameKey          // gen_ai.provider.name
	KeyAgentName         = semconv.GenAIAgentNameKey             // gen_ai.agent.name
	KeyRequestModel      = semconv.GenAIRequestModelKey          // gen_ai.request.model
	KeyResponseModel     = semconv.GenAIResponseModelKey         // gen_ai.response.model
	KeyResponseID        = semconv.GenAIResponseIDKey            // gen_ai.response.id
	KeyFinishReasons     = semconv.GenAIResponseFinishReasonsKey // gen_ai.response.finish_reasons
	KeyInputTokens       = semconv.GenAIUsageInputTokensKey      // gen_ai.usage.input_tokens
	KeyOutputTokens      = semconv.GenAIUsageOutputTokensKey     // gen_ai.usage.output_tokens
	KeyTokenType         = semconv.GenAITokenTypeKey             // gen_ai.token.type
	KeyToolName          = semconv.GenAIToolNameKey              // gen_ai.tool.name
	KeyToolCallID        = semconv.GenAIToolCallIDKey            // gen_ai.tool.call.id
	KeyToolType          = semconv.GenAIToolTypeKey              // gen_ai.tool.type
	KeyToolCallArguments = semconv.GenAIToolCallArgumentsKey     // gen_ai.tool.call.arguments (opt-in)
	KeyToolCallResult    = semconv.GenAIToolCallResultKey        // gen_ai.tool.call.result (opt-in)
	KeyErrorType         = semconv.ErrorTypeKey                  // error.type
	ErrorTypeOther       = "_OTHER"                              // error.type when nothing more precise is known
	OperationChat        = "chat"
	OperationExecuteTool = "execute_tool"
	OperationInvokeAgent = "invoke_agent"
	TokenTypeInput       = "input"
	TokenTypeOutput      = "output"
	ToolTypeFunction     = "function"
	DefaultAgentName     = "toolmesh"
)

// toolmesh's own attribute keys.
const (
	KeyGroup          attribute.Key = "toolmesh.group"           // tool group of a tool or worker
	KeyWorkerID       attribute.Key = "toolmesh.worker.id"       // worker that served (or was tried for) a call
	KeyAttempts       attribute.Key = "toolmesh.attempts"        // replicas a tool call was sent to, failover included
	KeyAttempt        attribute.Key = "toolmesh.attempt"         // number of one attempt, on replica events
	KeyFailoverReason attribute.Key = "toolmesh.failover.reason" // why an attempt was sent elsewhere
	KeyRunID          attribute.Key = "toolmesh.run.id"
	KeyLoopID         attribute.Key = "toolmesh.loop.id"
	KeyOutcome        attribute.Key = "toolmesh.outcome"       // outcome of a tool call or a run
	KeyToolsAdded     attribute.Key = "toolmesh.tools.added"   // tool names that became visible
	KeyToolsRemoved   attribute.Key = "toolmesh.tools.removed" // tool names that stopped being visible
)

// ContextAttributePrefix + a ToolCallContext key is the attribute of an allow-listed
// context value.
const ContextAttributePrefix = "toolmesh.context."

// Span event names.
const (
	EventToolsChanged  = "toolmesh.tools.changed"
	EventReplicaChosen = "toolmesh.replica.chosen"
	EventFailover      = "toolmesh.failover"
	EventOverloaded    = "toolmesh.overloaded" // a call not sent: every replica at its in-flight bound
)

// Outcomes used when a call site gives none.
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
)
