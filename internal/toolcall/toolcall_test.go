package toolcall_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func newTool(fn func(context.Context, string) (tool.Result, error)) tool.Tool {
	return tool.New("t", "", schema.Empty(), fn)
}

// TestCallRecoversAndLogsOnce: a panic becomes an error result with code PANIC and one
// log line that carries the tool, the panic value and a stack through the tool.
func TestCallRecoversAndLogsOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	res, err := toolcall.Invoke(t.Context(), log, newTool(func(context.Context, string) (tool.Result, error) {
		panic("kaputt")
	}), "{}")
	if err != nil {
		t.Fatal(err)
	}
	want := tool.ErrorWithCode(tool.CodePanic, "tool 't' panicked: kaputt")
	if res.Kind != want.Kind || res.Code != want.Code || res.Content != want.Content {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["msg"] != "tool panicked" || rec["level"] != "ERROR" || rec["tool"] != "t" || rec["panic"] != "kaputt" {
		t.Errorf("log line = %v", rec)
	}
	if stack, _ := rec["stack"].(string); !strings.Contains(stack, "toolcall_test.go") {
		t.Errorf("stack does not go through the tool:\n%s", stack)
	}
}

func TestCallMapsErrorsAndPassesSignals(t *testing.T) {
	boom := errors.New("boom")
	res, err := toolcall.Invoke(t.Context(), nil, newTool(func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, boom
	}), "{}")
	if err != nil || !res.IsError() || res.Content != "boom" || !errors.Is(res.Cause, boom) {
		t.Errorf("returned error: result %+v, err %v", res, err)
	}
	replan := tool.ReplanRequested{Reason: "x"}
	_, err = toolcall.Invoke(t.Context(), nil, rawTool{err: replan}, "{}")
	if got, ok := errors.AsType[tool.ReplanRequested](err); !ok || got.Reason != "x" {
		t.Errorf("signal = %v, want it returned", err)
	}
	_, err = toolcall.Invoke(t.Context(), nil, rawTool{err: boom}, "{}")
	if err != nil {
		t.Errorf("a raw tool's plain error was returned (%v), want an error result", err)
	}
}

func TestContextSetters(t *testing.T) {
	info := tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c"}
	ctx := toolcall.WithCallInfo(t.Context(), info)
	if got, ok := tool.CallInfoFrom(ctx); !ok || got != info {
		t.Errorf("CallInfoFrom = %+v, %v", got, ok)
	}
	st := toolcall.NewState([]byte("s"))
	if tool.StateFrom(toolcall.WithState(ctx, st)) != st {
		t.Error("StateFrom does not see the state")
	}
}

// rawTool is a tool that returns err as is, as a tool implemented by hand may.
type rawTool struct{ err error }

func (rawTool) Definition() tool.Definition { return tool.Definition{Name: "raw"} }
func (rawTool) Metadata() tool.Metadata     { return tool.Metadata{} }
func (r rawTool) Call(context.Context, string) (tool.Result, error) {
	return tool.Result{}, r.err
}
