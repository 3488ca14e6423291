package router

import (
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// ListTools returns the registered tools sorted by name, only those of the given groups
// when any are given.
func (r *Router) ListTools(groups ...string) []*toolpb.ToolInfo {
	want := map[string]bool{}
	for _, g := range groups {
		want[g] = true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*toolpb.ToolInfo, 0, len(r.tools))
	for _, e := range r.tools {
		if len(want) > 0 && !want[e.group] {
			continue
		}
		out = append(out, &toolpb.ToolInfo{
			Definition:  proto.Clone(e.proto).(*toolpb.ToolDefinition),
			Group:       e.group,
			ContentHash: e.hash,
			WorkerIds:   sortedIDs(e.replicas),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetDefinition().GetName() < out[j].GetDefinition().GetName() })
	return out
}

// ListGroups returns the tool groups sorted by role.
func (r *Router) ListGroups() []*toolpb.ToolGroupStatus {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*toolpb.ToolGroupStatus, 0, len(r.groups))
	for _, g := range r.groups {
		names := make([]string, 0, len(g.tools))
		for n := range g.tools {
			names = append(names, n)
		}
		sort.Strings(names)
		out = append(out, &toolpb.ToolGroupStatus{
			Group:     proto.Clone(g.info).(*toolpb.ToolGroupInfo),
			Tools:     names,
			WorkerIds: sortedIDs(g.workers),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetGroup().GetRole() < out[j].GetGroup().GetRole() })
	return out
}

// ListWorkers returns the registered workers sorted by id.
func (r *Router) ListWorkers() []*toolpb.WorkerStatus {
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*toolpb.WorkerStatus, 0, len(r.workers))
	for _, w := range r.workers {
		ws := &toolpb.WorkerStatus{
			WorkerId:     w.id,
			Address:      w.address,
			Groups:       append([]string(nil), w.groups...),
			State:        w.status(now),
			InFlight:     w.inFlight.Load(),
			Calls:        w.calls.Load(),
			Capacity:     w.capacity,
			RegisteredAt: timestamppb.New(w.registeredAt),
			Version:      w.version,
		}
		if ws.State == toolpb.WorkerState_WORKER_STATE_EJECTED {
			w.mu.Lock()
			ws.EjectedUntil = timestamppb.New(w.ejectedUntil)
			w.mu.Unlock()
		}
		out = append(out, ws)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetWorkerId() < out[j].GetWorkerId() })
	return out
}

// WorkerIDs returns the ids of the registered workers, sorted.
func (r *Router) WorkerIDs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return sortedIDs(r.workers)
}

func sortedIDs(m map[string]*worker) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ReplicaCounts returns the number of registered workers of each group, for the
// registered-replicas gauge.
func (r *Router) ReplicaCounts() map[string]int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]int64, len(r.groups))
	for role, g := range r.groups {
		out[role] = int64(len(g.workers))
	}
	return out
}
