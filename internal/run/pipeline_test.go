package run

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestPipelineMatchesTheDocs: the layers of a run's call pipeline are those
// docs/process.md lists, in its order.
func TestPipelineMatchesTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/process.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)<!-- pipeline:[^>]*-->(.*?)<!-- /pipeline -->`).FindSubmatch(doc)
	if section == nil {
		t.Fatal("docs/process.md has no <!-- pipeline --> list")
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^\d+\. \*\*([^*]+)\*\*`).FindAllSubmatch(section[1], -1) {
		documented = append(documented, string(m[1]))
	}
	s := pipelineService(t, config.Default())
	got := s.pipeline("acme", Caller{}, config.Tenant{}, true, true, s.chain).Names()
	if diff := cmp.Diff(documented, got); diff != "" {
		t.Errorf("the pipeline's layers against docs/process.md's list (-docs +code):\n%s", diff)
	}
	// Without a tenant and without chaining, the list is the same: those layers have
	// nothing to do for any tool.
	if off := s.pipeline("", Caller{}, config.Tenant{}, false, false, s.chain).Names(); !cmp.Equal(off, got) {
		t.Errorf("layers without tenant or chaining = %v, want %v", off, got)
	}
}

// TestPipelineAroundATool: a tool configured with every per-tool feature passes every
// layer in order, and a plain one only those for every tool.
func TestPipelineAroundATool(t *testing.T) {
	cfg := config.Default()
	required := true
	cfg.Tools = map[string]config.Tool{"lookup": {
		OneShot:  &config.OneShot{Advice: "use what it returned"},
		Replan:   &config.Replan{Reason: "again"},
		Approval: &config.Approval{Required: &required},
	}}
	s := pipelineService(t, cfg)
	p := s.pipeline("", Caller{}, config.Tenant{}, false, true, s.chain)
	lookup := tool.New("lookup", "Looks up.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("x"), nil })
	plain := tool.New("plain", "Plain.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("x"), nil })
	want := []string{LayerApproval, "binding", "events", "one-shot", "replan", "output bound"}
	if got := p.Wrap(lookup).(*toolcall.Tool).Layers(); !cmp.Equal(got, want) {
		t.Errorf("lookup's layers = %v, want %v", got, want)
	}
	if got := p.Wrap(plain).(*toolcall.Tool).Layers(); !cmp.Equal(got, []string{"binding", "events", "output bound"}) {
		t.Errorf("plain's layers = %v", got)
	}
	if got := strings.Join(p.Names(), ","); !strings.HasPrefix(got, LayerGrant+","+LayerPolicy+","+LayerApproval) {
		t.Errorf("the pipeline starts %q, want the grant, the policy and then approval", got)
	}
}

func pipelineService(t *testing.T, cfg config.Config) *Service {
	t.Helper()
	model, err := scripted.New(scripted.Script{Name: "s", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return scriptedService(t, cfg, model)
}

// scriptedService is a run service on cfg with an empty router, whose one provider,
// "scripted", is model; it logs nothing.
func scriptedService(t *testing.T, cfg config.Config, model llm.Provider) *Service {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	s, err := New(Options{Router: router.New(router.Options{Logger: log}), Providers: map[string]llm.Provider{"scripted": model},
		DefaultProvider: "scripted", Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// grouped is a tool of a worker's group.
type grouped struct {
	tool.Tool
	group string
}

func (g grouped) Group() string { return g.group }

// TestGrantAndApprovalTexts pins what the model reads when the grant layer refuses a call
// of another group's tool, and when a call that needs approval has nobody to give it.
func TestGrantAndApprovalTexts(t *testing.T) {
	s := pipelineService(t, config.Default())
	called := 0
	crm := grouped{tool.New("lookup", "Looks up.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		called++
		return tool.Text("x"), nil
	}), "crm"}
	p := toolcall.Pipeline{s.grantLayer("acme", config.Tenant{Groups: []string{"math"}})}
	res, err := toolcall.Run(t.Context(), nil, &toolcall.Call{Tool: p.Wrap(crm), Input: "{}"})
	if err != nil || res.Code != tool.CodeUnknownTool || res.Content != "Tool 'lookup' is not available to this run. Use only the tools you were given." || called != 0 {
		t.Errorf("a call outside the grant = %+v, %v, %d calls", res, err, called)
	}
	res, err = RequireApproval(crm, time.Minute).Call(t.Context(), "{}")
	if err != nil || res.Content != "tool 'lookup' requires approval, and nobody can give it here; it did not run" || called != 0 {
		t.Errorf("a call that needs approval outside a run = %+v, %v, %d calls", res, err, called)
	}
}

// TestGrantPassesReplayedCalls: a resumed run's call that its journal answers passes the
// grant layer without taking from the tenant's tool-call budget, even with the budget
// spent (the replica served other runs) or the grant changed: it passed before the crash,
// and nothing leaves now. Before, it was refused, and the model read another result than
// it did the first time.
func TestGrantPassesReplayedCalls(t *testing.T) {
	s := pipelineService(t, config.Default())
	s.cfg.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"crm"}, ToolCallsPerMinute: 1}}
	called := 0
	crm := grouped{tool.New("lookup", "Looks up.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		called++
		return tool.Text("x"), nil
	}), "crm"}
	p := toolcall.Pipeline{s.grantLayer("acme", s.cfg.Tenants["acme"])}
	call := func(ctx context.Context, info tool.CallInfo) tool.Result {
		res, err := toolcall.Run(ctx, nil, &toolcall.Call{Tool: p.Wrap(crm), Input: "{}", Info: info})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	info := tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c1", Iteration: 1}
	if res := call(t.Context(), info); res.IsError() || called != 1 {
		t.Fatalf("the first call = %+v, %d calls", res, called)
	}
	if res := call(t.Context(), info); !strings.Contains(res.Content, "tool calls of the last minute") {
		t.Fatalf("a call past the budget = %+v, want refused", res)
	}
	j := newJournal(nil, nil, runlog.Lease{}, time.Second, nil, 1)
	j.outcomes = map[string]json.RawMessage{callKey(info): json.RawMessage(`{}`)}
	ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, j)
	if res := call(ctx, info); res.IsError() || called != 2 {
		t.Errorf("a replayed call past the budget = %+v, %d calls; want it through", res, called)
	}
	other := tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c2", Iteration: 1}
	if res := call(ctx, other); !strings.Contains(res.Content, "tool calls of the last minute") {
		t.Errorf("a call the journal does not answer, past the budget = %+v, want refused", res)
	}
}

// TestGrantNeverSendsAReplayUnchecked: two calls with one journal key (a journal written
// before calls got ids of their own) both pass the grant layer unchecked, as the journal
// holds an outcome for their key; one replays it, and the other, finding it taken, is
// not sent: a tool outside the tenant's grant never reaches a worker.
func TestGrantNeverSendsAReplayUnchecked(t *testing.T) {
	s := pipelineService(t, config.Default())
	s.cfg.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"other"}}}
	var sent atomic.Int32
	var entered sync.WaitGroup
	entered.Add(2)
	wipe := grouped{tool.New("wipe", "Wipes.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		entered.Done()
		entered.Wait() // both passed the grant layer
		res, _ := toolcall.Journaled(ctx, "wipe", true, toolcall.Dispatcher{Worker: "w-1", Send: func(context.Context) (tool.Result, []byte) {
			sent.Add(1)
			return tool.Text("sent to the worker"), nil
		}})
		return res, nil
	}), "crm"}
	p := toolcall.Pipeline{s.grantLayer("acme", s.cfg.Tenants["acme"])}
	j := startedJournal(t)
	info := tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c", Iteration: 1}
	j.outcomes = map[string]json.RawMessage{callKey(info): json.RawMessage(toolcall.EncodeResult(tool.Text("replayed")))}
	j.dispatched = map[string]bool{callKey(info): true}
	ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, j)
	var wg sync.WaitGroup
	out := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			res, _ := toolcall.Run(ctx, nil, &toolcall.Call{Tool: p.Wrap(wipe), Input: "{}", Info: info})
			out[i] = res.Content
		})
	}
	wg.Wait()
	slices.Sort(out)
	if sent.Load() != 0 || out[0] != "replayed" || !strings.Contains(out[1], "was not sent") {
		t.Errorf("results %q, %d sent to the worker; want one replayed, one not sent, none sent", out, sent.Load())
	}
}
