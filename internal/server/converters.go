package server

import (
	"fmt"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Converters builds the router's per-group converter from the config: a group's own
// converter, else the default, either way with the configured secret keys removed unless
// an allow-keys converter lists them explicitly (credential keys are secrets too; see
// toolctx.Secured).
func Converters(cfg config.Config) (func(group string) toolctx.Converter, error) {
	build := func(where string, spec config.ConverterSpec) (toolctx.Converter, error) {
		c, err := toolctx.ParseConverter(spec.Kind, spec.Keys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return toolctx.Secured(c, cfg.Context.Secrets...), nil
	}
	def, err := build("context.default", cfg.Context.Default)
	if err != nil {
		return nil, err
	}
	groups := map[string]toolctx.Converter{}
	for role, g := range cfg.Groups {
		if g.Context == nil {
			continue
		}
		if groups[role], err = build("groups."+role+".context", *g.Context); err != nil {
			return nil, err
		}
	}
	return func(group string) toolctx.Converter {
		if c, ok := groups[group]; ok {
			return c
		}
		return def
	}, nil
}
