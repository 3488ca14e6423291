package run

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// boardModel drives the parent loop (turn 1: agentic "sub" and "late" in parallel; turn 2:
// "dump"; turn 3: done) and the nested loop of "sub" (system "NESTED": turn 1 "early",
// turn 2 an answer, given once gate is closed). It keeps every request's bytes.
type boardModel struct {
	gate chan struct{}
	mu   sync.Mutex
	reqs []string // the parent loop's requests, as JSON
}

func (m *boardModel) Name() string { return "board" }
func (m *boardModel) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	turn := 1
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleAssistant {
			turn++
		}
	}
	nested := req.System == "NESTED"
	if !nested {
		b, _ := json.Marshal(req)
		m.mu.Lock()
		m.reqs = append(m.reqs, string(b))
		m.mu.Unlock()
	}
	return func(yield func(llm.Chunk, error) bool) {
		var r llm.Response
		switch {
		case nested && turn == 1:
			r = llm.Response{ToolCalls: []llm.ToolCall{{ID: "e1", Name: "early", Arguments: "{}"}}}
		case nested:
			if m.gate != nil {
				select {
				case <-m.gate:
				case <-ctx.Done():
					yield(llm.Chunk{}, ctx.Err())
					return
				}
			}
			r = llm.Response{Text: "sub done"}
		case turn == 1:
			r = llm.Response{ToolCalls: []llm.ToolCall{{ID: "a1", Name: "sub", Arguments: "{}"}, {ID: "b1", Name: "late", Arguments: "{}"}}}
		case turn == 2:
			r = llm.Response{ToolCalls: []llm.ToolCall{{ID: "d1", Name: "dump", Arguments: "{}"}}}
		default:
			r = llm.Response{Text: "done"}
		}
		yield(llm.Chunk{Done: &r}, nil)
	}
}

func (m *boardModel) parentRequests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.reqs...)
}

// boardCodec gives back the request the test runs, whatever the journal kept.
type boardCodec struct{ req Request }

func (boardCodec) AppendEvent(dst []byte, _ Event) ([]byte, bool) { return append(dst, `{}`...), true }
func (c boardCodec) Request(json.RawMessage) (Request, error)     { return c.req, nil }

func boardRequest() Request {
	return Request{ID: "board", Messages: user("go"), Tools: []string{"sub", "late", "dump"}, Wire: json.RawMessage(`{}`),
		Agentic: []agentic.Spec{{Key: "agentic_tools[0]", Name: "sub", Description: "Sub.", Kind: agentic.KindSimple,
			SystemPrompt: "NESTED", Tools: []string{"early"}}}}
}

// boardService serves in process: early (puts "early" on the blackboard), late (waits for
// early's entry, then puts "late" on it; lateDone is closed after it returned) and dump
// (reads the blackboard's types, in order).
func boardService(t *testing.T, store runlog.Store, model llm.Provider, earlyDone, lateDone chan struct{}) *Service {
	t.Helper()
	early := tool.New("early", "Early.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "early", JSON: json.RawMessage(`1`)}); err != nil {
			return tool.Result{}, err
		}
		if earlyDone != nil {
			close(earlyDone)
		}
		return tool.Text("early ok"), nil
	})
	late := tool.New("late", "Late.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		if earlyDone != nil {
			select {
			case <-earlyDone:
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}
		if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "late", JSON: json.RawMessage(`2`)}); err != nil {
			return tool.Result{}, err
		}
		if lateDone != nil {
			// The nested loop ends once late's outcome is in the journal, after it.
			go func() {
				defer close(lateDone)
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
					recs, err := store.Read(context.Background(), "board", 0, 0)
					if err != nil {
						return
					}
					for _, r := range recs {
						if r.Kind == runlog.KindOutcome && strings.Contains(string(r.Data), `/b1"`) {
							return
						}
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
		return tool.Text("late ok"), nil
	})
	dump := tool.New("dump", "Dumps the blackboard.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		var types []string
		for _, e := range tool.BlackboardFrom(ctx).Entries() {
			types = append(types, e.TypeName)
		}
		return tool.Text("board: " + strings.Join(types, ",")), nil
	})
	rt := router.New(router.Options{GracePeriod: time.Second})
	t.Cleanup(rt.Close)
	s, err := New(Options{Router: rt, Providers: map[string]llm.Provider{"board": model}, DefaultProvider: "board", Config: config.Default(),
		Journal: store, Codec: boardCodec{req: boardRequest()}, Owner: "me",
		Groups: map[string]Group{"g": {Description: "G", Tools: []tool.Tool{early, late, dump}}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNestedBoardEntryReplaysInPlace: a turn calls an agentic tool and a tool in parallel.
// The agentic tool's nested loop puts "early" on the blackboard; the other call then puts
// "late" on it and ends; then the nested loop ends. A run resumed from its journal cut
// after that turn (before the model's next answer) must see the blackboard as the
// uninterrupted run did ("early,late"): its next live steps (dump's result, the model
// request that carries it) must be the same bytes.
func TestNestedBoardEntryReplaysInPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// The uninterrupted run.
	store1, err := runlog.OpenMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store1.Close() })
	lateDone := make(chan struct{})
	m1 := &boardModel{gate: lateDone}
	s1 := boardService(t, store1, m1, make(chan struct{}), lateDone)
	var evs1 []Event
	res, err := s1.Run(ctx, boardRequest(), func(ev Event) { evs1 = append(evs1, ev) })
	if err != nil || res.Text != "done" {
		for _, ev := range evs1 {
			t.Logf("%T %+v", ev, ev)
		}
		t.Fatalf("uninterrupted run: %v, %v", res, err)
	}
	snap1, err := s1.Get("board")
	if err != nil {
		t.Fatal(err)
	}

	// Its journal, cut before the parent loop's second model answer.
	recs, err := store1.Read(ctx, "board", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rq requestRecord
	if err := json.Unmarshal(recs[0].Data, &rq); err != nil {
		t.Fatal(err)
	}
	cut := -1
	for i, r := range recs {
		if r.Kind != runlog.KindModel {
			continue
		}
		var mr modelRecord
		_ = json.Unmarshal(r.Data, &mr)
		if mr.Key == rq.LoopID+"/2" {
			cut = i
			break
		}
	}
	if cut < 0 {
		t.Fatal("no second model answer of the parent loop in the journal")
	}
	store2, err := runlog.OpenMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	l, err := store2.Create(ctx, "board", "gone", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := store2.Append(ctx, l, recs[:cut]); err != nil {
		t.Fatal(err)
	}

	// The resumed run.
	m2 := &boardModel{}
	s2 := boardService(t, store2, m2, nil, nil)
	if n, err := s2.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	var snap2 Snapshot
	for {
		if snap2, err = s2.Get("board"); err == nil && snap2.State != runlog.StateRunning {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the resumed run did not end: %+v, %v", snap2, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	types := func(s Snapshot) string {
		var out []string
		for _, e := range s.Process.Blackboard.Entries {
			out = append(out, e.TypeName)
		}
		return strings.Join(out, ",")
	}
	if got, want := types(snap2), types(snap1); got != want {
		t.Errorf("blackboard after the resume: %s; the uninterrupted run's: %s", got, want)
	}
	r1, r2 := m1.parentRequests(), m2.parentRequests()
	if len(r1) != 3 || len(r2) != 2 {
		t.Fatalf("parent model requests: %d uninterrupted, %d resumed; want 3 and 2 (turns 2 and 3 live)", len(r1), len(r2))
	}
	for i := range r2 {
		if r2[i] != r1[i+1] {
			t.Errorf("parent model request %d differs after the resume:\n uninterrupted: %s\n resumed:       %s", i+2, r1[i+1], r2[i])
		}
	}
}
