package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// maxStepUpNames bounds the tools of one request a step-up looks at: a batch of more
// calls is judged by its first ones.
const maxStepUpNames = 16

// stepUp answers, and reports that it did, a request that calls a tool its token's scopes
// do not grant but that a session of the same caller would be offered with more scopes:
// 403 with the challenge MCP's authorization specification gives for a step-up
// (WWW-Authenticate: Bearer error="insufficient_scope", scope="…": the token's scopes and
// those that grant the tool). The client gets a token with them and sends the request
// again; a session is bound to the scopes of the token that opened it, so the client
// opens a new session with the new token (a 404 in the old one says so). A tool no scope
// grants, or that the caller would not be offered whatever its scopes (its tenant's
// grants, a call policy that denies it to the caller), is the session's to refuse as a
// tool it does not have: the challenge names no tool the caller could not reach.
//
// The body gate has read the body whole (at most 4 MiB): it is read again here and put
// back.
func (m *mcpAuth) stepUp(w http.ResponseWriter, r *http.Request, p principal) bool {
	s := m.server
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody || len(s.cfg.MCPServe.Scopes) == 0 {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	// Batches are JSON-RPC's in revisions before 2025-06-18 alone.
	names := calledTools(body, r.Header.Get("Mcp-Protocol-Version") == "" || r.Header.Get("Mcp-Protocol-Version") < "2025-06-18")
	granted := s.scopeGrant(r.Context())
	var need, tools []string
	for _, name := range names {
		if granted == nil || granted(name) {
			continue
		}
		if scopes := s.requiredScopes(name); len(scopes) > 0 {
			need, tools = append(need, scopes...), append(tools, name)
		}
	}
	if len(tools) == 0 {
		return false
	}
	have := strings.Fields(p.scopes)
	want := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(have), need...))))
	// What a session of the caller with those scopes would be offered.
	wider := p
	wider.scopes = strings.Join(want, " ")
	ctx := withCaller(r.Context(), wider)
	wrap, _ := s.mcpView(ctx)
	catalog := s.runs.CatalogFor(ctx, p.tenant)
	tools = slices.DeleteFunc(tools, func(name string) bool { return !offered(catalog, wrap, name, 0) })
	if len(tools) == 0 {
		return false
	}
	need = need[:0]
	for _, name := range tools {
		need = append(need, s.requiredScopes(name)...)
	}
	want = slices.Compact(slices.Sorted(slices.Values(append(have, need...))))
	desc := fmt.Sprintf("the token's scopes do not grant the tool %s; %s does", strings.Join(quoted(tools), ", "), strings.Join(quoted(slices.Compact(slices.Sorted(slices.Values(need)))), " or "))
	c := `Bearer realm="toolmesh", error="insufficient_scope", scope="` + strings.Join(want, " ") + `"`
	if m.metadataURL != "" {
		c += `, resource_metadata="` + m.metadataURL + `"`
	}
	c += `, error_description="` + strings.ReplaceAll(desc, `"`, `'`) + `"`
	w.Header().Set("WWW-Authenticate", c)
	http.Error(w, desc, http.StatusForbidden)
	return true
}

// requiredScopes are the scopes of mcp_serve.scopes that grant the tool name, sorted.
func (s *Server) requiredScopes(name string) []string {
	var out []string
	for scope, patterns := range s.cfg.MCPServe.Scopes {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, name); ok {
				out = append(out, scope)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// offered reports whether a session whose tools go through wrap is offered the tool
// name among ts: at their top, or under facades it is offered that unfold without a
// worker.
func offered(ts []tool.Tool, wrap func(tool.Tool) tool.Tool, name string, depth int) bool {
	for _, t := range ts {
		if wrap(t) == nil {
			continue
		}
		if t.Definition().Name == name {
			return true
		}
		if f, ok := tool.As[tool.Facade](t); ok && f.Kind() != tool.FacadeSelectable && depth < 32 && offered(f.Children(), wrap, name, depth+1) {
			return true
		}
	}
	return false
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "'" + n + "'"
	}
	return out
}

// calledTools are the names of the tools a request's JSON-RPC message (or, where batch
// is set, batch of them) calls with tools/call, each once, the first maxStepUpNames;
// none for a body that is no JSON-RPC request. Keys are matched as the MCP SDK matches
// them: exactly.
func calledTools(body []byte, batch bool) []string {
	var raws []json.RawMessage
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		if !batch || json.Unmarshal(b, &raws) != nil {
			return nil
		}
	} else {
		raws = []json.RawMessage{b}
	}
	var names []string
	for _, raw := range raws {
		var msg map[string]json.RawMessage
		var method string
		if json.Unmarshal(raw, &msg) != nil || json.Unmarshal(msg["method"], &method) != nil || method != "tools/call" {
			continue
		}
		var params map[string]json.RawMessage
		var name string
		if json.Unmarshal(msg["params"], &params) != nil || json.Unmarshal(params["name"], &name) != nil || name == "" || slices.Contains(names, name) {
			continue
		}
		if names = append(names, name); len(names) == maxStepUpNames {
			break
		}
	}
	return names
}
