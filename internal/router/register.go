package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Names the model sees must fit every provider's rules (OpenAI's are the strictest).
var (
	toolNameRE  = wire.ToolNameRE
	groupRoleRE = wire.RoleRE
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

// Replaced is closed when a registration of the same worker on another stream took the
// lease's place (Registration.replaces_lease_id): the lease's stream should end.
func (l *Lease) Replaced() <-chan struct{} { return l.w.replaced }

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
	if w.removed || w.graceTimer != nil { // gone, or its end already reported (Lost, then End)
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
	l.r.log.Info("worker registration stream ended", "worker_id", w.id, "lease_id", w.leaseID, "grace", grace.String())
}

// Lost reports that the registration stream went silent: no heartbeat within the lease
// TTL, as when the worker hangs or the network between the two is cut. It ends the lease
// as End does, and probes the worker at once over the connection its calls use: a worker
// that does not answer within Options.ProbeTimeout has that connection closed, so that
// its calls in flight fail now — sent to another replica when the tool is idempotent,
// reported with an unknown outcome otherwise — instead of at their deadlines, which the
// transport's keepalive (10 s at the least) would not beat. A worker that answers keeps
// its calls: only its registration stream was cut. So does a worker that was draining
// and answers NOT_SERVING, as a draining worker does while it finishes its calls.
func (l *Lease) Lost() {
	w, r := l.w, l.r
	w.mu.Lock()
	draining := w.state == toolpb.WorkerState_WORKER_STATE_DRAINING
	w.mu.Unlock()
	l.End()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProbeTimeout)
		err := r.opts.Probe(ctx, w.conn)
		cancel()
		var answered *notServingError
		if err == nil || (draining && errors.As(err, &answered)) {
			return
		}
		r.log.Warn("worker unreachable after its lease expired: its calls in flight fail now", "worker_id", w.id, "lease_id", w.leaseID,
			"in_flight", w.inFlight.Load(), "error", err.Error())
		w.closeConn() // the grace timer still takes its tools out of the table
	}()
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
// serve the same definition (same content hash) in the same group.
//
// A worker id is held by one live lease at a time: a registration that names the id of
// a worker whose lease is live (its stream has not ended) is refused with
// ErrWorkerIDInUse, and the worker holding it is left alone. A registration under the id
// of a worker whose stream ended (it is in its grace period) replaces it: that is the
// worker reconnecting.
//
// Before it changes the table, Register dials the worker's address and probes it
// (Options.Probe): an address that cannot be reached or serves another service is
// refused with ErrUnreachable or ErrWrongService.
func (r *Router) Register(reg *toolpb.Registration) (*Lease, []*toolpb.Rejection, error) {
	return r.RegisterAs(reg, "")
}

// RegisterAs is Register for a worker that proved identity (a SPIFFE ID, from its
// client certificate): its connection is dialled with Options.DialAs, and it cannot take
// a worker id, a tool group or a tool that a worker of another identity holds
// (ErrNotYours). Workers of one identity are replicas of each other.
func (r *Router) RegisterAs(reg *toolpb.Registration, identity string) (*Lease, []*toolpb.Rejection, error) {
	rejections, parsed := validate(reg)
	if len(rejections) > 0 {
		return nil, capRejections(rejections), fmt.Errorf("%w: %s", ErrInvalidRegistration, summarize(rejections))
	}
	if err := r.checkLocked(reg, parsed, identity, true); err != nil {
		return nil, err.rejections, err.err
	}
	conn, rej, err := r.dialAndProbe(reg.GetAddress(), identity)
	if err != nil {
		return nil, rej, err
	}

	r.mu.Lock()
	// The table may have changed while the address was probed.
	if err := r.checkLocked(reg, parsed, identity, false); err != nil {
		r.mu.Unlock()
		_ = conn.Close()
		return nil, err.rejections, err.err
	}
	old := r.workers[reg.GetWorkerId()]
	if old != nil {
		r.replaceLocked(old, parsed)
	}
	w := &worker{
		id:           reg.GetWorkerId(),
		identity:     identity,
		address:      reg.GetAddress(),
		version:      reg.GetVersion(),
		capacity:     reg.GetCapacity(),
		leaseID:      newID(),
		registeredAt: time.Now(),
		conn:         conn,
		state:        toolpb.WorkerState_WORKER_STATE_READY,
		replaced:     make(chan struct{}),
	}
	r.enterLocked(w, reg, parsed)
	sort.Strings(w.groups)
	sort.Strings(w.tools)
	r.pinLocked(reg, parsed, identity)
	r.workers[w.id] = w
	r.served += len(w.tools)
	r.publishToolsLocked()
	r.mu.Unlock()

	if old != nil {
		old.replace()
		old.close()
	}
	r.log.Info("worker registered", "worker_id", w.id, "address", w.address, "groups", w.groups, "tools", len(w.tools), "lease_id", w.leaseID, "replaced", old != nil)
	return &Lease{r: r, w: w}, nil, nil
}

// dialAndProbe dials a registering worker's address (as identity, with mutual TLS) and
// probes it: the connection the table keeps for its calls.
func (r *Router) dialAndProbe(address, identity string) (*grpc.ClientConn, []*toolpb.Rejection, error) {
	dial := r.opts.Dial
	if identity != "" && r.opts.DialAs != nil {
		dial = func(address string) (*grpc.ClientConn, error) { return r.opts.DialAs(address, identity) }
	}
	conn, err := dial(address)
	if err != nil {
		rej := []*toolpb.Rejection{{Reason: fmt.Sprintf("cannot dial worker address %q: %v", address, err)}}
		return nil, rej, fmt.Errorf("%w: %s", ErrInvalidRegistration, summarize(rej))
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProbeTimeout)
	err = r.opts.Probe(ctx, conn)
	cancel()
	if err != nil {
		_ = conn.Close()
		return nil, []*toolpb.Rejection{{Reason: err.Error()}}, err
	}
	return conn, nil, nil
}

// enterLocked enters a registered worker's groups, domain types and tools in the table.
func (r *Router) enterLocked(w *worker, reg *toolpb.Registration, parsed map[string]parsedTool) {
	w.typeBytes = domainTypeBytes(reg)
	r.defBytes += w.typeBytes
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		w.groups = append(w.groups, role)
		for _, d := range gr.GetDomainTypes() {
			if dt, err := wire.DomainTypeFromProto(d); err == nil { // checked by validate
				if w.domainTypes == nil {
					w.domainTypes = map[string]tool.DomainType{}
				}
				w.domainTypes[dt.TypeName] = dt
			}
		}
		info := proto.Clone(gr.GetGroup()).(*toolpb.ToolGroupInfo)
		g, ok := r.groups[role]
		if !ok {
			g = &groupEntry{info: info, tools: map[string]*toolEntry{}, workers: map[string]*worker{}}
			r.groups[role] = g
		}
		g.workers[w.id] = w
		for _, name := range entries(gr, parsed) {
			w.tools = append(w.tools, name)
			e := r.entryLocked(name, parsed[name], g, info)
			e.replicas[w.id] = w
		}
	}
}

// entryLocked is the table's entry of a tool a worker of group g registers: the entry of
// the same definition, or of a superseded one, or a new one (a new version of the group
// rolls in: its definition is what new runs get).
func (r *Router) entryLocked(name string, p parsedTool, g *groupEntry, info *toolpb.ToolGroupInfo) *toolEntry {
	role := info.GetRole()
	e, ok := r.tools[name]
	switch {
	case ok && e.hash == p.hash:
	case r.older[name][p.hash] != nil:
		// A replica of a superseded definition (re)joins it: runs that started
		// with it may call it; new runs keep getting the newer one.
		e = r.older[name][p.hash]
	default:
		if ok {
			// A new version of the group rolls in: its definition is what new runs
			// get; the old one stays for its remaining replicas.
			if r.older == nil {
				r.older = map[string]map[string]*toolEntry{}
			}
			if r.older[name] == nil {
				r.older[name] = map[string]*toolEntry{}
			}
			r.older[name][e.hash] = e
			g.info = info
		}
		e = &toolEntry{group: role, def: p.def, meta: p.meta, hash: p.hash, proto: wire.DefinitionToProto(p.def, p.meta), replicas: map[string]*worker{}, info: info}
		if p.facade != nil {
			e.facade = proto.Clone(p.facade).(*toolpb.FacadeNode)
		}
		e.stub = newRemoteTool(r, e)
		e.size = p.size
		r.tools[name] = e
		r.toolChangedLocked(name)
		r.defBytes += e.size
		g.tools[name] = e
	}
	return e
}

// replaceLocked takes old out of the table for a registration of the same worker id
// (parsed) to take its place. A definition a rollout superseded that old was the last
// replica of stays superseded when the newcomer serves it again — a replica of the old
// version reconnecting, or moving to a new connection when its certificate rotates —
// instead of rolling the group back as a new version would. r.mu must be held.
func (r *Router) replaceLocked(old *worker, parsed map[string]parsedTool) {
	type olderEntry struct {
		name string
		e    *toolEntry
	}
	var kept []olderEntry
	for _, name := range old.tools {
		for _, e := range r.older[name] {
			if e.replicas[old.id] == old {
				kept = append(kept, olderEntry{name, e})
			}
		}
	}
	r.dropLocked(old)
	for _, k := range kept {
		cur := r.tools[k.name]
		if p, again := parsed[k.name]; !again || p.hash != k.e.hash || cur == nil || cur.hash == k.e.hash || r.older[k.name][k.e.hash] != nil {
			continue
		}
		if r.older[k.name] == nil {
			r.older[k.name] = map[string]*toolEntry{}
		}
		r.older[k.name][k.e.hash] = k.e // its replicas are empty: the newcomer joins it
		r.defBytes += k.e.size
	}
}

// refusal is why Register refuses a registration.
type refusal struct {
	rejections []*toolpb.Rejection
	err        error
}

// checkLocked checks a valid registration against the table: the router is open, the
// worker id is not held by a live lease, and nothing conflicts. It takes r.mu itself
// when lock is set; otherwise the caller holds it.
func (r *Router) checkLocked(reg *toolpb.Registration, parsed map[string]parsedTool, identity string, lock bool) *refusal {
	if lock {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	if r.closed {
		return &refusal{err: ErrClosed}
	}
	if msg := r.heldByOthersLocked(reg, parsed, identity); msg != "" {
		return &refusal{rejections: []*toolpb.Rejection{{Reason: msg}}, err: fmt.Errorf("%w: %s", ErrNotYours, msg)}
	}

	old := r.workers[reg.GetWorkerId()]
	if old != nil && old.live() && !replaces(reg, old, identity) {
		msg := fmt.Sprintf("worker id %q is held by a worker whose registration stream is still open; a worker id may be registered by one stream at a time", old.id)
		if reg.GetReplacesLeaseId() != "" {
			msg += " (replaces_lease_id names another lease, or the address or identity differ)"
		}
		return &refusal{rejections: []*toolpb.Rejection{{Reason: msg}}, err: fmt.Errorf("%w: %s", ErrWorkerIDInUse, msg)}
	}
	if rej := r.conflictsLocked(reg, parsed, old); len(rej) > 0 {
		return &refusal{rejections: capRejections(rej), err: fmt.Errorf("%w: %s", ErrConflict, summarize(rej))}
	}
	if rej := r.repinnedLocked(reg, parsed, identity); len(rej) > 0 {
		return &refusal{rejections: capRejections(rej), err: fmt.Errorf("%w: %s", ErrRepinned, summarize(rej))}
	}
	if rej := r.quarantinedLocked(reg, parsed); len(rej) > 0 {
		return &refusal{rejections: capRejections(rej), err: fmt.Errorf("%w: %s", ErrQuarantined, summarize(rej))}
	}
	if msg := r.overLimitsLocked(parsed, old, domainTypeBytes(reg)); msg != "" {
		return &refusal{rejections: []*toolpb.Rejection{{Reason: msg}}, err: fmt.Errorf("%w: %s", ErrTableFull, msg)}
	}
	return nil
}

// replaces reports whether reg is old's own worker moving its live registration to a
// new stream: it names old's lease, from the same address and the same verified
// identity. Without mutual TLS there is no identity to prove it, and a lease id is no
// secret (logs show it), so a plaintext worker cannot take a live lease's place.
func replaces(reg *toolpb.Registration, old *worker, identity string) bool {
	return identity != "" && reg.GetReplacesLeaseId() != "" && reg.GetReplacesLeaseId() == old.leaseID &&
		reg.GetAddress() == old.address && identity == old.identity
}

// maxPins bounds the pinned definitions; past it the oldest pin is forgotten.
const maxPins = 100_000

// repinnedLocked lists the tools whose definition the registration changes under the
// group version they were pinned with: a tool's description or schema is what the model
// reads, and a worker must not rewrite it (a "rug pull") without saying so with a new
// version. r.mu must be held.
func (r *Router) repinnedLocked(reg *toolpb.Registration, parsed map[string]parsedTool, identity string) []*toolpb.Rejection {
	if !r.opts.PinDefinitions {
		return nil
	}
	var rej []*toolpb.Rejection
	for _, gr := range reg.GetGroups() {
		role, version := gr.GetGroup().GetRole(), gr.GetGroup().GetVersion()
		for _, name := range entries(gr, parsed) {
			p, ok := r.pins[pinKey{identity, name}]
			if ok && p.version == version && p.hash != parsed[name].hash && !r.approved(parsed[name].hash) {
				rej = append(rej, &toolpb.Rejection{Group: role, Tool: name, Reason: fmt.Sprintf(
					"tool %q changed its definition (hash %s, now %s) under version %q of group %q; a changed description or schema needs a new version, or an operator's approval of hash %s",
					name, short(p.hash), short(parsed[name].hash), version, role, parsed[name].hash)})
			}
		}
	}
	return rej
}

func (r *Router) approved(hash string) bool { return r.opts.Approved != nil && r.opts.Approved(hash) }

// quarantinedLocked lists the definitions of the registration that Options.Quarantine
// holds for an operator's approval: new to the table (a definition that is served
// already was let in, or approved, before) and not approved. r.mu must be held.
func (r *Router) quarantinedLocked(reg *toolpb.Registration, parsed map[string]parsedTool) []*toolpb.Rejection {
	if r.opts.Quarantine == nil {
		return nil
	}
	var rej []*toolpb.Rejection
	for _, gr := range reg.GetGroups() {
		info := gr.GetGroup()
		role, desc, notes := info.GetRole(), info.GetDescription(), info.GetUsageNotes()
		if g := r.groups[role]; g != nil && g.info.GetDescription() == desc && g.info.GetUsageNotes() == notes {
			continue
		}
		h := GroupTextHash(role, desc, notes)
		if r.approved(h) {
			continue
		}
		if why := r.opts.Quarantine(ModelText{Description: desc, UsageNotes: notes}); why != "" {
			rej = append(rej, &toolpb.Rejection{Group: role, Reason: fmt.Sprintf(
				"the description and usage notes of group %q (hash %s) are quarantined pending an operator's approval: %s", role, h, why)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(parsed)) {
		p := parsed[name]
		if e := r.tools[name]; e != nil && e.hash == p.hash || r.older[name][p.hash] != nil || r.approved(p.hash) {
			continue
		}
		text := ModelText{Description: p.def.Description, Schema: string(p.def.InputSchema.JSON())}
		if p.facade != nil {
			text.UsageNotes = p.facade.GetUsageNotes()
		}
		if why := r.opts.Quarantine(text); why != "" {
			rej = append(rej, &toolpb.Rejection{Group: p.group, Tool: name, Reason: fmt.Sprintf(
				"the definition of %q (hash %s) is quarantined pending an operator's approval: %s", name, p.hash, why)})
		}
	}
	return rej
}

// pinLocked pins the registration's definitions under their groups' versions. r.mu
// must be held.
func (r *Router) pinLocked(reg *toolpb.Registration, parsed map[string]parsedTool, identity string) {
	if !r.opts.PinDefinitions {
		return
	}
	if r.pins == nil {
		r.pins = map[pinKey]pin{}
	}
	for _, gr := range reg.GetGroups() {
		version := gr.GetGroup().GetVersion()
		for _, name := range entries(gr, parsed) {
			k := pinKey{identity, name}
			if _, ok := r.pins[k]; !ok {
				r.pinOrder = append(r.pinOrder, k)
			}
			r.pins[k] = pin{version: version, hash: parsed[name].hash}
		}
	}
	for len(r.pinOrder) > maxPins {
		delete(r.pins, r.pinOrder[0])
		r.pinOrder = r.pinOrder[1:]
	}
}

// heldByOthersLocked says what of the registration a worker of another identity holds:
// its worker id, one of its groups or one of its tools; "" when nothing. r.mu must be
// held.
func (r *Router) heldByOthersLocked(reg *toolpb.Registration, parsed map[string]parsedTool, identity string) string {
	if old := r.workers[reg.GetWorkerId()]; old != nil && old.identity != identity {
		return fmt.Sprintf("worker id %q is held by identity %q", old.id, old.identity)
	}
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		if g := r.groups[role]; g != nil {
			for _, w := range g.workers {
				if w.identity != identity {
					return fmt.Sprintf("tool group %q is served by identity %q", role, w.identity)
				}
			}
		}
	}
	for name := range parsed {
		if e := r.tools[name]; e != nil {
			for _, w := range e.replicas {
				if w.identity != identity {
					return fmt.Sprintf("tool %q is served by identity %q", name, w.identity)
				}
			}
		}
	}
	return ""
}

// overLimitsLocked says which limit the table would go past if the registration,
// replacing old (nil when none), were accepted; "" when none. r.mu must be held.
func (r *Router) overLimitsLocked(parsed map[string]parsedTool, old *worker, typeBytes int64) string {
	lim := r.opts.Limits
	workers := len(r.workers)
	if old == nil {
		workers++
	}
	if workers > lim.MaxWorkers {
		return fmt.Sprintf("the routing table holds its maximum of %d workers", lim.MaxWorkers)
	}
	served := r.served + len(parsed)
	if old != nil {
		served -= len(old.tools)
	}
	if served > lim.MaxServedTools {
		return fmt.Sprintf("the routing table would hold %d tools served by workers, replicas included; its maximum is %d", served, lim.MaxServedTools)
	}
	// What old alone serves leaves with it. Domain types count with the definitions.
	tools, bytes := len(r.tools), r.defBytes+typeBytes
	if old != nil {
		bytes -= old.typeBytes
		for _, name := range old.tools {
			if e := r.tools[name]; e != nil && len(e.replicas) == 1 && e.replicas[old.id] == old {
				tools--
				bytes -= e.size
			}
		}
	}
	for name, p := range parsed {
		e := r.tools[name]
		another := e != nil && e.hash != p.hash && r.older[name][p.hash] == nil // a rollout's new definition
		if e == nil || another || (old != nil && len(e.replicas) == 1 && e.replicas[old.id] == old) {
			tools++
			bytes += p.size
		}
	}
	switch {
	case tools > lim.MaxTools:
		return fmt.Sprintf("the routing table would hold %d tools; its maximum is %d", tools, lim.MaxTools)
	case bytes > lim.MaxDefinitionBytes:
		return fmt.Sprintf("the routing table's definitions would take %d bytes; its maximum is %d", bytes, lim.MaxDefinitionBytes)
	}
	return ""
}

// HealthProbe is the default Options.Probe: the grpc.health.v1 status of
// "toolmesh.v1.ToolWorkerService" at the address must be SERVING. An address whose
// health service does not know that service, or that has no health service, serves
// something else.
func HealthProbe(ctx context.Context, conn *grpc.ClientConn) error {
	service := toolpb.ToolWorkerService_ServiceDesc.ServiceName
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	switch status.Code(err) {
	case codes.OK:
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return &notServingError{fmt.Sprintf("%v: %s reports %s for %s", ErrUnreachable, conn.Target(), resp.GetStatus(), service)}
		}
		return nil
	case codes.NotFound, codes.Unimplemented:
		return fmt.Errorf("%w: %s does not serve %s (health check: %s)", ErrWrongService, conn.Target(), service, status.Convert(err).Message())
	default:
		return fmt.Errorf("%w: probing %s: %s", ErrUnreachable, conn.Target(), status.Convert(err).Message())
	}
}

// notServingError is HealthProbe's error for a worker that answers but whose health is
// not SERVING (a draining worker's): it is ErrUnreachable, since it takes no calls.
type notServingError struct{ msg string }

func (e *notServingError) Error() string        { return e.msg }
func (e *notServingError) Is(target error) bool { return target == ErrUnreachable }

// removeLocked takes w out of every table, Tool's included. r.mu must be held.
func (r *Router) removeLocked(w *worker) {
	r.dropLocked(w)
	r.publishToolsLocked()
}

// dropLocked takes w out of every table but Tool's, which the caller publishes once the
// change it makes is whole: a worker replaced by its new registration never leaves its
// tools unknown in between. r.mu must be held.
func (r *Router) dropLocked(w *worker) {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	if r.workers[w.id] == w {
		delete(r.workers, w.id)
		r.served -= len(w.tools)
		r.defBytes -= w.typeBytes
	}
	for _, role := range w.groups {
		g, ok := r.groups[role]
		if !ok {
			continue
		}
		if g.workers[w.id] == w {
			delete(g.workers, w.id)
		}
		for _, name := range w.tools {
			for hash, e := range r.older[name] {
				if e.group != role {
					continue
				}
				if e.replicas[w.id] == w {
					delete(e.replicas, w.id)
				}
				if len(e.replicas) == 0 {
					delete(r.older[name], hash)
					r.defBytes -= e.size
				}
			}
		}
		for name, e := range g.tools {
			if e.replicas[w.id] == w {
				delete(e.replicas, w.id)
			}
			if len(e.replicas) == 0 {
				delete(g.tools, name)
				delete(r.tools, name)
				r.toolChangedLocked(name)
				r.defBytes -= e.size
				// The newest definition's replicas are gone (a rollout undone): the
				// definition still served takes over, and the group is as its workers
				// registered it.
				if next := newest(r.older[name]); next != nil {
					delete(r.older[name], next.hash)
					r.tools[name], g.tools[name] = next, next
					r.toolChangedLocked(name)
					g.info = next.info
				}
			}
		}
		for _, name := range w.tools {
			if len(r.older[name]) == 0 {
				delete(r.older, name)
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
	// size is the encoded size of the definition (and facade tree).
	size int64
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

// validate checks a registration on its own, without looking at the table. No
// rejection echoes an oversized value.
func validate(reg *toolpb.Registration) ([]*toolpb.Rejection, map[string]parsedTool) {
	var rej []*toolpb.Rejection
	add := func(group, name, format string, args ...any) {
		rej = append(rej, &toolpb.Rejection{Group: wire.Truncate(group, 256), Tool: wire.Truncate(name, 256), Reason: wire.Truncate(fmt.Sprintf(format, args...), maxReasonBytes)})
	}
	if p := wire.CheckID(reg.GetWorkerId(), wire.WorkerIDRE, 253); p != "" {
		add("", "", "worker_id %s", p)
	}
	if len(reg.GetAddress()) > wire.MaxAddressBytes {
		add("", "", "address is %d bytes; the limit is %d", len(reg.GetAddress()), wire.MaxAddressBytes)
	} else if err := checkAddress(reg.GetAddress()); err != nil {
		add("", "", "address: %v", err)
	}
	if p := wire.CheckPrintable(reg.GetVersion(), wire.MaxVersionBytes); p != "" {
		add("", "", "version %s", p)
	}
	if p := wire.CheckPrintable(reg.GetReplacesLeaseId(), 64); p != "" {
		add("", "", "replaces_lease_id %s", p)
	}
	if reg.GetCapacity() < 0 {
		add("", "", "capacity is negative (%d)", reg.GetCapacity())
	}
	switch n := len(reg.GetGroups()); {
	case n == 0:
		add("", "", "no tool groups")
	case n > wire.MaxRegistrationGroups:
		add("", "", "%d tool groups; the limit is %d", n, wire.MaxRegistrationGroups)
		return rej, nil
	}
	parsed := map[string]parsedTool{}
	roles := map[string]bool{}
	for _, gr := range reg.GetGroups() {
		role := gr.GetGroup().GetRole()
		if p := wire.CheckID(role, groupRoleRE, 64); p != "" {
			add(role, "", "group role %s", p)
			continue
		}
		if roles[role] {
			add(role, "", "group %q is registered twice", role)
			continue
		}
		roles[role] = true
		if msg := checkGroupInfo(gr.GetGroup()); msg != "" {
			add(role, "", "group %q: %s", role, msg)
		}
		switch n := len(gr.GetTools()); {
		case n == 0:
			add(role, "", "group %q has no tools", role)
		case n > wire.MaxGroupTools:
			add(role, "", "group %q has %d tools; the limit is %d", role, n, wire.MaxGroupTools)
			continue
		}
		for _, rt := range gr.GetTools() {
			name := rt.GetDefinition().GetName()
			if p := wire.CheckID(name, toolNameRE, 64); p != "" {
				add(role, name, "tool name %s", p)
				continue
			}
			if _, dup := parsed[name]; dup {
				add(role, name, "tool %q is registered twice by this worker", name)
				continue
			}
			def, meta, err := parseDefinition(rt.GetDefinition())
			if err != nil {
				add(role, name, "tool %q: %v", name, err)
				continue
			}
			hash := wire.Hash(def, meta)
			if rt.GetContentHash() != hash {
				add(role, name, "tool %q: content hash %q does not match the definition (computed %q)", name, wire.Truncate(rt.GetContentHash(), 64), hash)
				continue
			}
			parsed[name] = parsedTool{name: name, group: role, def: def, meta: meta, hash: hash, size: int64(proto.Size(rt.GetDefinition()))}
		}
		if n := len(gr.GetDomainTypes()); n > wire.MaxDomainTypes {
			add(role, "", "group %q has %d domain types; the limit is %d", role, n, wire.MaxDomainTypes)
		} else {
			seen := map[string]bool{}
			for _, d := range gr.GetDomainTypes() {
				if err := wire.CheckDomainType(d); err != nil {
					add(role, "", "group %q: %v", role, err)
				} else if seen[d.GetTypeName()] {
					add(role, "", "group %q declares domain type %q twice", role, wire.Truncate(d.GetTypeName(), 64))
				}
				seen[d.GetTypeName()] = true
			}
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

// checkGroupInfo checks the free-text fields of a group's description.
func checkGroupInfo(g *toolpb.ToolGroupInfo) string {
	for _, f := range []struct {
		name  string
		value string
		limit int
	}{
		{"description", g.GetDescription(), wire.MaxDescriptionBytes},
		{"usage_notes", g.GetUsageNotes(), wire.MaxDescriptionBytes},
		{"provider", g.GetProvider(), wire.MaxProviderBytes},
		{"version", g.GetVersion(), wire.MaxVersionBytes},
	} {
		if p := wire.CheckText(f.value, f.limit); p != "" {
			return f.name + " " + p
		}
	}
	return ""
}

// parseDefinition checks the bounds of a tool's or facade's definition and decodes it.
func parseDefinition(p *toolpb.ToolDefinition) (tool.Definition, tool.Metadata, error) {
	return wire.ParseDefinition(p)
}

// newest is the entry of es whose first replica registered last; nil when es is empty.
func newest(es map[string]*toolEntry) *toolEntry {
	var best *toolEntry
	var bestAt time.Time
	for _, e := range es {
		for _, w := range e.replicas {
			if best == nil || w.registeredAt.After(bestAt) {
				best, bestAt = e, w.registeredAt
			}
		}
	}
	return best
}

// conflictsLocked checks a valid registration against the table, ignoring the worker it
// replaces. r.mu must be held. Replicas of a group must agree on its description and
// definitions — except across versions: a worker of another version of the group is a
// rollout, and its definitions join the table beside the old ones (see Router.older).
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
		rolling := false // a rollout: another version of the group
		if g, ok := r.groups[role]; ok {
			others := len(g.workers)
			if old != nil && g.workers[old.id] != nil {
				others--
			}
			rolling = others > 0 && g.info.GetVersion() != gr.GetGroup().GetVersion()
			if others > 0 && !rolling && !proto.Equal(g.info, gr.GetGroup()) {
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
			case e.hash != parsed[name].hash && !rolling:
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

// Bounds of a refusal, so that the answer to a registration of 10,000 bad tools stays
// small: at most maxRejections rejections of at most maxReasonBytes each, and the first
// summarized of them in the error.
const (
	maxRejections  = 64
	maxReasonBytes = 1024
	summarized     = 4
)

// capRejections keeps the first maxRejections-1 rejections and counts the rest in a last
// one.
func capRejections(rej []*toolpb.Rejection) []*toolpb.Rejection {
	if len(rej) <= maxRejections {
		return rej
	}
	more := len(rej) - (maxRejections - 1)
	return append(rej[:maxRejections-1:maxRejections-1], &toolpb.Rejection{Reason: fmt.Sprintf("and %d more rejections", more)})
}

// summarize joins the first rejections' reasons for an error message.
func summarize(rej []*toolpb.Rejection) string {
	parts := make([]string, 0, min(len(rej), summarized+1))
	for _, x := range rej[:min(len(rej), summarized)] {
		parts = append(parts, x.GetReason())
	}
	if len(rej) > summarized {
		parts = append(parts, fmt.Sprintf("and %d more", len(rej)-summarized))
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

// domainTypeBytes is the encoded size of a registration's domain types.
func domainTypeBytes(reg *toolpb.Registration) int64 {
	var n int64
	for _, gr := range reg.GetGroups() {
		for _, d := range gr.GetDomainTypes() {
			n += int64(proto.Size(d))
		}
	}
	return n
}

// Why a lease held by Hold ended, besides the stream's own end.
var (
	// ErrLeaseExpired: nothing arrived within the lease's TTL; the lease is lost.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrCertificateExpired: the certificate the worker connected with expired.
	ErrCertificateExpired = errors.New("the worker's certificate expired")
	// ErrUnexpectedMessage: the stream sent what a held lease does not take (an
	// *UnexpectedMessageError says what).
	ErrUnexpectedMessage = errors.New("unexpected message on a registration stream")
)

// UnexpectedMessageError is a message a held lease does not take; Problem says which.
type UnexpectedMessageError struct{ Problem string }

func (e *UnexpectedMessageError) Error() string { return e.Problem }

// Is makes the error ErrUnexpectedMessage.
func (e *UnexpectedMessageError) Is(target error) bool { return target == ErrUnexpectedMessage }

// Hold keeps the lease while msgs brings the worker's heartbeats and draining notice, and
// returns when it ends: nil when the worker moved its registration to a new stream or its
// stream ended (recvErr says io.EOF, or any error but an undecodable message, which it
// returns); ErrLeaseExpired when nothing arrives within ttl (the lease is Lost);
// ErrCertificateExpired at expires (zero: never); ErrUnexpectedMessage for another
// register or an unknown message; ctx's error when ctx ends. The caller Ends the lease.
func (l *Lease) Hold(ctx context.Context, ttl time.Duration, expires time.Time, msgs <-chan *toolpb.ConnectRequest, recvErr <-chan error) error {
	var expired <-chan time.Time
	if !expires.IsZero() {
		t := time.NewTimer(time.Until(expires))
		defer t.Stop()
		expired = t.C
	}
	timer := time.NewTimer(ttl)
	defer timer.Stop()
	for {
		timer.Reset(ttl) // each message renews the lease
		select {
		case <-l.Replaced():
			l.r.log.Info("worker moved its registration to a new stream", "worker_id", l.WorkerID(), "lease_id", l.ID())
			return nil
		case <-expired:
			return ErrCertificateExpired
		case m := <-msgs:
			switch x := m.GetMessage().(type) {
			case *toolpb.ConnectRequest_Heartbeat:
				l.Heartbeat(x.Heartbeat.GetInFlight())
			case *toolpb.ConnectRequest_Draining:
				l.Drain()
			case *toolpb.ConnectRequest_Register:
				return &UnexpectedMessageError{Problem: "register may only be the first message of a registration stream"}
			default:
				return &UnexpectedMessageError{Problem: fmt.Sprintf("unexpected message %T", m.GetMessage())}
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) != codes.InvalidArgument {
				return nil // the worker closed, or the stream broke: the lease ends either way
			}
			return err // a message that does not decode
		case <-timer.C:
			l.r.log.Warn("worker lease expired: no heartbeat", "worker_id", l.WorkerID(), "ttl", ttl.String())
			l.Lost()
			return fmt.Errorf("%w: no heartbeat within the lease TTL of %s", ErrLeaseExpired, ttl)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
