package config

import (
	"math"
	"slices"
	"strings"
)

// Models maps model roles to models and prices model calls.
type Models struct {
	// Roles maps a role (such as "smart" or "fast", which a run may ask for instead of a
	// model) to a model written "provider/model".
	Roles map[string]string `yaml:"roles"`
	// Prices maps "provider/model" to its price; calls of unlisted models cost nothing.
	Prices map[string]Price `yaml:"prices"`
}

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
}

// Cost is the price of a call that used the given tokens.
func (p Price) Cost(input, output int64) float64 {
	return (float64(input)*p.InputPerMTok + float64(output)*p.OutputPerMTok) / 1e6
}

func (c Config) validateModels(bad func(key, format string, args ...any)) {
	for _, role := range sortedKeys(c.Models.Roles) {
		model := c.Models.Roles[role]
		if strings.TrimSpace(role) == "" {
			bad("models.roles", "has an empty role")
			continue
		}
		p, m, ok := strings.Cut(model, "/")
		if !ok || p == "" || m == "" {
			bad("models.roles."+role, "must be written provider/model, got %q", model)
		}
	}
	for _, model := range sortedKeys(c.Models.Prices) {
		p := c.Models.Prices[model]
		if prov, m, ok := strings.Cut(model, "/"); !ok || prov == "" || m == "" {
			bad("models.prices", "key %q must be written provider/model", model)
		}
		for key, v := range map[string]float64{"input_per_mtok": p.InputPerMTok, "output_per_mtok": p.OutputPerMTok} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				bad("models.prices."+model+"."+key, "must be a non-negative number, got %v", v)
			}
		}
	}
}

// KnownModels lists the model names the configuration mentions (the roles' models, the
// priced models, the providers' default models), without their provider/ prefix.
func (c Config) KnownModels() []string {
	var out []string
	add := func(m string) {
		if _, name, ok := strings.Cut(m, "/"); ok {
			m = name
		}
		if m != "" {
			out = append(out, m)
		}
	}
	for _, m := range c.Models.Roles {
		add(m)
	}
	for m := range c.Models.Prices {
		add(m)
	}
	add(c.Provider.OpenAI.DefaultModel)
	add(c.Provider.Anthropic.DefaultModel)
	slices.Sort(out)
	return slices.Compact(out)
}
