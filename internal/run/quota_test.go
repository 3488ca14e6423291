package run

import (
	"context"
	"errors"
	"iter"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
)

// A refusal at a bound suggests a retry delay that grows with the refusals per run
// that ends: about a second while runs end as often as callers are refused, the most
// (30 s) while a crowd is refused and nothing ends.
func TestRefusalRetryDelay(t *testing.T) {
	nop := func(error) {}
	s := newStore(1000, 10)
	// Runs of acme end often: one refusal then asks for about a second.
	for i := range 50 {
		r, err := s.startLimited("a", "acme", 1, nop)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		s.finish(r)
	}
	if _, err := s.startLimited("a", "acme", 1, nop); err != nil {
		t.Fatal(err)
	}
	_, err := s.startLimited("b", "acme", 1, nop)
	var fe *FullError
	if !errors.As(err, &fe) || !errors.Is(err, ErrTenantFull) || errors.Is(err, ErrFull) || fe.Tenant != "acme" || fe.Max != 1 {
		t.Fatalf("refusal: %v, want a *FullError of acme that is ErrTenantFull", err)
	}
	if d := RetryDelay(err); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("one refusal while runs end often suggests %s, want about 1 s", d)
	}
	if !strings.Contains(err.Error(), `tenant "acme" is running its maximum of 1 runs`) {
		t.Errorf("message %q", err)
	}
	// A crowd refused while nothing ends: the delay reaches its bound and stays there.
	var last time.Duration
	for range 2000 {
		last = RetryDelay(s.admit("acme", 1))
	}
	if last < 27*time.Second || last > 33*time.Second {
		t.Errorf("the 2000th refusal suggests %s, want 30 s ± a tenth", last)
	}
	// Another tenant's pressure is its own.
	if _, err := s.startLimited("g", "globex", 1, nop); err != nil {
		t.Fatal(err)
	}
	if d := RetryDelay(s.admit("globex", 1)); d > 7*time.Second {
		t.Errorf("globex's first refusal suggests %s: acme's crowd leaked into it", d)
	}
	// The orchestrator's own bound is ErrFull, with its own delay.
	small := newStore(1, 10)
	if _, err := small.start("x", "", nop); err != nil {
		t.Fatal(err)
	}
	err = small.admit("", 0)
	if !errors.Is(err, ErrFull) || errors.Is(err, ErrTenantFull) || RetryDelay(err) < 900*time.Millisecond {
		t.Errorf("the orchestrator's bound: %v (retry after %s), want ErrFull with a delay", err, RetryDelay(err))
	}
}

// quotaService is a Service whose tenant acme may use the communication group within
// tenant, and whose model calls the progress tool turns times, then answers.
func quotaService(t *testing.T, tenant config.Tenant, turns int) *Service {
	t.Helper()
	cfg := config.Default()
	tenant.Groups = []string{"communication"}
	cfg.Tenants = map[string]config.Tenant{"acme": tenant}
	var rules []scripted.Rule
	for i := 1; i <= turns; i++ {
		rules = append(rules, scripted.Rule{When: scripted.When{Turn: i}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "progress", ArgumentsRaw: `{"status":"working"}`}}}})
	}
	rules = append(rules, scripted.Rule{Reply: scripted.Reply{Text: "done"}})
	model, err := scripted.New(scripted.Script{Name: "q", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return scriptedService(t, cfg, model)
}

// A tenant at its bound of runs is refused before its request is resolved: a request
// that names a group that does not exist is refused for the bound, not for the group.
func TestTenantRefusedBeforeResolution(t *testing.T) {
	s := quotaService(t, config.Tenant{MaxConcurrentRuns: 1}, 0)
	if _, err := s.store.startLimited("holder", "acme", 1, func(error) {}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Run(ctx, Request{Tenant: "acme", Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Groups: []string{"no_such_group"}}, func(Event) {})
	if !errors.Is(err, ErrTenantFull) || RetryDelay(err) <= 0 {
		t.Fatalf("run of a full tenant: %v, want ErrTenantFull with a retry delay", err)
	}
	if _, err := s.Run(ctx, Request{Tenant: "", Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Groups: []string{"communication"}}, func(Event) {}); err != nil {
		t.Fatalf("a run without a tenant: %v", err)
	}
}

// model_calls_per_minute: a run whose next model call could start only after its
// deadline ends at once with a rate-limited error saying why; within the budget the
// same run answers.
func TestModelCallBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := Request{Tenant: "acme", Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Groups: []string{"communication"}, Timeout: 5 * time.Second}

	s := quotaService(t, config.Tenant{ModelCallsPerMinute: 2}, 2) // three model calls
	start := time.Now()
	_, err := s.Run(ctx, req, func(Event) {})
	if !errors.Is(err, llm.ErrRateLimited) || !strings.Contains(err.Error(), "made its 2 model calls of the last minute") {
		t.Fatalf("run past its tenant's model calls: %v, want a rate-limited error that says why", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the run waited %s for a model call it could never make in time", el)
	}
	// Another tenant's budget is untouched, and the same run fits a budget of three.
	s = quotaService(t, config.Tenant{ModelCallsPerMinute: 3}, 2)
	res, err := s.Run(ctx, req, func(Event) {})
	if err != nil || res.Text != "done" {
		t.Fatalf("run within its budget: %+v, %v", res, err)
	}
}

// countingProvider answers every call with one final chunk and counts the calls.
type countingProvider struct{ calls int }

func (p *countingProvider) Name() string { return "counting" }

func (p *countingProvider) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		p.calls++
		yield(llm.Chunk{Done: &llm.Response{FinishReason: "stop"}}, nil)
	}
}

// A model call past the budget waits for the bucket and then goes; one whose run is
// cancelled meanwhile ends at once with the cancellation, without calling the model.
func TestBudgetedProviderWaits(t *testing.T) {
	inner := &countingProvider{}
	p := budgetedProvider{tracedProvider: tracedProvider{Provider: inner}, lim: rate.NewLimiter(rate.Every(200*time.Millisecond), 1), n: 300}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func(ctx context.Context) error {
		for _, err := range p.Stream(ctx, &llm.Request{}) {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := call(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := call(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("the second call went after %s, before the bucket refilled", el)
	}
	if inner.calls != 2 {
		t.Errorf("%d model calls, want 2", inner.calls)
	}
	p.lim = rate.NewLimiter(rate.Every(time.Hour), 1)
	p.lim.Allow()
	cctx, ccancel := context.WithCancelCause(context.Background()) // no deadline: the call waits
	cause := errors.New("cancelled by the client")
	time.AfterFunc(100*time.Millisecond, func() { ccancel(cause) })
	start = time.Now()
	if err := call(cctx); !errors.Is(err, cause) {
		t.Errorf("a call cancelled while it waited: %v, want the cancellation's cause", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the cancelled call returned after %s", el)
	}
	if inner.calls != 2 {
		t.Errorf("%d model calls, want 2: the cancelled call reached the model", inner.calls)
	}
}
