package llm_test

import (
	"context"
	"iter"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
)

type named struct{ def string }

func (named) Name() string { return "p" }
func (named) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(func(llm.Chunk, error) bool) {}
}

type withDefault struct{ named }

func (d withDefault) DefaultModel() string { return d.def }

func TestLabel(t *testing.T) {
	cases := []struct {
		p     llm.Provider
		model string
		want  string
	}{
		{named{}, "", "p"},
		{named{}, "m1", "p/m1"},
		{named{}, "meta-llama/m2", "p/meta-llama/m2"},
		{withDefault{named{"d"}}, "", "p/d"},
		{withDefault{named{"d"}}, "m1", "p/m1"},
		{withDefault{named{""}}, "", "p"},
	}
	for _, c := range cases {
		if got := llm.Label(c.p, c.model); got != c.want {
			t.Errorf("Label(%T, %q) = %q, want %q", c.p, c.model, got, c.want)
		}
	}
}

func TestCollect(t *testing.T) {
	seq := func(yield func(llm.Chunk, error) bool) {
		_ = yield(llm.Chunk{TextDelta: "he"}, nil) && yield(llm.Chunk{TextDelta: "llo"}, nil) &&
			yield(llm.Chunk{Done: &llm.Response{Text: "hello"}}, nil)
	}
	r, err := llm.Collect(seq)
	if err != nil || r.Text != "hello" {
		t.Fatalf("Collect = %v, %v", r, err)
	}
	if _, err := llm.Collect(func(yield func(llm.Chunk, error) bool) { yield(llm.Chunk{TextDelta: "x"}, nil) }); err != llm.ErrNoFinalChunk {
		t.Errorf("Collect without Done = %v, want ErrNoFinalChunk", err)
	}
}
