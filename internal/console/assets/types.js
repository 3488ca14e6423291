// @ts-check
// The messages of toolmesh.v1.OrchestratorService the console reads and writes, as the
// proto3 JSON mapping writes them: lowerCamelCase names, enums by name, int64 as strings,
// Timestamps as RFC 3339 strings, Durations as "1.5s", bytes in base64. A field at its
// default value (0, "", false, an empty list, the enum's zero) is left out, so every
// field is optional here. This module holds types only.

/**
 * @typedef {Object} BlackboardObject
 * @property {string} [typeName]
 * @property {string} [json] the object as JSON text; empty for a blob
 * @property {string} [name] the name bound to it
 * @property {string} [data] a blob's bytes, base64
 * @property {string} [mediaType]
 * @property {string} [size] a blob's size in bytes (int64)
 */

/**
 * @typedef {Object} Artifact
 * @property {string} [typeName]
 * @property {string} [json]
 * @property {string} [data]
 * @property {string} [mediaType]
 */

/**
 * @typedef {Object} Asset
 * @property {BlackboardObject} [object]
 * @property {string} [tool]
 * @property {string} [callId]
 */

/**
 * @typedef {Object} Usage
 * @property {string} [model]
 * @property {string} [inputTokens] int64
 * @property {string} [outputTokens] int64
 * @property {number} [costUsd]
 */

/**
 * @typedef {Object} RunError
 * @property {string} [code] a google.rpc.Code name, such as "CANCELLED"
 * @property {string} [message]
 * @property {string} [reason] an ErrorReason name, such as "ERROR_REASON_CANCELLED"
 */

/**
 * @typedef {Object} LoopScope
 * @property {string} [loopId]
 * @property {string} [parentLoopId]
 * @property {string} [tool]
 * @property {string} [kind] an AgenticKind name
 * @property {number} [depth]
 * @property {string} [childRunId]
 * @property {string} [parentCallId] the call of the agentic tool, in the parent loop, that started it
 */

/**
 * @typedef {Object} RunResponse one event of a run. Exactly one of the event fields is set.
 * @property {string} [runId]
 * @property {string} [sequence] int64
 * @property {string} [time] RFC 3339
 * @property {LoopScope} [scope]
 * @property {{model?: string, tools?: string[], loopId?: string, maxIterations?: number}} [started]
 * @property {{callId?: string, tool?: string, argumentsJson?: string, iteration?: number, loopId?: string}} [toolCallStarted]
 * @property {{callId?: string, tool?: string, outcome?: string, content?: string, workerId?: string, duration?: string, artifact?: Artifact, attempts?: number, loopId?: string}} [toolCallFinished]
 * @property {{text?: string, iteration?: number, loopId?: string}} [message]
 * @property {Usage} [usage]
 * @property {{text?: string, iterations?: number, returnDirect?: boolean, usage?: Usage}} [finalResult]
 * @property {RunError} [error]
 * @property {{added?: string[], removed?: string[], tools?: string[], iteration?: number, loopId?: string}} [toolsChanged]
 * @property {{loopId?: string, callId?: string, tool?: string, sink?: string, object?: BlackboardObject}} [artifact]
 * @property {{loopId?: string, callId?: string, tool?: string, object?: BlackboardObject, index?: number}} [blackboardChanged]
 * @property {{loopId?: string, callId?: string, tool?: string, status?: string}} [progress]
 * @property {{loopId?: string, callId?: string, text?: string}} [messageToUser]
 * @property {{loopId?: string, callId?: string, tool?: string, reason?: string, added?: BlackboardObject[], iterations?: number}} [replanRequested]
 * @property {{loopId?: string, callId?: string, tool?: string, scope?: string, reason?: string}} [terminated]
 * @property {{loopId?: string, iteration?: number, text?: string}} [textDelta]
 * @property {{loopId?: string, asset?: Asset}} [assetAdded]
 * @property {{field?: string, message?: string}} [warning]
 * @property {{model?: string, tools?: string[], maxIterations?: number}} [nestedLoopStarted]
 * @property {{iterations?: number, toolCalls?: number, error?: string}} [nestedLoopFinished]
 * @property {{callId?: string, tool?: string, argumentsJson?: string, loopId?: string, iteration?: number, deadline?: string, input?: {inputId?: string, message?: string, requestedSchemaJson?: string, server?: string, protocolVersion?: string}}} [approvalRequested]
 * @property {{callId?: string, tool?: string, loopId?: string, approved?: boolean, reason?: string, decidedBy?: string, inputId?: string, contentJson?: string}} [approvalDecided]
 */

/**
 * @typedef {Object} RunSummary
 * @property {string} [runId]
 * @property {string} [state] a RunState name
 * @property {string} [owner]
 * @property {string} [started]
 * @property {string} [updated]
 * @property {string} [records] int64
 * @property {string} [tenant]
 * @property {string} [agent]
 */

/**
 * @typedef {Object} ListRunsRequest
 * @property {string} [state]
 * @property {number} [pageSize]
 * @property {string} [pageToken]
 * @property {string} [tenant]
 * @property {string} [agent]
 * @property {string} [startedAfter]
 * @property {string} [startedBefore]
 */

/**
 * @typedef {Object} ListRunsResponse
 * @property {RunSummary[]} [runs]
 * @property {string} [nextPageToken]
 */

/**
 * @typedef {Object} LoopInfo
 * @property {LoopScope} [scope]
 * @property {number} [iterations]
 * @property {number} [toolCalls]
 * @property {boolean} [running]
 * @property {string} [error]
 */

/**
 * @typedef {Object} Budget
 * @property {number} [maxCostUsd]
 * @property {number} [costUsd]
 * @property {string} [maxTokens] int64
 * @property {string} [tokens] int64
 * @property {number} [maxActions]
 * @property {number} [actions]
 */

/**
 * @typedef {Object} GetRunResponse
 * @property {string} [runId]
 * @property {string} [state]
 * @property {number} [iterations]
 * @property {number} [toolCalls]
 * @property {string} [finalText]
 * @property {RunError} [error]
 * @property {string} [startedAt]
 * @property {string} [endedAt]
 * @property {Usage} [usage]
 * @property {BlackboardObject[]} [blackboard]
 * @property {Budget} [budget]
 * @property {Asset[]} [assets]
 * @property {string} [reason]
 * @property {number} [blackboardOmitted]
 * @property {number} [assetsOmitted]
 * @property {LoopInfo[]} [loops]
 * @property {string} [traceId]
 * @property {string} [model]
 * @property {string} [tenant]
 * @property {string} [agent]
 */

/**
 * @typedef {Object} WorkerStatus
 * @property {string} [workerId]
 * @property {string} [address]
 * @property {string[]} [groups]
 * @property {string} [state] a WorkerState name
 * @property {number} [inFlight]
 * @property {string} [calls] int64
 * @property {number} [capacity]
 * @property {string} [registeredAt]
 * @property {string} [version] the worker program's version
 * @property {string} [ejectedUntil] Timestamp, while EJECTED
 */

/**
 * @typedef {Object} ToolGroupStatus
 * @property {{role?: string, description?: string, provider?: string, version?: string, usageNotes?: string}} [group]
 * @property {string[]} [tools]
 * @property {string[]} [workerIds]
 * @property {string} [source]
 */

/**
 * @typedef {Object} TenantUsage
 * @property {string} [tenant]
 * @property {number} [runningRuns]
 * @property {number} [maxConcurrentRuns] 0: unbounded
 * @property {number} [toolCallsPerMinute] 0: unbounded
 * @property {number} [toolCallsAvailable]
 * @property {number} [modelCallsPerMinute] 0: unbounded
 * @property {number} [modelCallsAvailable]
 */

/**
 * @typedef {Object} ConsoleConfig what config.json tells the page
 * @property {string} traceUrl
 * @property {boolean} tenancy
 */

export {};
