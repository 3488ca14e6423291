package router

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Names the model sees must fit every provider's rules (OpenAI's are the strictest).
var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	groupRoleRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)
)

// Lease is a worker's registration. It lives as long as the worker's registration stream;
// the server adapter reports heartbeats and the end of the stream through it.
type Lease struct {
	r *Router
	w *worker
}

// ID identifies the lease.
func (l *Lease) ID() string { return l.w.leaseID }

// WorkerID is the id of the worker holding the lease.
func (l *Lease) WorkerID() string { return l.w.id }

// Heartbeat records a heartbeat and the load the worker reported.
func (l *Lease) Heartbeat(inFlight int32) { l.w.reported.Store(inFlight) }

// Drain stops new calls to the worker; calls in flight finish.
func (l *Lease) Drain() {
	l.w.setState(toolpb.WorkerState_WORKER_STATE_DRAINING)
	l.r.log.Info("worker draining", "worker_id", l.w.id, "lease_id", l.w.leaseID)
}

// End reports that the registration stream is gone. The worker takes no new calls; unless
// it registers again within the grace period, its tools leave the routing table. A
// worker that had announced it was draining leaves at once.
func (l *Lease) End() {
	w := l.w
	w.mu.Lock()
	if w.removed {
		w.mu.Unlock()
		return
	}
	draining := w.state == toolpb.WorkerState_WORKER_STATE_DRAINING
	w.state = toolpb.WorkerState_WORKER_STATE_DISCONNECTED
	grace := l.r.opts.GracePeriod
	if draining {
		grace = 0
	}
	w.graceTimer = time.AfterFunc(grace, func() { l.r.expire(w) })
	w.mu.Unlock()
	l.r.log.Info("worker registration stream ended", "worker_id", w.id, "lease_id", w.leaseID, "grace", grace)
}

// expire removes w if it is still the registered worker under its id.
func (r *Router) expire(w *worker) {
	r.mu.Lock()
	cur, ok := r.workers[w.id]
	if !ok || cur != w {
		r.mu.Unlock()
		return
	}
	r.removeLocked(w)
	r.mu.Unlock()
	w.close()
	r.log.Info("worker left the routing table", "worker_id", w.id, "lease_id", w.leaseID)
}

// Register adds a worker and its tools to the routing table. It refuses the whole
// registration, with one Rejection per offending tool, when the registration is
// malformed or conflicts with tools other workers registered: replicas of a tool must
// serve the same definition (same content hash) in the same group. A worker registering
// again under the same id replaces its earlier registration.
func (r *Router) Register(reg *toolpb.Registration) (*Lease, []*toolpb.Rejection, error) {
	rejections, parsed := validate(reg)
	if len(rejections) > 0 {
		return nil, rejections, fmt.Errorf("%w: %s", ErrInvalidRegistration, summarize(rejections))
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, ErrClosed
	}
	old := r.workers[reg.GetWorkerId()]
	rejections = r.conflictsLocked(reg, parsed, old)
	if len(rejections) > 0 {
		r.mu.Unlock()
		return nil, rejections, fmt.Errorf("%w: %s", ErrConflict, summarize(rejections))
	}
	conn, err := r.opts.Dial(reg.GetAddress())
	if err != nil {
		r.mu.Unlock()
		rej := []*toolpb.Rejection{{Reason: fmt.Sprintf("cannot dial worker address %q: %v", reg.GetAddress(), err)}}
		return nil, rej, fmt.Errorf("%w: %s", ErrInvalidRegistration, summarize(rej))
	}
	if old != nil {
		r.removeLocked(old)
	}
	w := &worker{
		id:           reg.GetWorkerId(),
		address:      reg.GetAddress(),
		version:      reg.GetVersion(),
		capacity:     reg.GetCapacity(),
		leaseID:      newID(),
		registeredAt: time.Now(),
		conn:         conn,
		client:       toolpb.NewToolWorkerServiceClient(conn),
		state:        toolpb.WorkerState_WORKER_STATE_READY,
	}
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		w.groups = append(w.groups, role)
		g, ok := r.groups[role]
		if !ok {
			g = &groupEntry{info: proto.Clone(gr.GetGroup()).(*toolpb.ToolGroupInfo), tools: map[string]*toolEntry{}, workers: map[string]*worker{}}
			r.groups[role] = g
		}
		g.workers[w.id] = w
		for _, name := range entries(gr, parsed) {
			w.tools = append(w.tools, name)
			e, ok := r.tools[name]
			if !ok {
				p := parsed[name]
				e = &toolEntry{group: role, def: p.def, meta: p.meta, hash: p.hash, proto: wire.DefinitionToProto(p.def, p.meta), replicas: map[string]*worker{}}
				if p.facade != nil {
					e.facade = proto.Clone(p.facade).(*toolpb.FacadeNode)
				}
				e.stub = newRemoteTool(r, e)
				r.tools[name] = e
				g.tools[name] = e
			}
			e.replicas[w.id] = w
		}
	}
	sort.Strings(w.groups)
	sort.Strings(w.tools)
	r.workers[w.id] = w
	r.mu.Unlock()

	if old != nil {
		old.close()
	}
	r.log.Info("worker registered", "worker_id", w.id, "address", w.address, "groups", w.groups, "tools", len(w.tools), "lease_id", w.leaseID, "replaced", old != nil)
	return &Lease{r: r, w: w}, nil, nil
}

// removeLocked takes w out of every table. r.mu must be held.
func (r *Router) removeLocked(w *worker) {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	if r.workers[w.id] == w {
		delete(r.workers, w.id)
	}
	for _, role := range w.groups {
		g, ok := r.groups[role]
		if !ok {
			continue
		}
		if g.workers[w.id] == w {
			delete(g.workers, w.id)
		}
		for name, e := range g.tools {
			if e.replicas[w.id] == w {
				delete(e.replicas, w.id)
			}
			if len(e.replicas) == 0 {
				delete(g.tools, name)
				delete(r.tools, name)
			}
		}
		if len(g.workers) == 0 {
			delete(r.groups, role)
		}
	}
}

type parsedTool struct {
	name  string
	group string
	def   tool.Definition
	meta  tool.Metadata
	hash  string
	// facade is set for a facade of the registration.
	facade *toolpb.FacadeNode
}

// entries lists the names of a group's tools and facades in a registration, the order
// the routing table takes them in.
func entries(gr *toolpb.GroupRegistration, parsed map[string]parsedTool) []string {
	var names []string
	for _, rt := range gr.GetTools() {
		names = append(names, rt.GetDefinition().GetName())
	}
	for _, p := range parsed {
		if p.facade != nil && p.group == gr.GetGroup().GetRole() {
			names = append(names, p.name)
		}
	}
	sort.Strings(names[len(gr.GetTools()):])
	return names
}

// validate checks a registration on its own, without looking at the table.
func validate(reg *toolpb.Registration) ([]*toolpb.Rejection, map[string]parsedTool) {
	var rej []*toolpb.Rejection
	add := func(group, name, format string, args ...any) {
		rej = append(rej, &toolpb.Rejection{Group: group, Tool: name, Reason: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(reg.GetWorkerId()) == "" {
		add("", "", "worker_id is empty")
	}
	if err := checkAddress(reg.GetAddress()); err != nil {
		add("", "", "address: %v", err)
	}
	if reg.GetCapacity() < 0 {
		add("", "", "capacity is negative (%d)", reg.GetCapacity())
	}
	if len(reg.GetGroups()) == 0 {
		add("", "", "no tool groups")
	}
	parsed := map[string]parsedTool{}
	roles := map[string]bool{}
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		if !groupRoleRE.MatchString(role) {
			add(role, "", "group role %q must match %s", role, groupRoleRE)
			continue
		}
		if roles[role] {
			add(role, "", "group %q is registered twice", role)
			continue
		}
		roles[role] = true
		if len(gr.GetTools()) == 0 {
			add(role, "", "group %q has no tools", role)
		}
		for _, rt := range gr.GetTools() {
			name := rt.GetDefinition().GetName()
			if !toolNameRE.MatchString(name) {
				add(role, name, "tool name %q must match %s", name, toolNameRE)
				continue
			}
			if _, dup := parsed[name]; dup {
				add(role, name, "tool %q is registered twice by this worker", name)
				continue
			}
			def, meta, err := wire.DefinitionFromProto(rt.GetDefinition())
			if err != nil {
				add(role, name, "tool %q: %v", name, err)
				continue
			}
			hash := wire.Hash(def, meta)
			if rt.GetContentHash() != hash {
				add(role, name, "tool %q: content hash %q does not match the definition (computed %q)", name, rt.GetContentHash(), hash)
				continue
			}
			parsed[name] = parsedTool{name: name, group: role, def: def, meta: meta, hash: hash}
		}
		for _, f := range flattenFacades(gr, parsed, func(name, format string, args ...any) { add(role, name, format, args...) }) {
			if _, dup := parsed[f.name]; dup {
				add(role, f.name, "facade %q has the name of another tool or facade of this worker", f.name)
				continue
			}
			f.group = role
			parsed[f.name] = f
		}
	}
	return rej, parsed
}

// conflictsLocked checks a valid registration against the table, ignoring the worker it
// replaces. r.mu must be held.
func (r *Router) conflictsLocked(reg *toolpb.Registration, parsed map[string]parsedTool, old *worker) []*toolpb.Rejection {
	var rej []*toolpb.Rejection
	// othersServe reports whether some worker other than old serves e.
	othersServe := func(e *toolEntry) bool {
		for id := range e.replicas {
			if old == nil || id != old.id {
				return true
			}
		}
		return false
	}
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		if g, ok := r.groups[role]; ok {
			others := len(g.workers)
			if old != nil && g.workers[old.id] != nil {
				others--
			}
			if others > 0 && !proto.Equal(g.info, gr.GetGroup()) {
				rej = append(rej, &toolpb.Rejection{Group: role, Reason: fmt.Sprintf("group %q is already registered with a different description, provider, version, permissions or usage notes", role)})
			}
		}
		for _, name := range entries(gr, parsed) {
			e, ok := r.tools[name]
			if !ok || !othersServe(e) {
				continue
			}
			switch {
			case e.group != role:
				rej = append(rej, &toolpb.Rejection{Group: role, Tool: name, Reason: fmt.Sprintf("tool %q is already registered by group %q", name, e.group)})
			case e.hash != parsed[name].hash:
				rej = append(rej, &toolpb.Rejection{Group: role, Tool: name, Reason: fmt.Sprintf("tool %q is already registered with a different definition (hash %s, this worker sent %s); replicas of a tool must serve the same definition", name, short(e.hash), short(parsed[name].hash))})
			}
		}
	}
	return rej
}

func checkAddress(addr string) error {
	if addr == "" {
		return fmt.Errorf("empty")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has an invalid port", addr)
	}
	return nil
}

func summarize(rej []*toolpb.Rejection) string {
	parts := make([]string, 0, len(rej))
	for _, x := range rej {
		parts = append(parts, x.GetReason())
	}
	return strings.Join(parts, "; ")
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
