// Package looptest holds a hand-written fake model for tests of the tool loop and of code
// that drives it: a provider that answers with fixed responses, in order, and records the
// requests it received. Use internal/llm/scripted when the answer depends on the
// conversation; use this one for answers scripted cannot give (a truly empty turn, a
// response value handed out twice, a call without an id).
//
// It depends on internal/llm only.
package looptest

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// ErrNoMoreReplies is the stream error once a Replies provider has answered with all its
// responses.
var ErrNoMoreReplies = errors.New("looptest: no more replies")

// Provider is a fake llm.Provider. It is safe for concurrent use.
type Provider struct {
	answer func(ctx context.Context, n int, req *llm.Request) (*llm.Response, error)

	mu       sync.Mutex
	requests []llm.Request
}

var _ llm.Provider = (*Provider)(nil)

// Func returns a provider that answers the n-th request (from 1) with f. f may block; it
// should return when ctx ends.
func Func(f func(ctx context.Context, n int, req *llm.Request) (*llm.Response, error)) *Provider {
	return &Provider{answer: f}
}

// Replies returns a provider that answers the n-th request with rs[n-1], and fails with
// ErrNoMoreReplies after the last one.
func Replies(rs ...llm.Response) *Provider {
	return Func(func(_ context.Context, n int, _ *llm.Request) (*llm.Response, error) {
		if n > len(rs) {
			return nil, ErrNoMoreReplies
		}
		r := rs[n-1]
		r.ToolCalls = slices.Clone(r.ToolCalls)
		return &r, nil
	})
}

// Name returns "looptest".
func (p *Provider) Name() string { return "looptest" }

// Stream records req and yields the answer as one final chunk.
func (p *Provider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		n := p.record(req)
		resp, err := p.answer(ctx, n, req)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		yield(llm.Chunk{Done: resp}, nil)
	}
}

func (p *Provider) record(req *llm.Request) int {
	c := *req
	c.Messages = slices.Clone(req.Messages)
	for i := range c.Messages {
		c.Messages[i].ToolCalls = slices.Clone(c.Messages[i].ToolCalls)
	}
	c.Tools = slices.Clone(req.Tools)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, c)
	return len(p.requests)
}

// Requests returns the requests received so far, oldest first.
func (p *Provider) Requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}
