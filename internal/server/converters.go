package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Converters builds the router's per-group converter from the config: a group's own
// converter, else the default, either way with the configured secret keys removed unless
// an allow-keys converter lists them explicitly (credential keys are secrets too; see
// toolctx.Secured).
func Converters(cfg config.Config) (func(group string) toolctx.Converter, error) {
	build := func(where string, spec config.ConverterSpec) (toolctx.Converter, error) {
		c, err := parseConverter(spec.Kind, spec.Keys)
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

// Converter kinds of the configuration.
const (
	kindPassThrough = "pass-through"
	kindNone        = "none"
	kindAllowKeys   = "allow-keys"
	kindDenyKeys    = "deny-keys"
)

// errInvalidConverter reports a converter configuration parseConverter rejects.
var errInvalidConverter = errors.New("invalid converter")

// parseConverter builds a converter from configuration. kind is one of "pass-through"
// (also the empty string: the default), "none", "allow-keys" and "deny-keys".
// pass-through and none take no keys; allow-keys and deny-keys take any number (an
// allow-keys with no keys forwards nothing). Keys must be non-empty, distinct and not
// reserved.
func parseConverter(kind string, keys []string) (toolctx.Converter, error) {
	switch kind {
	case "", kindPassThrough, kindNone:
		if len(keys) > 0 {
			if kind == "" {
				kind = kindPassThrough
			}
			return nil, fmt.Errorf("%w: %q takes no keys, got %d (%s)", errInvalidConverter, kind, len(keys), strings.Join(keys, ", "))
		}
		if kind == kindNone {
			return toolctx.None(), nil
		}
		return toolctx.PassThrough(), nil
	case kindAllowKeys, kindDenyKeys:
		for i, k := range keys {
			switch {
			case k == "":
				return nil, fmt.Errorf("%w: %q: key %d is empty", errInvalidConverter, kind, i)
			case toolctx.IsReserved(k):
				return nil, fmt.Errorf("%w: %q: key %q is reserved (prefix %q); it never crosses a process boundary", errInvalidConverter, kind, k, toolctx.ReservedPrefix)
			case slices.Contains(keys[:i], k):
				return nil, fmt.Errorf("%w: %q: key %q is listed twice", errInvalidConverter, kind, k)
			}
		}
		if kind == kindAllowKeys {
			return toolctx.AllowKeys(keys...), nil
		}
		return toolctx.DenyKeys(keys...), nil
	default:
		return nil, fmt.Errorf("%w: unknown kind %q (want %q, %q, %q or %q)", errInvalidConverter, kind,
			kindPassThrough, kindNone, kindAllowKeys, kindDenyKeys)
	}
}
