package run

import (
	"context"
	"slices"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// mcpRefresh is the loop strategy that follows the MCP groups a run offers flat: after a
// tool call, a group whose server said its tools changed (tools/list_changed) is listed
// again, and the loop's tool set gains the new tools and loses the gone ones (a
// tools_changed event says so).
type mcpRefresh struct {
	groups map[string]*mcp.Group
	seen   map[string]uint64
}

// newMCPRefresh follows the groups of roles that are MCP groups offered flat; nil when
// there are none.
func (s *Service) newMCPRefresh(roles []string) loop.Strategy {
	r := &mcpRefresh{groups: map[string]*mcp.Group{}, seen: map[string]uint64{}}
	for _, role := range roles {
		g, ok := s.mcp[role]
		gc := s.cfg.Groups[role]
		if !ok || gc.Facade != nil || len(gc.Facades) > 0 || gc.Offer == "facade" {
			continue
		}
		r.groups[role], r.seen[role] = g, g.Version()
	}
	if len(r.groups) == 0 {
		return nil
	}
	return r
}

func (r *mcpRefresh) Evaluate(ctx context.Context, ic loop.InjectionContext) (loop.Injection, error) {
	var inj loop.Injection
	for role, g := range r.groups {
		v := g.Version()
		if v == r.seen[role] {
			continue
		}
		ts, err := g.Tools(ctx)
		if err != nil {
			return loop.Injection{}, err
		}
		r.seen[role] = v
		fresh := map[string]bool{}
		for _, t := range ts {
			fresh[t.Definition().Name] = true
		}
		var current []string
		for _, t := range ic.Current {
			if gt, ok := tool.As[decorators.Grouped](t); ok && gt.Group() == role {
				current = append(current, t.Definition().Name)
				if !fresh[t.Definition().Name] {
					inj.Remove = append(inj.Remove, t)
				}
			}
		}
		for _, t := range ts {
			if !slices.Contains(current, t.Definition().Name) {
				inj.Add = append(inj.Add, t)
			}
		}
	}
	return inj, nil
}
