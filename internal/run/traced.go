package run

import (
	"context"
	"errors"
	"iter"

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
