package run

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// tracedProvider records every model call as a "chat {model}" span with the GenAI
// attributes, and its tokens in gen_ai.client.token.usage.
type tracedProvider struct {
	llm.Provider
	tel *telemetry.Telemetry
}

// DefaultModel forwards the wrapped provider's default model, if it has one.
func (p tracedProvider) DefaultModel() string {
	if d, ok := p.Provider.(llm.DefaultModeler); ok {
		return d.DefaultModel()
	}
	return ""
}

func (p tracedProvider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	if p.tel.Off() {
		return p.Provider.Stream(ctx, req) // nothing to record: no span, no attributes
	}
	return func(yield func(llm.Chunk, error) bool) {
		model := req.Model
		if model == "" {
			model = p.DefaultModel()
		}
		ctx, span := p.tel.StartChat(ctx, p.Name(), model)
		ended := false
		end := func(r telemetry.ChatResult) {
			if !ended {
				ended = true
				p.tel.EndChat(span, r)
			}
		}
		defer end(telemetry.ChatResult{ErrorType: "incomplete"}) // the consumer stopped early
		for c, err := range p.Provider.Stream(ctx, req) {
			switch {
			case err != nil:
				end(telemetry.ChatResult{Err: err, ErrorType: chatErrorType(err)})
			case c.Done != nil:
				var finish []string
				if c.Done.FinishReason != "" {
					finish = []string{c.Done.FinishReason}
				}
				end(telemetry.ChatResult{InputTokens: c.Done.Usage.InputTokens, OutputTokens: c.Done.Usage.OutputTokens,
					FinishReasons: finish, ResponseModel: c.Done.Model})
			}
			if !yield(c, err) {
				return
			}
		}
	}
}

// chatErrorType is a low-cardinality error.type for a failed model call.
func chatErrorType(err error) string {
	var pe *llm.ProviderError
	switch {
	case errors.As(err, &pe):
		return string(pe.Kind)
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "_OTHER"
	}
}

// modelProvider is the provider a loop of tenant calls: provider traced, behind the
// tenant's model-call budget (tenants.<name>.model_calls_per_minute) when it has one.
func (s *Service) modelProvider(provider llm.Provider, tenant string) llm.Provider {
	traced := tracedProvider{provider, s.tel}
	n := s.cfg.Tenants[tenant].ModelCallsPerMinute
	if tenant == "" || n <= 0 {
		return traced
	}
	return budgetedProvider{tracedProvider: traced, lim: s.perMinute(&s.modelRates, tenant, n), n: n}
}

// budgetedProvider waits for its tenant's bucket before each model call. The wait is
// not part of the call's span.
type budgetedProvider struct {
	tracedProvider
	lim *rate.Limiter
	n   int
}

func (p budgetedProvider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		r := p.lim.Reserve()
		if d := r.Delay(); d > 0 {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				r.Cancel()
				yield(llm.Chunk{}, &llm.ProviderError{Provider: "toolmesh", Kind: llm.KindRateLimited, RetryAfter: d,
					Message: fmt.Sprintf("this run's tenant has made its %d model calls of the last minute, and the next may start only after the run's deadline", p.n)})
				return
			}
			if llm.Sleep(ctx, d) != nil {
				r.Cancel()
				yield(llm.Chunk{}, context.Cause(ctx))
				return
			}
		}
		for c, err := range p.tracedProvider.Stream(ctx, req) {
			if !yield(c, err) {
				return
			}
		}
	}
}
