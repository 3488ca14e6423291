package telemetry

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Keys the log handler adds to records.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
	LogKeyRunID   = "run_id"
	LogKeyLoopID  = "loop_id"
	LogKeyCallID  = "call_id"
)

// correlation returns the fields ctx gives a record.
func correlation(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	var out []slog.Attr
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		out = append(out, slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	// The ids of the run, loop and call have one home: the call info the run service, the
	// loop and the worker SDK put in the context.
	info, _ := tool.CallInfoFrom(ctx)
	if info.RunID != "" {
		out = append(out, slog.String(LogKeyRunID, info.RunID))
	}
	if info.LoopID != "" {
		out = append(out, slog.String(LogKeyLoopID, info.LoopID))
	}
	if info.CallID != "" {
		out = append(out, slog.String(LogKeyCallID, info.CallID))
	}
	return out
}

// NewLogHandler wraps inner so that every record logged with a context (InfoContext,
// ErrorContext, ...) carries trace_id and span_id when the context holds a valid span,
// and run_id, loop_id and call_id from the call info (tool.CallInfoFrom). The fields stay at the top
// level of the record even under WithGroup, where log pipelines look for them.
func NewLogHandler(inner slog.Handler) slog.Handler {
	return &logHandler{top: inner, full: inner}
}

// logHandler keeps two views of the same handler: full has every With/WithGroup applied;
// top has only the attributes given before the first group, and ops the calls after it.
// A record with correlation fields and an open group is handled by top + fields + ops
// replayed, so the fields land outside the group.
type logHandler struct {
	top  slog.Handler
	ops  []logOp
	full slog.Handler
}

// logOp is one WithGroup (group set) or WithAttrs (attrs set) call made after a group.
type logOp struct {
	group string
	attrs []slog.Attr
}

var _ slog.Handler = (*logHandler)(nil)

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.full.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	fields := correlation(ctx)
	if len(fields) == 0 {
		return h.full.Handle(ctx, r)
	}
	if len(h.ops) == 0 {
		// No group is open: the record's own attributes are top-level.
		r = r.Clone()
		r.AddAttrs(fields...)
		return h.full.Handle(ctx, r)
	}
	hh := h.top.WithAttrs(fields)
	for _, op := range h.ops {
		if op.group != "" {
			hh = hh.WithGroup(op.group)
		} else {
			hh = hh.WithAttrs(op.attrs)
		}
	}
	return hh.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	if len(h.ops) == 0 {
		inner := h.full.WithAttrs(attrs)
		return &logHandler{top: inner, full: inner}
	}
	return &logHandler{
		top:  h.top,
		ops:  append(slices.Clip(h.ops), logOp{attrs: slices.Clone(attrs)}),
		full: h.full.WithAttrs(attrs),
	}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &logHandler{
		top:  h.top,
		ops:  append(slices.Clip(h.ops), logOp{group: name}),
		full: h.full.WithGroup(name),
	}
}
