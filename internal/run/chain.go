package run

import (
	"errors"
	"fmt"
	"slices"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
)

// compileChain compiles the decorator chain the config describes; an error names the
// config key at fault.
func compileChain(cfg config.Config, custom map[string]decorators.Sink) (*decorators.Chain, error) {
	c := &decorators.Chain{
		Bounds:  decorators.Bounds{MaxTextBytes: cfg.Loop.MaxToolResultBytes, MaxArtifactBytes: cfg.Loop.MaxArtifactBytes},
		Replan:  map[string]decorators.Decider{},
		OneShot: map[string]string{},
	}
	var errs []error
	addRules := func(prefix string, tools, groups []string, sinks []config.ArtifactSink, assets []config.ArtifactFilter) {
		for i, a := range sinks {
			r, err := decorators.CompileRule(decorators.RuleSpec{Key: fmt.Sprintf("%s.artifacts[%d]", prefix, i), Tools: tools, Groups: groups,
				FilterSpec: filterSpec(a.ArtifactFilter), Sinks: a.Sinks}, custom)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.Sinks = append(c.Sinks, r)
		}
		for i, a := range assets {
			r, err := decorators.CompileRule(decorators.RuleSpec{Key: fmt.Sprintf("%s.assets[%d]", prefix, i), Tools: tools, Groups: groups,
				FilterSpec: filterSpec(a), Sinks: []string{decorators.SinkAssets}}, custom)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.Assets = append(c.Assets, r)
		}
	}
	for _, role := range sortedKeys(cfg.Groups) {
		g := cfg.Groups[role]
		addRules("groups."+role, nil, []string{role}, g.Artifacts, g.Assets)
	}
	for _, name := range sortedKeys(cfg.Tools) {
		t := cfg.Tools[name]
		addRules("tools."+name, []string{name}, nil, t.Artifacts, t.Assets)
		if t.OneShot != nil {
			c.OneShot[name] = t.OneShot.Advice
		}
		if rp := t.Replan; rp != nil {
			d, err := decorators.CompileReplan(decorators.ReplanSpec{Key: "tools." + name + ".replan", Tool: name,
				TypeName: rp.Type, When: rp.When, Reason: rp.Reason, Add: rp.Add, AddType: rp.AddType})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.Replan[name] = d
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return c, nil
}

func filterSpec(f config.ArtifactFilter) decorators.FilterSpec {
	return decorators.FilterSpec{TypeName: f.Type, When: f.When, Transform: f.Transform, TransformType: f.TransformType}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// requestRules compiles a run's own artifact rules; an error is a FieldError naming the
// request field.
func (s *Service) requestRules(specs []decorators.RuleSpec) ([]decorators.Rule, error) {
	var out []decorators.Rule
	for i, spec := range specs {
		spec.Key = indexed("artifact_sinks", i)
		spec.TransformTypeField = "transform_type_name"
		r, err := decorators.CompileRule(spec, s.sinks)
		if err != nil {
			var se *decorators.SpecError
			if errors.As(err, &se) {
				return nil, fieldErr(se.Key, ErrInvalid, "%s", se.Problem)
			}
			return nil, fieldErr(spec.Key, ErrInvalid, "%v", err)
		}
		out = append(out, r)
	}
	return out, nil
}
