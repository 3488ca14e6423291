package compose

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/celexpr"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Converters builds the per-group converter of the router and the MCP groups: the
// program's own for a group (code, by role; "" for every group without one), else the
// config's for the group, else the program's default, else the config's default. Either
// way the configured secret keys are removed unless an allow-keys converter lists them
// explicitly (credential keys are secrets too; see ctxconv.Secured).
func Converters(cfg config.Config, code map[string]ctxconv.Converter) (func(group string) ctxconv.Converter, error) {
	secure := func(c ctxconv.Converter) ctxconv.Converter { return ctxconv.Secured(c, cfg.Context.Secrets...) }
	for role, c := range code {
		if c == nil {
			return nil, fmt.Errorf("the converter of group %q is nil", role)
		}
	}
	groups := map[string]ctxconv.Converter{}
	for role, c := range code {
		groups[role] = secure(c)
	}
	for role, g := range cfg.Groups {
		if _, ok := groups[role]; ok || g.Context == nil {
			continue
		}
		c, err := parseConverter(role, *g.Context, cfg.Context.Secrets...)
		if err != nil {
			return nil, fmt.Errorf("groups.%s.context: %w", role, err)
		}
		groups[role] = secure(c)
	}
	if c, ok := groups[""]; ok {
		delete(groups, "")
		return func(group string) ctxconv.Converter {
			if gc, ok := groups[group]; ok {
				return gc
			}
			return c
		}, nil
	}
	// The config's default: a cel one knows the group it converts for, so each group has
	// its own, compiled on first use.
	if _, err := parseConverter("", cfg.Context.Default); err != nil {
		return nil, fmt.Errorf("context.default: %w", err)
	}
	var defaults sync.Map
	return func(group string) ctxconv.Converter {
		if gc, ok := groups[group]; ok {
			return gc
		}
		if c, ok := defaults.Load(group); ok {
			return c.(ctxconv.Converter)
		}
		c, _ := parseConverter(group, cfg.Context.Default, cfg.Context.Secrets...) // checked above
		stored, _ := defaults.LoadOrStore(group, secure(c))
		return stored.(ctxconv.Converter)
	}, nil
}

// Converter kinds of the configuration.
const (
	kindPassThrough = "pass-through"
	kindNone        = "none"
	kindAllowKeys   = "allow-keys"
	kindDenyKeys    = "deny-keys"
	kindCEL         = "cel"
)

// errInvalidConverter reports a converter configuration parseConverter rejects.
var errInvalidConverter = errors.New("invalid converter")

// parseConverter builds group's converter from its configuration. The kind is one of
// "pass-through" (also the empty string: the default), "none", "allow-keys", "deny-keys"
// and "cel" (keep and set: see celexpr.Converter).
// pass-through and none take no keys; allow-keys and deny-keys take any number (an
// allow-keys with no keys forwards nothing). Keys must be non-empty, distinct and not
// reserved.
func parseConverter(group string, spec config.ConverterSpec, secrets ...string) (ctxconv.Converter, error) {
	kind, keys := spec.Kind, spec.Keys
	if kind != kindCEL && (spec.Keep != "" || len(spec.Set) > 0) {
		return nil, fmt.Errorf("%w: keep and set are a cel converter's, not %q's", errInvalidConverter, cmp.Or(kind, kindPassThrough))
	}
	switch kind {
	case kindCEL:
		if len(keys) > 0 {
			return nil, fmt.Errorf("%w: %q takes no keys, got %d (%s)", errInvalidConverter, kind, len(keys), strings.Join(keys, ", "))
		}
		c, err := celexpr.NewConverter(group, spec.Keep, spec.Set, func(k string) bool { return ctxconv.IsSecretKey(k, secrets...) })
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errInvalidConverter, err)
		}
		return c, nil
	case "", kindPassThrough, kindNone:
		if len(keys) > 0 {
			if kind == "" {
				kind = kindPassThrough
			}
			return nil, fmt.Errorf("%w: %q takes no keys, got %d (%s)", errInvalidConverter, kind, len(keys), strings.Join(keys, ", "))
		}
		if kind == kindNone {
			return ctxconv.None(), nil
		}
		return ctxconv.PassThrough(), nil
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
			return ctxconv.AllowKeys(keys...), nil
		}
		return ctxconv.DenyKeys(keys...), nil
	default:
		return nil, fmt.Errorf("%w: unknown kind %q (want %q, %q, %q, %q or %q)", errInvalidConverter, kind,
			kindPassThrough, kindNone, kindAllowKeys, kindDenyKeys, kindCEL)
	}
}
