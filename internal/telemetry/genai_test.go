package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func TestRunChatToolSpansNest(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx, run := rec.StartRun(context.Background(), telemetry.RunAttrs{RunID: "run-1", LoopID: "loop-1", Provider: "openai", Model: "gpt-4o"})

	chatCtx, chat := rec.StartChat(ctx, "openai", "gpt-4o")
	if chatCtx == ctx {
		t.Error("StartChat returned the parent context")
	}
	rec.EndChat(chat, telemetry.ChatResult{InputTokens: 120, OutputTokens: 30, FinishReasons: []string{"tool_calls"}, ResponseModel: "gpt-4o-2024-08-06", ResponseID: "chatcmpl-1"})

	toolCtx, tool := rec.StartTool(ctx, telemetry.ToolAttrs{Name: "add", CallID: "call_1", Group: "math"})
	if toolCtx == ctx {
		t.Error("StartTool returned the parent context")
	}
	rec.EndTool(tool, telemetry.ToolResult{WorkerID: "math-7f3a", Attempts: 2, Arguments: `{"a":1}`, Result: "2"})
	rec.EndRun(run, telemetry.RunResult{Outcome: "completed", InputTokens: 120, OutputTokens: 30})

	runSpan := rec.Span(t, "invoke_agent toolmesh")
	chatSpan := rec.Span(t, "chat gpt-4o")
	toolSpan := rec.Span(t, "execute_tool add")

	if runSpan.Parent().IsValid() {
		t.Errorf("run span has a parent: %v", runSpan.Parent())
	}
	for _, child := range []sdktrace.ReadOnlySpan{chatSpan, toolSpan} {
		if child.Parent().SpanID() != runSpan.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want the run span %s", child.Name(), child.Parent().SpanID(), runSpan.SpanContext().SpanID())
		}
		if child.SpanContext().TraceID() != runSpan.SpanContext().TraceID() {
			t.Errorf("%s: trace %s, want %s", child.Name(), child.SpanContext().TraceID(), runSpan.SpanContext().TraceID())
		}
	}

	tests := []struct {
		span sdktrace.ReadOnlySpan
		kind trace.SpanKind
		want map[string]any
	}{
		{runSpan, trace.SpanKindInternal, map[string]any{
			"gen_ai.operation.name":      "invoke_agent",
			"gen_ai.agent.name":          "toolmesh",
			"gen_ai.provider.name":       "openai",
			"gen_ai.request.model":       "gpt-4o",
			"toolmesh.run.id":            "run-1",
			"toolmesh.loop.id":           "loop-1",
			"toolmesh.outcome":           "completed",
			"gen_ai.usage.input_tokens":  int64(120),
			"gen_ai.usage.output_tokens": int64(30),
		}},
		{chatSpan, trace.SpanKindClient, map[string]any{
			"gen_ai.operation.name":          "chat",
			"gen_ai.provider.name":           "openai",
			"gen_ai.request.model":           "gpt-4o",
			"gen_ai.response.model":          "gpt-4o-2024-08-06",
			"gen_ai.response.id":             "chatcmpl-1",
			"gen_ai.response.finish_reasons": []string{"tool_calls"},
			"gen_ai.usage.input_tokens":      int64(120),
			"gen_ai.usage.output_tokens":     int64(30),
		}},
		{toolSpan, trace.SpanKindInternal, map[string]any{
			"gen_ai.operation.name": "execute_tool",
			"gen_ai.tool.name":      "add",
			"gen_ai.tool.call.id":   "call_1",
			"gen_ai.tool.type":      "function",
			"toolmesh.group":        "math",
			"toolmesh.worker.id":    "math-7f3a",
			"toolmesh.attempts":     int64(2),
			"toolmesh.outcome":      "ok",
		}},
	}
	for _, tt := range tests {
		if tt.span.SpanKind() != tt.kind {
			t.Errorf("%s: kind %v, want %v", tt.span.Name(), tt.span.SpanKind(), tt.kind)
		}
		if diff := cmp.Diff(tt.want, telemetrytest.Attrs(tt.span)); diff != "" {
			t.Errorf("%s attributes (-want +got):\n%s", tt.span.Name(), diff)
		}
		if tt.span.Status().Code == codes.Error {
			t.Errorf("%s: status Error on success", tt.span.Name())
		}
	}
}

func TestToolFailure(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{CapturePayloads: true})
	_, span := rec.StartTool(context.Background(), telemetry.ToolAttrs{Name: "fetch", CallID: "c1", Group: "web"})
	rec.EndTool(span, telemetry.ToolResult{ErrorType: "TIMEOUT", WorkerID: "web-1", Attempts: 1, Arguments: `{"url":"x"}`, Result: "tool 'fetch' timed out"})

	s := rec.Span(t, "execute_tool fetch")
	attrs := telemetrytest.Attrs(s)
	if attrs["error.type"] != "TIMEOUT" {
		t.Errorf("error.type = %v, want TIMEOUT", attrs["error.type"])
	}
	if attrs["toolmesh.outcome"] != "error" {
		t.Errorf("toolmesh.outcome = %v, want error", attrs["toolmesh.outcome"])
	}
	if s.Status().Code != codes.Error {
		t.Errorf("status = %v, want Error", s.Status())
	}
	if _, ok := attrs["gen_ai.tool.call.result"]; ok {
		t.Error("result recorded for a failed call")
	}
	if attrs["gen_ai.tool.call.arguments"] != `{"url":"x"}` {
		t.Errorf("arguments = %v", attrs["gen_ai.tool.call.arguments"])
	}
}

func TestChatFailure(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	_, span := rec.StartChat(context.Background(), "anthropic", "claude-sonnet-4")
	rec.EndChat(span, telemetry.ChatResult{Err: errors.New("provider down")})

	s := rec.Span(t, "chat claude-sonnet-4")
	attrs := telemetrytest.Attrs(s)
	if attrs["error.type"] != telemetry.ErrorTypeOther {
		t.Errorf("error.type = %v, want %s", attrs["error.type"], telemetry.ErrorTypeOther)
	}
	if _, ok := attrs["gen_ai.usage.input_tokens"]; ok {
		t.Error("usage recorded for a failed call")
	}
	if s.Status().Code != codes.Error || s.Status().Description != "provider down" {
		t.Errorf("status = %+v", s.Status())
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("events = %v, want one exception", s.Events())
	}
}

func TestRunFailure(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	_, span := rec.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r"})
	rec.EndRun(span, telemetry.RunResult{ErrorType: "BUDGET_EXCEEDED", Err: errors.New("token budget exhausted")})
	s := rec.Span(t, "invoke_agent toolmesh")
	attrs := telemetrytest.Attrs(s)
	if attrs["error.type"] != "BUDGET_EXCEEDED" || attrs["toolmesh.outcome"] != "error" || s.Status().Code != codes.Error {
		t.Errorf("attrs %v, status %v", attrs, s.Status())
	}
}

func TestPayloadsOnlyWhenEnabled(t *testing.T) {
	for _, capture := range []bool{false, true} {
		rec := telemetrytest.New(t, telemetry.Options{CapturePayloads: capture})
		_, span := rec.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add"})
		rec.EndTool(span, telemetry.ToolResult{Arguments: `{"a":1,"b":2}`, Result: "3"})
		attrs := telemetrytest.Attrs(rec.Span(t, "execute_tool add"))
		args, hasArgs := attrs["gen_ai.tool.call.arguments"]
		res, hasRes := attrs["gen_ai.tool.call.result"]
		if hasArgs != capture || hasRes != capture {
			t.Errorf("CapturePayloads=%v: arguments present %v, result present %v", capture, hasArgs, hasRes)
		}
		if capture && (args != `{"a":1,"b":2}` || res != "3") {
			t.Errorf("payloads = %v, %v", args, res)
		}
	}
}

func TestContextAllowList(t *testing.T) {
	entries := map[string]string{"tenant": "acme", "api_key": "sk-secret", "region": "eu"}
	tests := []struct {
		name  string
		allow []string
		want  map[string]any
	}{
		{"nothing allowed", nil, map[string]any{}},
		{"some allowed", []string{"tenant", "region", "absent"}, map[string]any{"toolmesh.context.tenant": "acme", "toolmesh.context.region": "eu"}},
		// A credential is never recorded, even when an allow-list names it.
		{"a credential allowed by mistake", []string{"tenant", "api_key"}, map[string]any{"toolmesh.context.tenant": "acme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := telemetrytest.New(t, telemetry.Options{ContextAllowList: tt.allow})
			_, span := rec.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add"})
			rec.ContextAttributes(span, toolctx.FromMap(entries))
			rec.EndTool(span, telemetry.ToolResult{})
			got := map[string]any{}
			for k, v := range telemetrytest.Attrs(rec.Span(t, "execute_tool add")) {
				if strings.HasPrefix(k, telemetry.ContextAttributePrefix) {
					got[k] = v
				}
				if v == "sk-secret" {
					t.Errorf("secret recorded as %s", k)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("context attributes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvents(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx, run := rec.StartRun(context.Background(), telemetry.RunAttrs{})
	rec.ToolsChanged(ctx, []string{"cart_add", "cart_context"}, []string{"cart"})
	rec.ToolsChanged(ctx, nil, nil) // no change, no event
	toolCtx, tool := rec.StartTool(ctx, telemetry.ToolAttrs{Name: "add"})
	rec.ReplicaChosen(toolCtx, "w1", 1)
	rec.FailedOver(toolCtx, "w1", 1, "draining")
	rec.ReplicaChosen(toolCtx, "w2", 2)
	rec.EndTool(tool, telemetry.ToolResult{WorkerID: "w2", Attempts: 2})
	rec.EndRun(run, telemetry.RunResult{})

	type event struct {
		Name  string
		Attrs map[string]any
	}
	events := func(s sdktrace.ReadOnlySpan) []event {
		var out []event
		for _, e := range s.Events() {
			out = append(out, event{e.Name, telemetrytest.AttrMap(e.Attributes)})
		}
		return out
	}
	wantRun := []event{{"toolmesh.tools.changed", map[string]any{"toolmesh.tools.added": []string{"cart_add", "cart_context"}, "toolmesh.tools.removed": []string{"cart"}}}}
	if diff := cmp.Diff(wantRun, events(rec.Span(t, "invoke_agent toolmesh"))); diff != "" {
		t.Errorf("run events (-want +got):\n%s", diff)
	}
	wantTool := []event{
		{"toolmesh.replica.chosen", map[string]any{"toolmesh.worker.id": "w1", "toolmesh.attempt": int64(1)}},
		{"toolmesh.failover", map[string]any{"toolmesh.worker.id": "w1", "toolmesh.attempt": int64(1), "toolmesh.failover.reason": "draining"}},
		{"toolmesh.replica.chosen", map[string]any{"toolmesh.worker.id": "w2", "toolmesh.attempt": int64(2)}},
	}
	if diff := cmp.Diff(wantTool, events(rec.Span(t, "execute_tool add"))); diff != "" {
		t.Errorf("tool events (-want +got):\n%s", diff)
	}
}

func TestAgentNameAndUnnamedModel(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx, run := rec.StartRun(context.Background(), telemetry.RunAttrs{AgentName: "researcher"})
	_, chat := rec.StartChat(ctx, "scripted", "")
	rec.EndChat(chat, telemetry.ChatResult{})
	rec.EndRun(run, telemetry.RunResult{})
	if got := telemetrytest.Attrs(rec.Span(t, "invoke_agent researcher"))["gen_ai.agent.name"]; got != "researcher" {
		t.Errorf("gen_ai.agent.name = %v", got)
	}
	if _, ok := telemetrytest.Attrs(rec.Span(t, "chat"))["gen_ai.request.model"]; ok {
		t.Error("gen_ai.request.model set without a model")
	}
}

// A nil or zero Telemetry must be usable everywhere without checks at the call site.
func TestNilAndZeroTelemetry(t *testing.T) {
	for name, tel := range map[string]*telemetry.Telemetry{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			ctx, run := tel.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r"})
			cctx, chat := tel.StartChat(ctx, "openai", "m")
			tel.EndChat(chat, telemetry.ChatResult{InputTokens: 1})
			tctx, tool := tel.StartTool(cctx, telemetry.ToolAttrs{Name: "t"})
			tel.ContextAttributes(tool, toolctx.MustOf("k", "v"))
			tel.ReplicaChosen(tctx, "w", 1)
			tel.FailedOver(tctx, "w", 1, "x")
			tel.EndTool(tool, telemetry.ToolResult{ErrorType: "FAILED"})
			tel.ToolsChanged(ctx, []string{"a"}, nil)
			tel.EndRun(run, telemetry.RunResult{})
			tel.RecordToolCall(ctx, "t", "g", "ok", 1)
			tel.AddInFlight(ctx, "w", "g", 1)
			tel.AddDispatched(ctx, "w", "g", 1)
			tel.RegisterReplicaGauge(func() map[string]int64 { return nil })
			tel.RecordTokens(ctx, "p", "m", 1, 1)
			tel.RecordCost(ctx, "m", 1)
			tel.RecordRun(ctx, "ok", 1)
			tel.EndTool(nil, telemetry.ToolResult{})
			_ = tel.ServerOptions()
			_ = tel.DialOptions()
			_ = tel.TracerProvider()
			_ = tel.MeterProvider()
			_ = tel.Tracer()
			_ = tel.Meter()
		})
	}
}

// A Telemetry over no-op providers is Off: a tool call's span is no span (the context
// comes back as it was, and ending the span ends nothing, not the caller's span).
func TestOffTelemetry(t *testing.T) {
	off, err := telemetry.FromProviders(nil, nil, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var none *telemetry.Telemetry
	if !off.Off() || !none.Off() {
		t.Fatalf("Off: no-op providers %v, nil %v; want both", off.Off(), none.Off())
	}
	rec := telemetrytest.New(t, telemetry.Options{})
	if rec.Off() {
		t.Fatal("a recording Telemetry is Off")
	}
	ctx, run := rec.StartRun(context.Background(), telemetry.RunAttrs{RunID: "r"})
	tctx, span := off.StartTool(ctx, telemetry.ToolAttrs{Name: "t"})
	if tctx != ctx || span.IsRecording() {
		t.Errorf("StartTool when off: a new context %v, a recording span %v", tctx != ctx, span.IsRecording())
	}
	off.ReplicaChosen(tctx, "w", 1)
	off.EndTool(span, telemetry.ToolResult{ErrorType: "FAILED"})
	if !trace.SpanFromContext(ctx).IsRecording() {
		t.Error("ending the tool's span ended the run's")
	}
	rec.EndRun(run, telemetry.RunResult{})
}

// With metrics and no traces (a worker scraped by Prometheus, its tracing off), a tool
// call makes no span but is still counted and timed, with its attributes, and the
// counters of calls in flight go up and down.
func TestMetricsWithoutTraces(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	mp := rec.MeterProvider()
	tel, err := telemetry.FromProviders(nil, mp, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Off() {
		t.Fatal("metrics on, yet Off")
	}
	for range 3 {
		ctx, span := tel.StartTool(context.Background(), telemetry.ToolAttrs{Name: "add", Group: "math"})
		if span.IsRecording() || trace.SpanFromContext(ctx).IsRecording() {
			t.Fatal("a span without a tracer")
		}
		tel.AddInFlight(ctx, "w1", "math", 1)
		tel.AddInFlight(ctx, "w1", "math", -1)
		tel.EndTool(span, telemetry.ToolResult{ErrorType: "FAILED"})
	}
	m := rec.Metric(t, "toolmesh.tool.call.duration")
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 3 {
		t.Fatalf("toolmesh.tool.call.duration: %+v", m.Data)
	}
	attrs := h.DataPoints[0].Attributes
	for k, want := range map[string]string{"gen_ai.tool.name": "add", "toolmesh.group": "math", "toolmesh.outcome": "error"} {
		if v, ok := attrs.Value(attribute.Key(k)); !ok || v.AsString() != want {
			t.Errorf("attribute %s = %v, want %q (all: %v)", k, v.AsString(), want, attrs.ToSlice())
		}
	}
	in := rec.Metric(t, "toolmesh.worker.calls.in_flight")
	s, ok := in.Data.(metricdata.Sum[int64])
	if !ok || len(s.DataPoints) != 1 || s.DataPoints[0].Value != 0 {
		t.Fatalf("toolmesh.worker.calls.in_flight: %+v", in.Data)
	}
}

// TestTextThatIsNotUTF8: a result, an argument or an error that is not UTF-8 is
// recorded with its bad bytes replaced: OTLP's protocol buffers refuse to encode it, and
// the exporter drops the whole batch it is in, the other spans with it.
func TestTextThatIsNotUTF8(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{CapturePayloads: true})
	_, span := rec.StartTool(context.Background(), telemetry.ToolAttrs{Name: "read"})
	rec.EndTool(span, telemetry.ToolResult{Arguments: `{"path":"caf\xe9"}`, Result: "caf\xe9 au lait"})
	_, failed := rec.StartTool(context.Background(), telemetry.ToolAttrs{Name: "coded"})
	rec.EndTool(failed, telemetry.ToolResult{ErrorType: "NO_SUCH_FILE_\xe9"})
	_, chat := rec.StartChat(context.Background(), "openai", "m")
	rec.EndChat(chat, telemetry.ChatResult{Err: errors.New("no such file: caf\xe9")})
	for _, name := range []string{"execute_tool read", "execute_tool coded", "chat m"} {
		s := rec.Span(t, name)
		texts := []string{s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, kv.Value.String())
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			if !utf8.ValidString(text) {
				t.Errorf("%s: %q is not UTF-8", name, text)
			}
		}
	}
	if got := telemetrytest.Attrs(rec.Span(t, "execute_tool read"))["gen_ai.tool.call.result"]; got != "caf\uFFFD au lait" {
		t.Errorf("result = %q, want the bad byte replaced", got)
	}
}
