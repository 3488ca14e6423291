// Package tool is toolmesh's public tool model: definitions, input schemas, results,
// typed tools built from Go functions, transparent wrappers and tool objects.
//
// It is the contract between tool authors (in-process or on a worker) and the
// orchestrator's loop. It imports pkg/schema and, of the internal packages, only the two
// it shares with the engine (internal/jsontree, internal/toolinternal); it must not
// import gRPC or generated protos.
package tool

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// Tool is something the model can call.
//
// Call receives the raw JSON arguments the model produced (already validated against
// the input schema when the call comes through the orchestrator's loop). The
// ToolCallContext of the call travels in ctx. Ordinary failures are returned as an
// error Result so that the model can act on them; the returned error is reserved for
// control-flow signals (see Signal) that the loop itself must react to.
type Tool interface {
	Definition() Definition
	Metadata() Metadata
	Call(ctx context.Context, input string) (Result, error)
}

// Definition is what the model sees of a tool, plus application metadata it never sees.
type Definition struct {
	// Name the model calls the tool by.
	Name string
	// Description shown to the model.
	Description string
	// InputSchema is the JSON schema.Schema of the arguments.
	InputSchema schema.Schema
	// Metadata is application-level data; it is never sent to the model.
	Metadata map[string]string
}

// Metadata is how the loop and the router treat a tool.
type Metadata struct {
	// ReturnDirect makes the tool's result the final answer of the loop.
	ReturnDirect bool
	// Idempotent allows the router to re-send a call whose outcome is unknown.
	Idempotent bool
	// Timeout bounds one call; zero means the caller's default.
	Timeout time.Duration
	// Needs names blackboard types the tool reads: each call receives the newest object
	// of each of them on its Blackboard (see BlackboardFrom), on any replica.
	Needs []string
	// ReportsProgress says that the tool reports progress while it runs (see Progress):
	// a remote tool's calls then travel on a stream that carries the reports.
	ReportsProgress bool
	// ReceiverType makes the tool a method of a domain type (see MethodOf).
	ReceiverType string
	// RequiresApproval makes every call wait for a person's approval before it is sent
	// (see RequiresApproval).
	RequiresApproval bool
	// OncePerLoop makes the tool run at most once per tool loop: a later call in the same
	// loop is answered with the ALREADY LOADED text followed by OnceAdvice, without
	// running the tool (see toolctx.OneShotPerLoop, which sets both). The orchestrator
	// keeps the count, so it holds whichever replica of a worker would serve the call.
	OncePerLoop bool
	OnceAdvice  string
}

// Delegating is implemented by every wrapper: it exposes the wrapped tool so that
// callers can find the tool underneath (for example a facade under a rename).
type Delegating interface {
	Tool
	Delegate() Tool
}

// Unwrap follows Delegate until it reaches a tool that wraps nothing.
func Unwrap(t Tool) Tool {
	for {
		d, ok := t.(Delegating)
		if !ok {
			return t
		}
		t = d.Delegate()
	}
}

// ResultKind says which form a Result has.
type ResultKind int

// The forms of a Result.
const (
	KindText ResultKind = iota
	KindArtifact
	KindError
)

// String names the kind.
func (k ResultKind) String() string {
	switch k {
	case KindText:
		return "text"
	case KindArtifact:
		return "artifact"
	case KindError:
		return "error"
	default:
		return "unknown"
	}
}

// Result is the outcome of a tool call. Only Content reaches the model; the artifact is
// for sinks, the blackboard and the client.
type Result struct {
	Kind ResultKind
	// Content is the text for the model (for an error: the error message).
	Content string
	// Artifact is set when Kind is KindArtifact.
	Artifact *Artifact
	// Parts, when set, is the content as the tool gave it, in order: text, images, audio
	// and resources (an MCP server's content). Content is then its text for a model that
	// reads text alone, with a placeholder for each part that is not text; a provider
	// that takes images in a tool result gets them too, and the MCP endpoint passes the
	// parts on as they came; a run's journal keeps them, so that a resumed run replays
	// them. Parts stay in the orchestrator's process: a worker's result crosses the wire
	// as its text and artifact. A pointer, so that a Result stays comparable.
	Parts *Parts
	// Code classifies an error result; empty otherwise.
	Code ErrorCode
	// Cause is the Go error behind an error result, when there is one. It stays in process.
	Cause error
}

// Artifact is a structured tool output.
type Artifact struct {
	// TypeName names the artifact's type, so type filters work across the wire.
	TypeName string
	// JSON is the artifact as JSON, when it is a value.
	JSON json.RawMessage
	// Data is the artifact as bytes, when it is a blob (a PNG chart, a PDF). A blob goes
	// to sinks, assets and an agentic tool's result as a JSON value does, as an Entry
	// with Data and MediaType.
	Data []byte
	// MediaType describes Data, such as "image/png" (see CheckMediaType); empty means
	// "application/octet-stream".
	MediaType string
	// Value is the in-process Go value, when the artifact was produced in this process.
	Value any
}

// ErrorCode classifies an error result.
type ErrorCode string

// Error codes. They map one to one to the wire's ToolErrorCode.
const (
	CodeFailed           ErrorCode = "FAILED"
	CodeInvalidArguments ErrorCode = "INVALID_ARGUMENTS"
	CodeUnknownTool      ErrorCode = "UNKNOWN_TOOL"
	CodeTimeout          ErrorCode = "TIMEOUT"
	CodePanic            ErrorCode = "PANIC"
	CodeUnavailable      ErrorCode = "UNAVAILABLE"
)

// Text returns a text result.
func Text(content string) Result { return Result{Kind: KindText, Content: content} }

// ArtifactResult returns a result whose content goes to the model and whose artifact goes
// to sinks.
func ArtifactResult(content string, a Artifact) Result {
	return Result{Kind: KindArtifact, Content: content, Artifact: &a}
}

// Error returns an error result with the given message for the model.
func Error(message string) Result {
	return Result{Kind: KindError, Content: message, Code: CodeFailed}
}

// ErrorWithCode returns an error result with a classification.
func ErrorWithCode(code ErrorCode, message string) Result {
	return Result{Kind: KindError, Content: message, Code: code}
}

// ErrorFrom returns an error result carrying err as its cause. A nil or message-less
// error gives the message "Tool invocation failed".
func ErrorFrom(err error) Result {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == "" {
		msg = "Tool invocation failed"
	}
	return Result{Kind: KindError, Content: msg, Code: CodeFailed, Cause: err}
}

// IsError reports whether the result is an error.
func (r Result) IsError() bool { return r.Kind == KindError }

// Render is the text the model receives for the result: the content, or
// "Error: <message>" for an error.
func (r Result) Render() string {
	if r.Kind == KindError {
		return "Error: " + r.Content
	}
	return r.Content
}
