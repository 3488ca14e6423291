package run

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// mcpRefresh is the loop strategy that follows the groups a run offers whose tools come
// from MCP servers: after a tool call, a group one of whose servers said its tools
// changed (tools/list_changed) is offered again as the config says, and the loop's tool
// set follows the difference (a tools_changed event says so). A group offered flat gains
// the new tools and loses the gone ones. A facade the model has not opened yet is
// replaced by the new one; one it has opened (its guide tool and children in the set)
// has its children followed the same way, recursively.
type mcpRefresh struct {
	svc   *Service
	roles map[string]*followed
}

type followed struct {
	groups  []*mcp.Group
	version uint64
	offered []tool.Tool
}

// newMCPRefresh follows the roles that are MCP groups or config groups including tools
// of MCP groups; nil when there are none.
func (s *Service) newMCPRefresh(ctx context.Context, roles []string) loop.Strategy {
	r := &mcpRefresh{svc: s, roles: map[string]*followed{}}
	for _, role := range roles {
		if _, dup := r.roles[role]; dup {
			continue
		}
		groups := s.mcpSources(role)
		if len(groups) == 0 {
			continue
		}
		f := &followed{groups: groups, version: versionOf(groups)}
		ts, err := s.groupTools(ctx, role)
		if err != nil {
			continue // the run starts without the group (a warning says so); nothing to follow
		}
		f.offered = ts
		r.roles[role] = f
	}
	if len(r.roles) == 0 {
		return nil
	}
	return r
}

// mcpSources are the MCP groups whose tools a role offers.
func (s *Service) mcpSources(role string) []*mcp.Group {
	if g, ok := s.mcp[role]; ok {
		return []*mcp.Group{g}
	}
	var out []*mcp.Group
	for _, p := range s.cfg.Groups[role].Include {
		src, _, _ := strings.Cut(p, "/")
		if g, ok := s.mcp[src]; ok && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

func versionOf(groups []*mcp.Group) uint64 {
	var v uint64
	for _, g := range groups {
		v += g.Version()
	}
	return v
}

func (r *mcpRefresh) Evaluate(ctx context.Context, ic loop.InjectionContext) (loop.Injection, error) {
	var inj loop.Injection
	current := map[string]tool.Tool{}
	for _, t := range ic.Current {
		current[t.Definition().Name] = t
	}
	for _, role := range slices.Sorted(maps.Keys(r.roles)) {
		f := r.roles[role]
		v := versionOf(f.groups)
		if v == f.version {
			continue
		}
		fresh, err := r.svc.groupTools(ctx, role)
		if err != nil {
			return inj, err
		}
		f.version = v
		follow(f.offered, fresh, current, &inj)
		f.offered = fresh
	}
	return inj, nil
}

// follow adds to inj what turns the tools offered as old into those offered as fresh,
// given the loop's current tools by name.
func follow(old, fresh []tool.Tool, current map[string]tool.Tool, inj *loop.Injection) {
	freshBy := byName(fresh)
	for _, o := range old {
		if _, ok := freshBy[o.Definition().Name]; !ok {
			removeDeep(o, current, inj)
		}
	}
	oldBy := byName(old)
	for _, f := range fresh {
		name := f.Definition().Name
		o, had := oldBy[name]
		cur, present := current[name]
		switch {
		case !had:
			if !present {
				inj.Add = append(inj.Add, f)
			}
		case present && !isFacade(cur) && isFacade(o):
			// The facade has unfolded: cur is its guide tool, its children are followed.
			if ff, ok := tool.As[tool.Facade](f); ok {
				of, _ := tool.As[tool.Facade](o)
				follow(of.Children(), ff.Children(), current, inj)
			}
		case present && signature(o) != signature(f):
			inj.Remove = append(inj.Remove, cur)
			inj.Add = append(inj.Add, f)
		}
	}
}

// removeDeep removes t from the current tools and, for a facade that has unfolded, its
// children.
func removeDeep(t tool.Tool, current map[string]tool.Tool, inj *loop.Injection) {
	if cur, ok := current[t.Definition().Name]; ok {
		inj.Remove = append(inj.Remove, cur)
		if isFacade(cur) {
			return // not unfolded: its children are not in the set
		}
	}
	if f, ok := tool.As[tool.Facade](t); ok {
		for _, c := range f.Children() {
			removeDeep(c, current, inj)
		}
	}
}

func isFacade(t tool.Tool) bool {
	_, ok := tool.As[tool.Facade](t)
	return ok
}

func byName(ts []tool.Tool) map[string]tool.Tool {
	m := make(map[string]tool.Tool, len(ts))
	for _, t := range ts {
		m[t.Definition().Name] = t
	}
	return m
}

// signature is what the model sees of a tool, with a facade's children: two tools of
// one signature need no replacing.
func signature(t tool.Tool) string {
	d := t.Definition()
	s := d.Name + "\x00" + d.Description + "\x00" + d.InputSchema.String() + "\x00"
	if f, ok := tool.As[tool.Facade](t); ok {
		for _, c := range f.Children() {
			s += "{" + signature(c) + "}"
		}
	}
	return s
}
