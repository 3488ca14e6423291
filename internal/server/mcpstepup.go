package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// stepUp answers, and reports that it did, a tools/call whose token's scopes do not grant
// the tool but more scopes would let the caller call it: 403 with the challenge MCP's
// authorization specification gives for a step-up (WWW-Authenticate: Bearer
// error="insufficient_scope", scope="…": the token's scopes and those stepUpScopes
// chooses), and a JSON-RPC error for the call, so that a client without an OAuth flow
// keeps its session and reads why. An OAuth client gets a token with the scopes and sends the call again: over MCP
// 2026-07-28 it is served; a 2025-11-25 session is bound to the scopes of the token that
// opened it, so the retry in it gets 404 and the client opens a new session with the new
// token.
//
// "Would let the caller call it": its tenant offers the tool, a scope of mcp_serve.scopes
// grants it, and no call policy denies it to the caller whatever its arguments, as a
// session of the caller with that scope would be offered it (over 2026-07-28 as that revision's
// requests are: facades unfolded). Any other tool is the session's to refuse as one it
// does not have: the challenge names no tool the caller could not reach. A request
// naming another caller's session is the sessions' to refuse (and audit), and a batch
// (before 2025-06-18) is judged by nobody here.
//
// The body gate has read the body whole (at most 4 MiB): it is read again here and put
// back. The check costs one decoding of the message and one walk of the tenant's
// catalogue, comparing names, whatever the request holds.
func (m *mcpAuth) stepUp(w http.ResponseWriter, r *http.Request, p principal, c mcpCaller) bool {
	s := m.server
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody || len(s.cfg.MCPServe.Scopes) == 0 {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	version := r.Header.Get("Mcp-Protocol-Version")
	stateless := version >= mcp.Protocol20260728
	switch sid := r.Header.Get(mcpSessionHeader); {
	case stateless && (version != mcp.Protocol20260728 || sid != "" || r.Header.Get("Mcp-Method") != "tools/call" ||
		(len(s.cfg.MCPServe.ProtocolVersions) > 0 && !slices.Contains(s.cfg.MCPServe.ProtocolVersions, mcp.Protocol20260728))):
		return false // a request the endpoint refuses on its own (a version it does not serve, a header it lacks)
	case sid != "" && !m.sessions.owned(sid, c):
		return false // the sessions' to refuse: another caller's, one of other scopes, one that ended
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	req, name, args := calledTool(body)
	granted := s.scopeGrant(r.Context())
	if req == nil || granted == nil || granted(name) {
		return false
	}
	have := validScopes(strings.Fields(p.scopes))
	scopes, facade := m.stepUpScopes(r, p, have, name, args, stateless)
	if len(scopes) == 0 {
		return false
	}
	want := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(have), scopes...))))
	desc := fmt.Sprintf("the token's scopes do not grant the tool %s; with %s they do", printable(name), strings.Join(scopes, " and "))
	if facade != "" {
		desc += fmt.Sprintf(" (in a new session, call %s first: the tool comes with it)", printable(facade))
	}
	ch := `Bearer realm="toolmesh", error="insufficient_scope", scope="` + strings.Join(want, " ") + `"`
	if m.metadataURL != "" {
		ch += `, resource_metadata="` + m.metadataURL + `"`
	}
	ch += `, error_description="` + desc + `"`
	w.Header().Set("WWW-Authenticate", ch)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	if b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: desc}}); err == nil {
		_, _ = w.Write(b)
	}
	return true
}

// stepUpScopes are the scopes of mcp_serve.scopes that, added to have, let the caller
// call the tool name with args, none when no scope does: of those that grant it and under
// which the tool's call policy lets this call go on (a policy may decide on the arguments
// and the scopes together: large charges for admin alone), the one that grants the
// fewest of the tenant's tools (the narrowest; then by name). Where none lets this call
// go on but some would let other calls of the tool, all of those. facade is the facade a
// new session offers the tool under ("" where it offers the tool itself).
func (m *mcpAuth) stepUpScopes(r *http.Request, p principal, have []string, name, args string, stateless bool) (scopes []string, facade string) {
	s := m.server
	catalog := s.runs.CatalogFor(r.Context(), p.tenant)
	best, bestWidth, bestFacade := "", 0, ""
	var some []string
	someFacade := ""
	for _, scope := range slices.Sorted(maps.Keys(s.cfg.MCPServe.Scopes)) {
		patterns := s.cfg.MCPServe.Scopes[scope]
		if !validScope(scope) || !matchesAny(patterns, name) {
			continue
		}
		// What a session of the caller with that scope too would be offered.
		wider := p
		wider.scopes = strings.Join(append(slices.Clone(have), scope), " ")
		ctx := withCaller(r.Context(), wider)
		wrap, _ := s.mcpView(ctx)
		t, under := offered(catalog, wrap, name, stateless, 0)
		if t == nil {
			continue
		}
		if !s.runs.Allows(t, args, p.tenant, runCaller(ctx)) {
			some, someFacade = append(some, scope), under
			continue
		}
		if width := granting(catalog, patterns, 0); best == "" || width < bestWidth {
			best, bestWidth, bestFacade = scope, width, under
		}
	}
	if best != "" {
		return []string{best}, bestFacade
	}
	return some, someFacade
}

// granting counts the tools among ts, facades' children too, that patterns grant.
func granting(ts []tool.Tool, patterns []string, depth int) int {
	n := 0
	for _, t := range ts {
		if matchesAny(patterns, t.Definition().Name) {
			n++
		}
		if f, ok := tool.As[tool.Facade](t); ok && depth < 32 {
			n += granting(f.Children(), patterns, depth+1)
		}
	}
	return n
}

func matchesAny(patterns []string, name string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// offered is the tool name among ts that a session whose tools go through wrap is
// offered, nil when it is not offered one: at their top, or under facades that unfold
// without a worker, which the session is offered (stateless, a 2026-07-28 request: whose
// children it is offered in their place; a selectable facade is not). Only the tool of
// that name and the facades on the way to it go through wrap. under is the facade at the
// top of ts that a session offers the tool under ("" for a tool at the top, and for a
// stateless request).
func offered(ts []tool.Tool, wrap func(tool.Tool) tool.Tool, name string, stateless bool, depth int) (found tool.Tool, under string) {
	for _, t := range ts {
		f, isFacade := tool.As[tool.Facade](t)
		switch {
		case !isFacade || (!stateless && t.Definition().Name == name):
			if t.Definition().Name == name && wrap(t) != nil {
				return t, ""
			}
		case f.Kind() == tool.FacadeSelectable || depth >= 32:
		case stateless || wrap(t) != nil:
			if found, _ := offered(f.Children(), wrap, name, stateless, depth+1); found != nil {
				if stateless {
					return found, ""
				}
				return found, t.Definition().Name
			}
		}
	}
	return nil, ""
}

// calledTool is the request a body holds, the tool it calls and its arguments, when it is
// one JSON-RPC request of tools/call, read as the MCP SDK reads it (keys as they are written); nil
// otherwise (a batch among them).
func calledTool(body []byte) (req *jsonrpc.Request, name, args string) {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, "", ""
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "tools/call" || !req.IsCall() {
		return nil, "", ""
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(req.Params, &params) != nil || json.Unmarshal(params["name"], &name) != nil || name == "" {
		return nil, "", ""
	}
	args = "{}"
	if a := params["arguments"]; len(a) > 0 && string(a) != "null" {
		args = string(a)
	}
	return req, name, args
}

// validScopes are those of scopes that a challenge may carry (validScope).
func validScopes(scopes []string) []string {
	return slices.DeleteFunc(slices.Clone(scopes), func(s string) bool { return !validScope(s) })
}

// validScope reports whether s is a scope as OAuth writes one (RFC 6749 3.3): printable
// ASCII but space, '"' and '\'.
func validScope(s string) bool {
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return s != ""
}

// printable is name quoted for a challenge's error_description: printable ASCII but '"'
// and '\', the rest as '?'.
func printable(name string) string {
	b := []byte("'")
	for i := range len(name) {
		c := name[i]
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			c = '?'
		}
		b = append(b, c)
	}
	return string(append(b, '\''))
}
