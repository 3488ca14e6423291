package server

import (
	"errors"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestRunModelSelection: a run picks its model by "provider/model", by role, or gets the
// default; unknown roles and unconfigured providers are invalid requests naming the field.
func TestRunModelSelection(t *testing.T) {
	e := newEnv(t, envOptions{configure: func(c *config.Config) {
		c.Models.Roles = map[string]string{"fast": "scripted/quick", "smart": "anthropic/claude"}
	}})
	ctx := testContext(t)
	cases := []struct {
		llm   *toolpb.LlmOptions
		label string
		field string
	}{
		{nil, "scripted/echo", ""},
		{&toolpb.LlmOptions{Model: "scripted/other"}, "scripted/other", ""},
		{&toolpb.LlmOptions{Model: "meta-llama/Llama-3"}, "scripted/meta-llama/Llama-3", ""},
		{&toolpb.LlmOptions{Role: "fast"}, "scripted/quick", ""},
		{&toolpb.LlmOptions{Model: "scripted/x", Role: "fast"}, "scripted/x", ""},
		{&toolpb.LlmOptions{Role: "creative"}, "", "llm.role"},
		{&toolpb.LlmOptions{Role: "smart"}, "", "llm.role"},
		{&toolpb.LlmOptions{Model: "openai/gpt-4o"}, "", "llm.model"},
	}
	for _, tc := range cases {
		var started string
		_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", Llm: tc.llm}, func(ev *toolpb.RunResponse) {
			if s := ev.GetStarted(); s != nil {
				started = s.GetModel()
			}
		})
		if tc.field != "" {
			var ce *client.Error
			if !errors.As(err, &ce) || !errors.Is(err, client.ErrInvalidRequest) || ce.Field != tc.field {
				t.Errorf("%v: err = %v, want InvalidArgument naming %s", tc.llm, err, tc.field)
			}
			continue
		}
		if err != nil || started != tc.label {
			t.Errorf("%v: started with %q (err %v), want %q", tc.llm, started, err, tc.label)
		}
	}
}
