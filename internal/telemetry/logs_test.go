package telemetry_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// lines decodes the JSON records in buf, without time and level.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(buf)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %s", sc.Bytes())
		}
		delete(m, "time")
		delete(m, "level")
		out = append(out, m)
	}
	return out
}

func TestLogHandlerAddsCorrelationFields(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "run-1", LoopID: "loop-1"})
	ctx, run := rec.StartRun(ctx, telemetry.RunAttrs{RunID: "run-1"})
	ctx, toolSpan := rec.StartTool(ctx, telemetry.ToolAttrs{Name: "add"})
	defer rec.EndRun(run, telemetry.RunResult{})
	defer rec.EndTool(toolSpan, telemetry.ToolResult{})
	traceID := toolSpan.SpanContext().TraceID().String()
	spanID := toolSpan.SpanContext().SpanID().String()

	var buf bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil)))

	log.InfoContext(ctx, "plain", "n", 1)
	log.With("component", "router").InfoContext(ctx, "with")
	log.WithGroup("call").With("tool", "add").InfoContext(ctx, "group", "attempt", 2)
	log.With("component", "loop").WithGroup("a").With("x", 1).WithGroup("b").InfoContext(ctx, "nested", "y", 2)
	log.WithGroup("empty").InfoContext(ctx, "empty group")
	log.Info("no context")
	log.InfoContext(context.Background(), "background")
	log.InfoContext(toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "run-2"}), "run id only")
	log.InfoContext(toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "run-1", LoopID: "loop-1", CallID: "c1"}), "a call")

	ids := map[string]any{"trace_id": traceID, "span_id": spanID, "run_id": "run-1", "loop_id": "loop-1"}
	with := func(m map[string]any) map[string]any {
		for k, v := range ids {
			m[k] = v
		}
		return m
	}
	want := []map[string]any{
		with(map[string]any{"msg": "plain", "n": float64(1)}),
		with(map[string]any{"msg": "with", "component": "router"}),
		with(map[string]any{"msg": "group", "call": map[string]any{"tool": "add", "attempt": float64(2)}}),
		with(map[string]any{"msg": "nested", "component": "loop", "a": map[string]any{"x": float64(1), "b": map[string]any{"y": float64(2)}}}),
		with(map[string]any{"msg": "empty group"}),
		{"msg": "no context"},
		{"msg": "background"},
		{"msg": "run id only", "run_id": "run-2"},
		with(map[string]any{"msg": "a call", "call_id": "c1"}),
	}
	if diff := cmp.Diff(want, lines(t, &buf)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestLogHandlerRespectsLevel(t *testing.T) {
	var buf bytes.Buffer
	h := telemetry.NewLogHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	log := slog.New(h).WithGroup("g").With("k", "v")
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r"})
	if log.Handler().Enabled(ctx, slog.LevelInfo) {
		t.Error("info enabled at warn level")
	}
	log.InfoContext(ctx, "dropped")
	log.WarnContext(ctx, "kept")
	want := []map[string]any{{"msg": "kept", "run_id": "r", "g": map[string]any{"k": "v"}}}
	if diff := cmp.Diff(want, lines(t, &buf)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// With and WithGroup return new handlers: the one they were called on is unchanged.
func TestLogHandlerDerivedHandlersAreIndependent(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil))).WithGroup("g")
	a := base.With("a", 1)
	b := base.With("b", 2)
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{LoopID: "l"})
	a.InfoContext(ctx, "a")
	b.InfoContext(ctx, "b")
	base.InfoContext(ctx, "base")
	want := []map[string]any{
		{"msg": "a", "loop_id": "l", "g": map[string]any{"a": float64(1)}},
		{"msg": "b", "loop_id": "l", "g": map[string]any{"b": float64(2)}},
		{"msg": "base", "loop_id": "l"},
	}
	if diff := cmp.Diff(want, lines(t, &buf)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
