package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/pkg/orchestrator"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// jsonLog appends JSON lines to a file; a nil one discards.
type jsonLog struct {
	mu sync.Mutex
	f  *os.File
}

func openLog(path string) (*jsonLog, error) {
	if path == "" {
		return &jsonLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &jsonLog{f: f}, nil
}

func (l *jsonLog) write(v any) error {
	if l.f == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(append(b, '\n'))
	return err
}

func (l *jsonLog) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// auditRecord is one line of the audit file.
type auditRecord struct {
	RunID   string `json:"run_id"`
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Group   string `json:"group,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Input   string `json:"input"`
	Refused bool   `json:"refused,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	Result  string `json:"result"`
}

// auditLayer writes every call to the audit file, and refuses the calls of the denied
// tools before they leave. It follows the events layer, so that a refusal is traced and
// counted in the run's history like any other result.
func auditLayer(audit *jsonLog, denied []string) orchestrator.Layer {
	return orchestrator.Layer{Name: "audit", After: "events", For: func(t tool.Tool) orchestrator.Interceptor {
		group, _ := orchestrator.GroupOf(t)
		return func(ctx context.Context, c orchestrator.Call, next func(context.Context) (tool.Result, error)) (tool.Result, error) {
			rec := auditRecord{RunID: c.Info.RunID, CallID: c.Info.CallID, Tool: c.Name, Group: group, Tenant: c.Tenant, Input: c.Input}
			var res tool.Result
			var err error
			if slices.Contains(denied, c.Name) {
				rec.Refused = true
				res = tool.Error(fmt.Sprintf("Tool '%s' is switched off on this orchestrator. Do without it.", c.Name))
			} else {
				res, err = next(ctx)
			}
			rec.IsError, rec.Result = res.IsError(), res.Content
			if werr := audit.write(rec); werr != nil {
				return tool.Error("the call could not be audited: " + werr.Error()), nil
			}
			return res, err
		}
	}}
}

// requestedAt is the converter of every group: the call's context as it is, with the
// time of the request added, as the source's function converters compute a value.
func requestedAt() orchestrator.Converter {
	return orchestrator.ConverterFunc(func(c toolctx.Context) toolctx.Context {
		return c.WithoutReserved().With("requestedAt", time.Now().UTC().Format(time.RFC3339Nano))
	})
}

// archiveSink appends each artifact a rule sends it to the archive file.
func archiveSink(archive *jsonLog) orchestrator.Sink {
	return func(_ context.Context, a orchestrator.Artifact) error {
		return archive.write(map[string]any{"tool": a.Tool, "call_id": a.CallID, "type": a.Entry.TypeName, "value": json.RawMessage(a.Entry.JSON)})
	}
}

// noteType is the type name of the notes the notes group returns.
const noteType = "notes.Note"

// note is a note as the notes group keeps it.
type note struct {
	Text string `json:"text"`
}

// formatNote shows a note on the blackboard as a sentence, anything else as the default
// formatter does.
func formatNote(e tool.Entry) string {
	if e.TypeName == noteType {
		var n note
		if json.Unmarshal(e.JSON, &n) == nil {
			return fmt.Sprintf("A note that says %q.", n.Text)
		}
	}
	return orchestrator.DefaultFormatter(e)
}

// notebook holds each run's notes in memory.
type notebook struct {
	mu    sync.Mutex
	notes map[string][]string // run id → notes
}

func newNotebook() *notebook { return &notebook{notes: map[string][]string{}} }

type rememberIn struct {
	Text string `json:"text" jsonschema:"what to remember"`
}

// group is the in-process "notes" group.
func (b *notebook) group() orchestrator.Group {
	remember := tool.MustFunc("remember", "Remember a short note for the rest of this conversation.",
		func(ctx context.Context, in rememberIn) (tool.Result, error) {
			info, _ := tool.CallInfoFrom(ctx)
			b.mu.Lock()
			b.notes[info.RunID] = append(b.notes[info.RunID], in.Text)
			b.mu.Unlock()
			js, _ := json.Marshal(note(in))
			return tool.ArtifactResult("Remembered.", tool.Artifact{TypeName: noteType, JSON: js}), nil
		})
	recall := tool.MustFunc("recall", "List the notes remembered in this conversation.",
		func(ctx context.Context, _ struct{}) (tool.Result, error) {
			info, _ := tool.CallInfoFrom(ctx)
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.notes[info.RunID]) == 0 {
				return tool.Text("No notes."), nil
			}
			return tool.Text(strings.Join(b.notes[info.RunID], "\n")), nil
		}, tool.Idempotent())
	return orchestrator.Group{Description: "Notes the model keeps during a conversation", Tools: []tool.Tool{remember, recall}}
}

// forget is the tool offerForget offers.
func (b *notebook) forget() tool.Tool {
	return tool.MustFunc("forget", "Forget a note remembered in this conversation.",
		func(ctx context.Context, in rememberIn) (tool.Result, error) {
			info, _ := tool.CallInfoFrom(ctx)
			b.mu.Lock()
			defer b.mu.Unlock()
			before := len(b.notes[info.RunID])
			b.notes[info.RunID] = slices.DeleteFunc(b.notes[info.RunID], func(n string) bool { return n == in.Text })
			return tool.Text(fmt.Sprintf("Forgot %d note(s).", before-len(b.notes[info.RunID]))), nil
		}, tool.Idempotent())
}

// offerForget offers forget once a call of remember has succeeded: a strategy beside
// unfolding, deciding only from what it is shown (so that a resumed run decides the
// same).
func offerForget(forget tool.Tool) orchestrator.Strategy {
	return func(_ context.Context, after orchestrator.AfterCall) ([]tool.Tool, []tool.Tool, error) {
		if after.Tool.Definition().Name != "remember" || after.Result.IsError() {
			return nil, nil, nil
		}
		return []tool.Tool{forget}, nil, nil
	}
}
