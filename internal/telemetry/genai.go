package telemetry

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// The spans of a run follow the OpenTelemetry GenAI conventions:
//
//	invoke_agent toolmesh          INTERNAL  StartRun / EndRun     (orchestrator)
//	├── chat {model}               CLIENT    StartChat / EndChat   (each model call)
//	└── execute_tool {tool}        INTERNAL  StartTool / EndTool   (each tool call)
//	    └── toolmesh.v1.ToolWorkerService/Invoke   CLIENT  (otelgrpc, one per attempt)
//	        └── .../Invoke         SERVER    (otelgrpc, in the worker)
//	            └── execute_tool {tool}  INTERNAL  StartTool / EndTool (worker SDK)
//
// The End functions end the span and record the matching metrics, so a call site that
// uses them calls no Record function for the same operation. Pass them the span the
// Start function returned: it carries the start time and the metric attributes.

// opSpan is a span that remembers what its End function needs for the metrics.
type opSpan struct {
	trace.Span
	start    time.Time
	provider string // chat
	model    string // chat
	tool     string // execute_tool
	group    string // execute_tool
}

func (t *Telemetry) start(ctx context.Context, name string, kind trace.SpanKind, attrs []attribute.KeyValue) (context.Context, *opSpan) {
	ctx, s := t.Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, &opSpan{Span: s, start: time.Now()}
}

// noSpan is the span of a tool call when nothing is recorded: ending it ends nothing.
var noSpan = trace.SpanFromContext(context.Background())

// unrecorded is a span that records nothing and carries the span context of the span in
// ctx: noSpan when there is none.
func unrecorded(ctx context.Context) trace.Span {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return noSpan
	}
	return &contextSpan{Span: noSpan, sc: sc}
}

// contextSpan is a span that records nothing, with the span context of another (the
// caller's): ending it ends neither.
type contextSpan struct {
	trace.Span
	sc trace.SpanContext
}

// SpanContext is the span context of the span contextSpan stands for.
func (s *contextSpan) SpanContext() trace.SpanContext { return s.sc }

// spanContext returns a context holding only s, for recording metrics with exemplars
// without keeping the caller's context.
func spanContext(s trace.Span) context.Context {
	return trace.ContextWithSpan(context.Background(), s)
}

// markFailed marks s as failed: error.type (ErrorTypeOther when errType is empty), the error
// as an exception event, status Error.
func markFailed(s trace.Span, errType string, err error) string {
	if errType == "" {
		errType = ErrorTypeOther
	}
	errType = validText(errType) // an in-process tool's own error code
	s.SetAttributes(KeyErrorType.String(errType))
	if err != nil {
		if msg := err.Error(); !utf8.ValidString(msg) {
			err = errors.New(validText(msg))
		}
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	} else {
		s.SetStatus(codes.Error, errType)
	}
	return errType
}

// validText is s with the bytes that are not UTF-8 replaced by U+FFFD: OTLP's protocol
// buffers refuse to encode such a string, and the exporter then drops the whole batch
// it is in, other spans with it.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// RunAttrs describe a run for StartRun.
type RunAttrs struct {
	RunID  string
	LoopID string // the run's top-level loop, when known at start
	// AgentName is gen_ai.agent.name and the span name's suffix; default "toolmesh".
	AgentName string
	Provider  string // gen_ai.provider.name, when the run uses one provider
	Model     string // gen_ai.request.model, when the run asks for one model
}

// StartRun starts the invoke_agent span of a run. When nothing is recorded it starts
// none: ctx stays as it is, and the span returned only carries the span context ctx
// holds (the caller's, for the run's trace ID), ending nothing when ended.
func (t *Telemetry) StartRun(ctx context.Context, a RunAttrs) (context.Context, trace.Span) {
	if t.Off() {
		return ctx, unrecorded(ctx)
	}
	name := a.AgentName
	if name == "" {
		name = DefaultAgentName
	}
	attrs := []attribute.KeyValue{
		KeyOperationName.String(OperationInvokeAgent),
		KeyAgentName.String(name),
	}
	if a.RunID != "" {
		attrs = append(attrs, KeyRunID.String(a.RunID))
	}
	if a.LoopID != "" {
		attrs = append(attrs, KeyLoopID.String(a.LoopID))
	}
	if a.Provider != "" {
		attrs = append(attrs, KeyProviderName.String(a.Provider))
	}
	if a.Model != "" {
		attrs = append(attrs, KeyRequestModel.String(a.Model))
	}
	return t.start(ctx, OperationInvokeAgent+" "+name, trace.SpanKindInternal, attrs)
}

// RunResult is how a run ended, for EndRun.
type RunResult struct {
	// Outcome is a low-cardinality word such as "completed", "max_iterations",
	// "budget_exceeded", "cancelled", "error"; default "ok", or "error" when failed.
	Outcome string
	// ErrorType and Err say why the run failed (error.type: a gRPC code or reason such
	// as "BUDGET_EXCEEDED"; default "_OTHER" when only Err is set).
	ErrorType string
	Err       error
	// Totals over the run's model calls.
	InputTokens, OutputTokens int64
}

// EndRun ends a StartRun span and records toolmesh.run.duration.
func (t *Telemetry) EndRun(span trace.Span, r RunResult) {
	if span == nil {
		return
	}
	failed := r.Err != nil || r.ErrorType != ""
	if r.Outcome == "" {
		r.Outcome = OutcomeOK
		if failed {
			r.Outcome = OutcomeError
		}
	}
	span.SetAttributes(KeyOutcome.String(r.Outcome))
	if r.InputTokens > 0 || r.OutputTokens > 0 {
		span.SetAttributes(KeyInputTokens.Int64(r.InputTokens), KeyOutputTokens.Int64(r.OutputTokens))
	}
	if failed {
		markFailed(span, r.ErrorType, r.Err)
	}
	span.End()
	if s, ok := span.(*opSpan); ok {
		t.RecordRun(spanContext(s.Span), r.Outcome, time.Since(s.start))
	}
}

// StartChat starts the span of one model call: "chat {model}", kind CLIENT. provider is
// gen_ai.provider.name ("openai", "anthropic", or the provider's own name such as
// "scripted").
func (t *Telemetry) StartChat(ctx context.Context, provider, model string) (context.Context, trace.Span) {
	name := OperationChat
	attrs := []attribute.KeyValue{KeyOperationName.String(OperationChat), KeyProviderName.String(provider)}
	if model != "" {
		name += " " + model
		attrs = append(attrs, KeyRequestModel.String(model))
	}
	ctx, s := t.start(ctx, name, trace.SpanKindClient, attrs)
	s.provider, s.model = provider, model
	return ctx, s
}

// ChatResult is what a model call returned, for EndChat.
type ChatResult struct {
	InputTokens   int64
	OutputTokens  int64
	FinishReasons []string
	ResponseModel string
	ResponseID    string
	// ErrorType and Err say why the call failed (error.type: the provider's error code or
	// HTTP status; default "_OTHER").
	ErrorType string
	Err       error
}

// EndChat ends a StartChat span and records gen_ai.client.operation.duration and, for a
// call that succeeded, gen_ai.client.token.usage.
func (t *Telemetry) EndChat(span trace.Span, r ChatResult) {
	if span == nil {
		return
	}
	failed := r.Err != nil || r.ErrorType != ""
	if !failed {
		span.SetAttributes(KeyInputTokens.Int64(r.InputTokens), KeyOutputTokens.Int64(r.OutputTokens))
	}
	if len(r.FinishReasons) > 0 {
		span.SetAttributes(KeyFinishReasons.StringSlice(r.FinishReasons))
	}
	if r.ResponseModel != "" {
		span.SetAttributes(KeyResponseModel.String(r.ResponseModel))
	}
	if r.ResponseID != "" {
		span.SetAttributes(KeyResponseID.String(r.ResponseID))
	}
	errType := ""
	if failed {
		errType = markFailed(span, r.ErrorType, r.Err)
	}
	span.End()
	s, ok := span.(*opSpan)
	if !ok {
		return
	}
	ctx := spanContext(s.Span)
	t.recordChatDuration(ctx, s.provider, s.model, r.ResponseModel, errType, time.Since(s.start))
	if !failed {
		t.RecordTokens(ctx, s.provider, s.model, r.InputTokens, r.OutputTokens)
	}
}

// ToolAttrs describe a tool call for StartTool.
type ToolAttrs struct {
	Name   string
	CallID string
	Type   string // gen_ai.tool.type; default "function"
	Group  string // toolmesh.group; empty for tools that run in the orchestrator
	// Served marks a worker's execution of a call the orchestrator sent: the span, the
	// only one the worker makes for the call, is of kind SERVER.
	Served bool
}

// StartTool starts the span of one tool execution: "execute_tool {name}", kind INTERNAL
// (SERVER for ToolAttrs.Served).
func (t *Telemetry) StartTool(ctx context.Context, a ToolAttrs) (context.Context, trace.Span) {
	if t.Off() {
		return ctx, noSpan
	}
	if t.noTraces {
		// Metrics only: the call is timed for toolmesh.tool.call.duration, without a span.
		return ctx, &opSpan{Span: noSpan, start: time.Now(), tool: a.Name, group: a.Group}
	}
	typ := a.Type
	if typ == "" {
		typ = ToolTypeFunction
	}
	attrs := []attribute.KeyValue{
		KeyOperationName.String(OperationExecuteTool),
		KeyToolName.String(a.Name),
		KeyToolType.String(typ),
	}
	if a.CallID != "" {
		attrs = append(attrs, KeyToolCallID.String(a.CallID))
	}
	if a.Group != "" {
		attrs = append(attrs, KeyGroup.String(a.Group))
	}
	kind := trace.SpanKindInternal
	if a.Served {
		kind = trace.SpanKindServer
	}
	ctx, s := t.start(ctx, OperationExecuteTool+" "+a.Name, kind, attrs)
	s.tool, s.group = a.Name, a.Group
	return ctx, s
}

// ToolResult is how a tool call ended, for EndTool.
type ToolResult struct {
	// Outcome is a low-cardinality word: "ok", "error", "unknown_tool",
	// "invalid_arguments", ...; default "ok", or "error" when ErrorType is set.
	Outcome string
	// ErrorType is set when the call failed: the tool error code ("TIMEOUT",
	// "UNAVAILABLE", "FAILED", ...). It becomes error.type and status Error.
	ErrorType string
	// WorkerID and Attempts say where a remote call ran and how many replicas it was
	// sent to; empty and 0 for tools that run in the orchestrator.
	WorkerID string
	Attempts int
	// Arguments and Result are recorded only when Options.CapturePayloads is set; Result
	// only for a call that succeeded, as the conventions say.
	Arguments string
	Result    string
}

// EndTool ends a StartTool span and records toolmesh.tool.call.duration.
func (t *Telemetry) EndTool(span trace.Span, r ToolResult) {
	if span == nil {
		return
	}
	if r.Outcome == "" {
		r.Outcome = OutcomeOK
		if r.ErrorType != "" {
			r.Outcome = OutcomeError
		}
	}
	if !span.IsRecording() {
		if s, ok := span.(*opSpan); ok {
			t.RecordToolCall(context.Background(), s.tool, s.group, r.Outcome, time.Since(s.start))
		}
		return
	}
	span.SetAttributes(KeyOutcome.String(r.Outcome))
	if r.WorkerID != "" {
		span.SetAttributes(KeyWorkerID.String(r.WorkerID))
	}
	if r.Attempts > 0 {
		span.SetAttributes(KeyAttempts.Int(r.Attempts))
	}
	if t != nil && t.capture {
		if r.Arguments != "" {
			span.SetAttributes(KeyToolCallArguments.String(validText(r.Arguments)))
		}
		if r.Result != "" && r.ErrorType == "" {
			span.SetAttributes(KeyToolCallResult.String(validText(r.Result)))
		}
	}
	if r.ErrorType != "" {
		markFailed(span, r.ErrorType, nil)
	}
	span.End()
	if s, ok := span.(*opSpan); ok {
		t.RecordToolCall(spanContext(s.Span), s.tool, s.group, r.Outcome, time.Since(s.start))
	}
}

// RecordsContext reports whether ContextAttributes records anything: telemetry is on and
// Options.ContextAllowList names keys. Callers skip building the entries otherwise.
func (t *Telemetry) RecordsContext() bool { return t != nil && len(t.allow) > 0 }

// ContextAttributes records the allow-listed entries of a ToolCallContext on span, as
// toolmesh.context.<key>. Entries whose key is not on Options.ContextAllowList never
// appear, whatever they hold.
func (t *Telemetry) ContextAttributes(span trace.Span, entries toolctx.Context) {
	if !t.RecordsContext() || span == nil || entries.IsEmpty() {
		return
	}
	var attrs []attribute.KeyValue
	for _, k := range t.allow {
		if ctxconv.IsCredentialKey(k) {
			continue // a credential never goes on a span, even one listed by mistake
		}
		if v, ok := entries.Get(k); ok {
			attrs = append(attrs, attribute.String(ContextAttributePrefix+k, v))
		}
	}
	if len(attrs) > 0 {
		span.SetAttributes(attrs...)
	}
}

// ToolsChanged records on the span in ctx (the run's) that the visible tool set changed:
// an unfolding, a bound domain object, a playbook unlock.
func (t *Telemetry) ToolsChanged(ctx context.Context, added, removed []string) {
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	trace.SpanFromContext(ctx).AddEvent(EventToolsChanged, trace.WithAttributes(
		KeyToolsAdded.StringSlice(added),
		KeyToolsRemoved.StringSlice(removed),
	))
}

// ReplicaChosen records on the span in ctx (the call's execute_tool span) which replica
// the router picked for attempt number attempt (1 for the first).
func (t *Telemetry) ReplicaChosen(ctx context.Context, workerID string, attempt int) {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return
	}
	s.AddEvent(EventReplicaChosen, trace.WithAttributes(
		KeyWorkerID.String(workerID),
		KeyAttempt.Int(attempt),
	))
}

// FailedOver records on the span in ctx that attempt number attempt, on workerID, failed
// in a way that lets the router send the call to another replica.
// Overloaded records on the call's span that the call was not sent: every replica of
// its group had as many calls in flight as the router sends one.
func (t *Telemetry) Overloaded(ctx context.Context, group string) {
	trace.SpanFromContext(ctx).AddEvent(EventOverloaded, trace.WithAttributes(KeyGroup.String(group)))
}

func (t *Telemetry) FailedOver(ctx context.Context, workerID string, attempt int, reason string) {
	trace.SpanFromContext(ctx).AddEvent(EventFailover, trace.WithAttributes(
		KeyWorkerID.String(workerID),
		KeyAttempt.Int(attempt),
		KeyFailoverReason.String(reason),
	))
}
