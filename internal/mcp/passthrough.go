package mcp

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// The endpoint serves the resources, resource templates and prompts of the MCP groups
// a session reaches (those of which it is offered a tool: its tenant's grants and its
// token's scopes decide), and passes on completions and resource subscriptions to them.
//
// Every item is listed under its group's role, so that two groups cannot collide: a
// prompt as "<role>/<name>", a resource as "toolmesh://<role>/<uri>" (a template the
// same way). A request may name an item so, or as its server names it when exactly one
// of the groups the session reaches lists it (or, for a resource, has a template that
// matches it); a name several groups list is refused with the qualified names to use.

// QualifiedURIPrefix starts the URI under which the endpoint lists a resource of an MCP
// group: "toolmesh://<role>/<the server's URI>".
const QualifiedURIPrefix = "toolmesh://"

// MaxListed bounds the resources, templates or prompts the endpoint lists of one group;
// past it the rest are left out, with a warning in the orchestrator's log.
const MaxListed = 10000

// maxSubscriptions bounds the resource subscriptions of the endpoint's clients a group
// holds; a subscription past it is refused.
const maxSubscriptions = 4096

// passthrough is a session's view of the MCP groups behind the endpoint.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
type passthrough struct {
	mu       sync.Mutex
	groups   map[string]*Group // the groups the session reaches, by role
	logLevel sdk.LoggingLevel  // what the client set with logging/setLevel
	watching bool              // the session's end drops its subscriptions
}

// reach records the group of t, a tool the session is offered, when it is an MCP
// group's.
func (p *passthrough) reach(t tool.Tool) {
	r, ok := tool.As[*remote](t)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groups == nil {
		p.groups = map[string]*Group{}
	}
	p.groups[r.g.opts.Role] = r.g
}

// reached are the groups the session reaches, by role.
func (p *passthrough) reached() []*Group {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Group, 0, len(p.groups))
	for _, role := range slices.Sorted(maps.Keys(p.groups)) {
		out = append(out, p.groups[role])
	}
	return out
}

func (p *passthrough) group(role string) *Group {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.groups[role]
}

//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
func (p *passthrough) wantsLogs(req *sdk.CallToolRequest) bool {
	if _, ok := req.Params.Meta[sdk.MetaKeyLogLevel]; ok {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logLevel != ""
}

// middleware answers the requests for the groups' resources and prompts, and notes the
// client's log level; the rest go on to the session's server.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
func (s *sessionServer) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch r := req.(type) {
		case *sdk.ServerRequest[*sdk.SetLoggingLevelParams]:
			s.pass.mu.Lock()
			s.pass.logLevel = r.Params.Level
			s.pass.mu.Unlock()
		case *sdk.ListPromptsRequest:
			return s.listPrompts(s.groupContext(ctx, r))
		case *sdk.GetPromptRequest:
			if r.Params == nil {
				return nil, invalid("prompts/get without params")
			}
			return s.getPrompt(s.groupContext(ctx, r), r.Params)
		case *sdk.ListResourcesRequest:
			return s.listResources(s.groupContext(ctx, r))
		case *sdk.ListResourceTemplatesRequest:
			return s.listTemplates(s.groupContext(ctx, r))
		case *sdk.ReadResourceRequest:
			if r.Params == nil {
				return nil, invalid("resources/read without params")
			}
			return s.readResource(s.groupContext(ctx, r), r.Params)
		}
		return next(ctx, method, req)
	}
}

// groupContext is ctx of a request to the groups: its ToolCallContext and verified
// tenant as a tool call of the session's has them, for the group's credentials and
// _meta.
func (s *sessionServer) groupContext(ctx context.Context, req sdk.Request) context.Context {
	var meta sdk.Meta
	switch r := req.(type) { // a list request may come without params
	case *sdk.ListPromptsRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.ListResourcesRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.ListResourceTemplatesRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.GetPromptRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.ReadResourceRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.CompleteRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.SubscribeRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	case *sdk.UnsubscribeRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	}
	ctx = toolctx.NewContext(ctx, s.callContext(&sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Meta: meta}, Extra: req.GetExtra()}))
	if s.tenant != "" {
		ctx = toolinternal.WithTenant(ctx, s.tenant)
	}
	return ctx
}

// invalid is the error of a request that names nothing the session may use.
func invalid(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// unavailable is the error of a request a group could not answer.
func unavailable(g *Group, err error) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("MCP group '%s' (server %s) did not answer: %v", g.opts.Role, g.opts.Server.Name, err)}
}

// caps is the session of the group for ctx's caller and what its server offers; nil
// capabilities when the server cannot be reached.
func (g *Group) caps(ctx context.Context) (*sdk.ClientSession, *sdk.ServerCapabilities, error) {
	cs, err := g.sessionFor(ctx)
	if err != nil {
		return nil, nil, err
	}
	init := cs.InitializeResult()
	if init == nil || init.Capabilities == nil {
		return cs, &sdk.ServerCapabilities{}, nil
	}
	return cs, init.Capabilities, nil
}

// meta is the _meta of a request to the group: the ToolCallContext its converter lets
// through and the verified tenant, as for a tool call; nil when there is neither.
func (g *Group) meta(ctx context.Context) sdk.Meta {
	m := sdk.Meta{}
	g.addMeta(ctx, m)
	if len(m) == 0 {
		return nil
	}
	return m
}

// addMeta adds to m what a request to the group carries in _meta: the ToolCallContext
// its converter lets through, with the group's credentials (a credential that travels
// as a header stays out), and the verified tenant. Keys under MetaPrefix (toolmesh's) and
// ProtocolMetaPrefix (the protocol's) are never supplied by a context entry.
func (g *Group) addMeta(ctx context.Context, m sdk.Meta) {
	for k, v := range g.outgoing(ctx).Map() {
		if !g.isHeader(k) && !strings.HasPrefix(k, MetaPrefix) && !strings.HasPrefix(k, ProtocolMetaPrefix) {
			m[k] = v
		}
	}
	if tenant := toolinternal.TenantFrom(ctx); tenant != "" {
		m[TenantMetaKey] = tenant
	}
}

// collect lists up to MaxListed items of a group, warning past it.
func collect[T any](ctx context.Context, g *Group, kind string, seq func(yield func(T, error) bool)) ([]T, error) {
	var out []T
	for item, err := range seq {
		if err != nil {
			return nil, err
		}
		if len(out) == MaxListed {
			g.log.WarnContext(ctx, "mcp server lists more than the endpoint passes on; the rest are left out", "kind", kind, "max", MaxListed)
			break
		}
		out = append(out, item)
	}
	return out, nil
}

func (g *Group) prompts(ctx context.Context) ([]*sdk.Prompt, error) {
	cs, caps, err := g.caps(ctx)
	if err != nil || caps.Prompts == nil {
		return nil, err
	}
	return collect(ctx, g, "prompts", cs.Prompts(replayable(ctx), &sdk.ListPromptsParams{Meta: g.meta(ctx)}))
}

func (g *Group) resources(ctx context.Context) ([]*sdk.Resource, error) {
	cs, caps, err := g.caps(ctx)
	if err != nil || caps.Resources == nil {
		return nil, err
	}
	return collect(ctx, g, "resources", cs.Resources(replayable(ctx), &sdk.ListResourcesParams{Meta: g.meta(ctx)}))
}

func (g *Group) templates(ctx context.Context) ([]*sdk.ResourceTemplate, error) {
	cs, caps, err := g.caps(ctx)
	if err != nil || caps.Resources == nil {
		return nil, err
	}
	return collect(ctx, g, "resource templates", cs.ResourceTemplates(ctx, &sdk.ListResourceTemplatesParams{Meta: g.meta(ctx)}))
}

// listPrompts lists the prompts of every group the session reaches, each as
// "<role>/<name>". A group that cannot answer is left out, with a warning.
func (s *sessionServer) listPrompts(ctx context.Context) (*sdk.ListPromptsResult, error) {
	out := &sdk.ListPromptsResult{Prompts: []*sdk.Prompt{}}
	for _, g := range s.pass.reached() {
		ps, err := g.prompts(ctx)
		if err != nil {
			g.log.WarnContext(ctx, "mcp prompts unavailable to the endpoint", "error", err.Error())
			continue
		}
		for _, p := range ps {
			q := *p
			q.Name = g.opts.Role + "/" + p.Name
			out.Prompts = append(out.Prompts, &q)
		}
	}
	return out, nil
}

func (s *sessionServer) listResources(ctx context.Context) (*sdk.ListResourcesResult, error) {
	out := &sdk.ListResourcesResult{Resources: []*sdk.Resource{}}
	for _, g := range s.pass.reached() {
		rs, err := g.resources(ctx)
		if err != nil {
			g.log.WarnContext(ctx, "mcp resources unavailable to the endpoint", "error", err.Error())
			continue
		}
		for _, r := range rs {
			q := *r
			q.URI = qualify(g, r.URI)
			out.Resources = append(out.Resources, &q)
		}
	}
	return out, nil
}

func (s *sessionServer) listTemplates(ctx context.Context) (*sdk.ListResourceTemplatesResult, error) {
	out := &sdk.ListResourceTemplatesResult{ResourceTemplates: []*sdk.ResourceTemplate{}}
	for _, g := range s.pass.reached() {
		ts, err := g.templates(ctx)
		if err != nil {
			g.log.WarnContext(ctx, "mcp resource templates unavailable to the endpoint", "error", err.Error())
			continue
		}
		for _, t := range ts {
			q := *t
			q.URITemplate = qualify(g, t.URITemplate)
			out.ResourceTemplates = append(out.ResourceTemplates, &q)
		}
	}
	return out, nil
}

func qualify(g *Group, uri string) string { return QualifiedURIPrefix + g.opts.Role + "/" + uri }

// promptGroup is the group and the server's name of the prompt a request names.
func (s *sessionServer) promptGroup(ctx context.Context, name string) (*Group, string, error) {
	if role, rest, ok := strings.Cut(name, "/"); ok {
		if g := s.pass.group(role); g != nil {
			return g, rest, nil
		}
	}
	var found []*Group
	for _, g := range s.pass.reached() {
		ps, err := g.prompts(ctx)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(ps, func(p *sdk.Prompt) bool { return p.Name == name }) {
			found = append(found, g)
		}
	}
	switch len(found) {
	case 0:
		return nil, "", invalid("unknown prompt %q", name)
	case 1:
		return found[0], name, nil
	}
	var names []string
	for _, g := range found {
		names = append(names, fmt.Sprintf("%q", g.opts.Role+"/"+name))
	}
	return nil, "", invalid("prompt %q is served by %d MCP groups; name one: %s", name, len(found), strings.Join(names, ", "))
}

func (s *sessionServer) getPrompt(ctx context.Context, p *sdk.GetPromptParams) (*sdk.GetPromptResult, error) {
	g, name, err := s.promptGroup(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	cs, err := g.sessionFor(ctx)
	if err != nil {
		return nil, unavailable(g, err)
	}
	q := *p
	q.Name, q.Meta = name, g.meta(ctx)
	res, err := cs.GetPrompt(replayable(ctx), &q)
	if err != nil {
		return nil, err // the server's own error, such as a missing argument
	}
	if err := bounded(g, "prompt", res); err != nil {
		return nil, err
	}
	return res, nil
}

// bounded refuses a result larger than MaxResultBytes as JSON.
func bounded(g *Group, kind string, res any) error {
	n, err := jsonSize(res)
	if err != nil {
		return unavailable(g, err)
	}
	if n > MaxResultBytes {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("the %s from MCP group '%s' is %d bytes, over the %d bytes the endpoint passes on", kind, g.opts.Role, n, MaxResultBytes)}
	}
	return nil
}

// resourceGroup is the group and the server's URI of the resource uri names: a qualified
// URI's group, else the one group that lists it, else the one group with a template
// that matches it.
func (s *sessionServer) resourceGroup(ctx context.Context, uri string) (*Group, string, error) {
	if rest, ok := strings.CutPrefix(uri, QualifiedURIPrefix); ok {
		role, inner, _ := strings.Cut(rest, "/")
		if g := s.pass.group(role); g != nil && inner != "" {
			return g, inner, nil
		}
		return nil, "", sdk.ResourceNotFoundError(uri)
	}
	var listed, matched []*Group
	for _, g := range s.pass.reached() {
		if rs, err := g.resources(ctx); err == nil && slices.ContainsFunc(rs, func(r *sdk.Resource) bool { return r.URI == uri }) {
			listed = append(listed, g)
			continue
		}
		if ts, err := g.templates(ctx); err == nil && slices.ContainsFunc(ts, func(t *sdk.ResourceTemplate) bool { return templateMatches(t.URITemplate, uri) }) {
			matched = append(matched, g)
		}
	}
	found := listed
	if len(found) == 0 {
		found = matched
	}
	switch len(found) {
	case 0:
		return nil, "", sdk.ResourceNotFoundError(uri)
	case 1:
		return found[0], uri, nil
	}
	var names []string
	for _, g := range found {
		names = append(names, fmt.Sprintf("%q", qualify(g, uri)))
	}
	return nil, "", invalid("resource %q is served by %d MCP groups; name one: %s", uri, len(found), strings.Join(names, ", "))
}

func (s *sessionServer) readResource(ctx context.Context, p *sdk.ReadResourceParams) (*sdk.ReadResourceResult, error) {
	g, uri, err := s.resourceGroup(ctx, p.URI)
	if err != nil {
		return nil, err
	}
	cs, err := g.sessionFor(ctx)
	if err != nil {
		return nil, unavailable(g, err)
	}
	res, err := cs.ReadResource(replayable(ctx), &sdk.ReadResourceParams{Meta: g.meta(ctx), URI: uri})
	if err != nil {
		return nil, err
	}
	if err := bounded(g, "resource", res); err != nil {
		return nil, err
	}
	if uri != p.URI { // asked for qualified: the contents are named so too
		for i, c := range res.Contents {
			if c != nil {
				q := *c
				q.URI = qualify(g, c.URI)
				res.Contents[i] = &q
			}
		}
	}
	return res, nil
}

// templateMatches reports whether uri could come from the RFC 6570 template: its
// literal text in order, any text for each expression.
func templateMatches(template, uri string) bool {
	var re strings.Builder
	re.WriteString("^")
	for {
		open := strings.IndexByte(template, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(template[open:], '}')
		if end < 0 {
			break
		}
		re.WriteString(regexp.QuoteMeta(template[:open]) + ".*")
		template = template[open+end+1:]
	}
	re.WriteString(regexp.QuoteMeta(template) + "$")
	ok, err := regexp.MatchString(re.String(), uri)
	return err == nil && ok
}

// complete passes a completion request on to the group of the prompt or resource
// template it names.
func (s *sessionServer) complete(ctx context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
	if req.Params == nil || req.Params.Ref == nil {
		return nil, invalid("completion/complete without a ref")
	}
	ctx = s.groupContext(ctx, req)
	ref := *req.Params.Ref
	var g *Group
	var err error
	switch ref.Type {
	case "ref/prompt":
		g, ref.Name, err = s.promptGroup(ctx, ref.Name)
	case "ref/resource":
		g, ref.URI, err = s.templateGroup(ctx, ref.URI)
	default:
		err = invalid("unknown reference type %q", ref.Type)
	}
	if err != nil {
		return nil, err
	}
	cs, caps, err := g.caps(ctx)
	if err != nil {
		return nil, unavailable(g, err)
	}
	if caps.Completions == nil {
		return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: []string{}}}, nil
	}
	q := *req.Params
	q.Ref, q.Meta = &ref, g.meta(ctx)
	res, err := cs.Complete(replayable(ctx), &q)
	if err != nil {
		return nil, err
	}
	if err := bounded(g, "completion", res); err != nil {
		return nil, err
	}
	return res, nil
}

// templateGroup is the group and the server's template of a completion's resource
// reference: a qualified template's group, else the one group that lists it.
func (s *sessionServer) templateGroup(ctx context.Context, uri string) (*Group, string, error) {
	if rest, ok := strings.CutPrefix(uri, QualifiedURIPrefix); ok {
		role, inner, _ := strings.Cut(rest, "/")
		if g := s.pass.group(role); g != nil && inner != "" {
			return g, inner, nil
		}
	}
	var found []*Group
	for _, g := range s.pass.reached() {
		if ts, err := g.templates(ctx); err == nil && slices.ContainsFunc(ts, func(t *sdk.ResourceTemplate) bool { return t.URITemplate == uri }) {
			found = append(found, g)
		}
	}
	if len(found) != 1 {
		return nil, "", invalid("resource template %q is served by %d of the MCP groups this session reaches; name it as %s<role>/<template>", uri, len(found), QualifiedURIPrefix)
	}
	return found[0], uri, nil
}

// subscribers are the endpoint sessions subscribed to resources of a group's server, by
// the group's session and the server's URI.
type subscribers struct {
	mu sync.Mutex
	m  map[*sdk.ClientSession]map[string][]subscriber
	n  int
}

// subscriber is an endpoint session's server and the URI its client subscribed to.
type subscriber struct {
	srv *sdk.Server
	uri string
}

// add records sub; first reports whether it is the first for uri on cs.
func (ss *subscribers) add(cs *sdk.ClientSession, uri string, sub subscriber) (first bool, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[*sdk.ClientSession]map[string][]subscriber{}
	}
	if ss.m[cs] == nil {
		ss.m[cs] = map[string][]subscriber{}
	}
	subs := ss.m[cs][uri]
	if slices.Contains(subs, sub) {
		return false, nil
	}
	if ss.n >= maxSubscriptions {
		return false, fmt.Errorf("it holds %d subscriptions, the most it may", maxSubscriptions)
	}
	ss.n++
	ss.m[cs][uri] = append(subs, sub)
	return len(subs) == 0, nil
}

// remove forgets sub; last reports whether none is left for uri on cs.
func (ss *subscribers) remove(cs *sdk.ClientSession, uri string, sub subscriber) (last bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	subs := ss.m[cs][uri]
	i := slices.Index(subs, sub)
	if i < 0 {
		return false
	}
	ss.n--
	subs = slices.Delete(subs, i, i+1)
	if len(subs) > 0 {
		ss.m[cs][uri] = subs
		return false
	}
	delete(ss.m[cs], uri)
	if len(ss.m[cs]) == 0 {
		delete(ss.m, cs)
	}
	return true
}

// removeAll forgets srv's subscriptions and returns those of which none is left, by the
// group's session.
func (ss *subscribers) removeAll(srv *sdk.Server) map[*sdk.ClientSession][]string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	gone := map[*sdk.ClientSession][]string{}
	for cs, byURI := range ss.m {
		for uri, subs := range byURI {
			kept := slices.DeleteFunc(subs, func(x subscriber) bool { return x.srv == srv })
			ss.n -= len(subs) - len(kept)
			if len(kept) > 0 {
				byURI[uri] = kept
				continue
			}
			delete(byURI, uri)
			gone[cs] = append(gone[cs], uri)
		}
		if len(byURI) == 0 {
			delete(ss.m, cs)
		}
	}
	return gone
}

// watchSubscriptions drops the session's subscriptions once it ends (once per session),
// unsubscribing at the servers those no other session holds.
func (s *sessionServer) watchSubscriptions(ss *sdk.ServerSession) {
	if ss == nil {
		return
	}
	s.pass.mu.Lock()
	watching := s.pass.watching
	s.pass.watching = true
	s.pass.mu.Unlock()
	if watching {
		return
	}
	go func() {
		_ = ss.Wait()
		for _, g := range s.pass.reached() {
			for cs, uris := range g.subscribers.removeAll(s.srv) {
				for _, uri := range uris {
					ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
					_ = cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri})
					cancel()
				}
			}
		}
	}()
}

func (ss *subscribers) of(cs *sdk.ClientSession, uri string) []subscriber {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return slices.Clone(ss.m[cs][uri])
}

// onResourceUpdated tells the endpoint sessions subscribed to the resource, each under
// the URI it subscribed to.
func (g *Group) onResourceUpdated(ctx context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
	if req.Params == nil {
		return
	}
	for _, sub := range g.subscribers.of(req.Session, req.Params.URI) {
		_ = sub.srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: sub.uri})
	}
}

// subscribe passes a subscription on to the resource's group (once per resource and
// session of the group).
func (s *sessionServer) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	if req.Params == nil {
		return invalid("resources/subscribe without params")
	}
	ctx = s.groupContext(ctx, req)
	g, uri, err := s.resourceGroup(ctx, req.Params.URI)
	if err != nil {
		return err
	}
	cs, caps, err := g.caps(ctx)
	if err != nil {
		return unavailable(g, err)
	}
	if caps.Resources == nil || !caps.Resources.Subscribe {
		return invalid("the MCP server of group '%s' takes no resource subscriptions", g.opts.Role)
	}
	sub := subscriber{srv: s.srv, uri: req.Params.URI}
	first, err := g.subscribers.add(cs, uri, sub)
	if err != nil {
		return unavailable(g, err)
	}
	s.watchSubscriptions(req.Session)
	if first {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{Meta: g.meta(ctx), URI: uri}); err != nil {
			g.subscribers.remove(cs, uri, sub)
			return err
		}
	}
	return nil
}

func (s *sessionServer) unsubscribe(ctx context.Context, req *sdk.UnsubscribeRequest) error {
	if req.Params == nil {
		return invalid("resources/unsubscribe without params")
	}
	ctx = s.groupContext(ctx, req)
	g, uri, err := s.resourceGroup(ctx, req.Params.URI)
	if err != nil {
		return err
	}
	cs, err := g.sessionFor(ctx)
	if err != nil {
		return unavailable(g, err)
	}
	if g.subscribers.remove(cs, uri, subscriber{srv: s.srv, uri: req.Params.URI}) {
		return cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{Meta: g.meta(ctx), URI: uri})
	}
	return nil
}

// reach records the MCP groups of t, a tool the session is offered, and of the tools
// inside it when it is a facade that unfolds without a worker.
func (s *sessionServer) reach(t tool.Tool, depth int) {
	s.pass.reach(t)
	if f, ok := tool.As[tool.Facade](t); ok && f.Kind() != tool.FacadeSelectable && depth < maxFacadeDepth {
		for _, c := range f.Children() {
			if c != nil && s.wrap(c) != nil {
				s.reach(c, depth+1)
			}
		}
	}
}
