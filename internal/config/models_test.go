package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKnownModels(t *testing.T) {
	c := Default()
	c.Models.Roles = map[string]string{"smart": "openai/gpt-4o", "fast": "openai/gpt-4o-mini"}
	c.Models.Prices = map[string]Price{"openai/gpt-4o": {InputPerMTok: 1}, "anthropic/claude-x": {}}
	c.Provider.Anthropic.DefaultModel = "claude-y"
	want := []string{"claude-x", "claude-y", "gpt-4o", "gpt-4o-mini"}
	if diff := cmp.Diff(want, c.KnownModels()); diff != "" {
		t.Errorf("KnownModels (-want +got):\n%s", diff)
	}
}
