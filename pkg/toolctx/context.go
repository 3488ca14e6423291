// Package toolctx owns the ToolCallContext: the out-of-band string→string bag (tenant
// ids, correlation ids, credentials) that travels with every tool call and that the
// model never sees. It also owns what decides which entries cross a process boundary:
// the converters (pass-through, none, allow-keys, deny-keys, your own, and the secret
// keys that only an explicit allow-keys forwards), and the per-loop memo behind
// OneShotPerLoop. The wire encoding of a bag (gRPC metadata) is the orchestrator's and
// the worker SDK's business, not a tool author's.
//
// Worker authors read the bag in a tool function with FromContext(ctx), and the tenant
// the orchestrator verified for the run under TenantKey (never under a key a client
// sends, such as tenant_id or tenantId). Embedders build bags with Of or FromMap and
// merge run and interaction levels with Effective.
//
// The package imports only pkg/tool, internal/toolinternal (which holds the context key)
// and the standard library; it must not import gRPC.
package toolctx

import (
	"context"
	"errors"
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// LoopIDKey is the reserved key under which FromContext shows the id of the tool loop a
// call belongs to (the LoopID of tool.CallInfoFrom). LoopMemo and OneShotPerLoop key on
// it.
const LoopIDKey = "toolmesh.loop_id"

// TenantKey is the reserved key under which FromContext shows the tenant the
// orchestrator verified for the run a call belongs to (from the client's certificate or
// bearer token); it is absent when the run has none. No client can set it: what a client
// sends under a reserved key is refused or dropped, and a worker built on pkg/worker
// takes the tenant from its own field of the request (InvokeRequest.tenant), never from
// the call's metadata. Read a tenant here, not under a key of the client's such as
// "tenantId" or "tenant_id":
//
//	tenant, ok := toolctx.FromContext(ctx).Get(toolctx.TenantKey)
//
// On a worker it can be trusted as far as the worker authenticates the orchestrator
// (mutual TLS): a plaintext worker takes it from whoever reaches its port.
const TenantKey = "toolmesh.tenant"

// ReservedPrefix starts every key toolmesh itself sets (LoopIDKey, TenantKey). Converters
// never forward such keys: the loop id and the tenant cross a process boundary in
// request fields of their own.
const ReservedPrefix = "toolmesh."

// IsReserved reports whether key belongs to toolmesh (starts with ReservedPrefix).
func IsReserved(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// Context is an immutable string-keyed bag. It is a value: copy it freely and read it
// from any goroutine. The zero value is Empty. Compare with Equal (go-cmp uses it).
type Context struct {
	m map[string]string // nil when empty; never modified once built
}

// Empty is the context with no entries; it equals the zero Context.
var Empty Context

// Of builds a context from key, value pairs. A later pair wins over an earlier one with
// the same key. An odd number of arguments is an error; no arguments give Empty.
func Of(kv ...string) (Context, error) {
	if len(kv)%2 != 0 {
		return Empty, errors.New("toolctx: Of needs key, value pairs, got an odd number of arguments")
	}
	if len(kv) == 0 {
		return Empty, nil
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return Context{m: m}, nil
}

// MustOf is Of for literal pairs: it panics on an odd number of arguments.
func MustOf(kv ...string) Context {
	c, err := Of(kv...)
	if err != nil {
		panic(err)
	}
	return c
}

// FromMap returns a context holding a copy of m; later changes to m do not show.
func FromMap(m map[string]string) Context {
	if len(m) == 0 {
		return Empty
	}
	return Context{m: maps.Clone(m)}
}

func init() {
	toolinternal.AdoptBag = func(m map[string]string) any { return adopt(m) }
}

// adopt returns a context holding m itself: the caller hands m over and must not change
// it, or keep it, afterwards (a decoder that built m for the context saves the copy
// FromMap makes). The engine reaches it as toolinternal.AdoptBag.
func adopt(m map[string]string) Context {
	if len(m) == 0 {
		return Empty
	}
	return Context{m: m}
}

// Get returns the value of key and whether it is present.
func (c Context) Get(key string) (string, bool) {
	v, ok := c.m[key]
	return v, ok
}

// GetOr returns the value of key, or def when key is absent.
func (c Context) GetOr(key, def string) string {
	if v, ok := c.m[key]; ok {
		return v
	}
	return def
}

// Contains reports whether key is present.
func (c Context) Contains(key string) bool {
	_, ok := c.m[key]
	return ok
}

// Len is the number of entries.
func (c Context) Len() int { return len(c.m) }

// IsEmpty reports whether the context has no entries.
func (c Context) IsEmpty() bool { return len(c.m) == 0 }

// Keys returns the keys in sorted order.
func (c Context) Keys() []string { return slices.Sorted(maps.Keys(c.m)) }

// All yields the entries in key order.
func (c Context) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, k := range c.Keys() {
			if !yield(k, c.m[k]) {
				return
			}
		}
	}
}

// Unordered yields the entries in no particular order, without sorting the keys: for
// code on a hot path that does not need the order.
func (c Context) Unordered() iter.Seq2[string, string] { return maps.All(c.m) }

// Map returns a copy of the entries; changing it does not change c. It is never nil.
func (c Context) Map() map[string]string {
	m := make(map[string]string, len(c.m))
	maps.Copy(m, c.m)
	return m
}

// Merge returns c with other's entries added; other wins on a key both hold.
// c.Merge(Empty) is c and Empty.Merge(other) is other.
func (c Context) Merge(other Context) Context {
	if other.IsEmpty() {
		return c
	}
	if c.IsEmpty() {
		return other
	}
	m := maps.Clone(c.m)
	maps.Copy(m, other.m)
	return Context{m: m}
}

// With returns c with key set to value.
func (c Context) With(key, value string) Context {
	m := make(map[string]string, len(c.m)+1)
	maps.Copy(m, c.m)
	m[key] = value
	return Context{m: m}
}

// Without returns c without the given keys.
func (c Context) Without(keys ...string) Context {
	if !slices.ContainsFunc(keys, c.Contains) {
		return c
	}
	m := maps.Clone(c.m)
	for _, k := range keys {
		delete(m, k)
	}
	return normalize(m)
}

// WithoutReserved returns c without the keys that start with ReservedPrefix.
func (c Context) WithoutReserved() Context {
	return c.Keep(func(k string) bool { return !IsReserved(k) })
}

// Keep returns the entries whose key keep accepts; c itself when it keeps them all.
func (c Context) Keep(keep func(key string) bool) Context {
	all := true
	for k := range c.m {
		if !keep(k) {
			all = false
			break
		}
	}
	if all {
		return c
	}
	var m map[string]string
	for k, v := range c.m {
		if keep(k) {
			if m == nil {
				m = make(map[string]string, len(c.m))
			}
			m[k] = v
		}
	}
	if len(m) == len(c.m) {
		return c
	}
	return Context{m: m}
}

// Equal reports whether c and o hold the same entries.
func (c Context) Equal(o Context) bool { return maps.Equal(c.m, o.m) }

// String renders the entries in key order: ToolCallContext({k1=v1, k2=v2}).
// Values are not redacted: do not log a context that holds credentials.
func (c Context) String() string {
	var b strings.Builder
	b.WriteString("ToolCallContext({")
	for i, k := range c.Keys() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(c.m[k])
	}
	b.WriteString("})")
	return b.String()
}

// LoopID returns the loop id under LoopIDKey, or "" when there is none.
func (c Context) LoopID() string { return c.m[LoopIDKey] }

// withShown returns c showing the loop id under LoopIDKey and the tenant under TenantKey,
// each absent when empty: c itself when it already does, else one copy.
func (c Context) withShown(loopID, tenant string) Context {
	if c.shows(LoopIDKey, loopID) && c.shows(TenantKey, tenant) {
		return c
	}
	m := make(map[string]string, len(c.m)+2)
	maps.Copy(m, c.m)
	show(m, LoopIDKey, loopID)
	show(m, TenantKey, tenant)
	return normalize(m)
}

// show sets key to v in m, or deletes it when v is empty.
func show(m map[string]string, key, v string) {
	if v == "" {
		delete(m, key)
	} else {
		m[key] = v
	}
}

// shows reports whether c holds v under key, or holds nothing there when v is empty.
func (c Context) shows(key, v string) bool {
	cur, ok := c.m[key]
	return cur == v && ok == (v != "")
}

func normalize(m map[string]string) Context {
	if len(m) == 0 {
		return Empty
	}
	return Context{m: m}
}

// NewContext returns ctx carrying c; tool functions read it back with FromContext.
// The loop id and the tenant are not the caller's to set: reserved keys of c are dropped,
// and the loop id and verified tenant of the call (see FromContext) are shown under
// LoopIDKey and TenantKey.
func NewContext(ctx context.Context, c Context) context.Context {
	return context.WithValue(ctx, toolinternal.BagKey{}, c.WithoutReserved())
}

// FromContext returns the context carried by ctx, or Empty when there is none, with the
// id of the tool loop the call belongs to under LoopIDKey and the tenant the
// orchestrator verified for its run under TenantKey. Neither lives in the bag: the loop
// id's home is the call's tool.CallInfo, the tenant's the run's verified identity; the
// orchestrator sets both for every call, the worker SDK restores both from the request
// (InvokeRequest.loop_id and tenant), and the bag only shows them.
func FromContext(ctx context.Context) Context {
	c, _ := ctx.Value(toolinternal.BagKey{}).(Context)
	return c.withShown(loopID(ctx), toolinternal.TenantFrom(ctx))
}

// loopID is the loop of the call in ctx.
func loopID(ctx context.Context) string {
	info, _ := tool.CallInfoFrom(ctx)
	return info.LoopID
}
