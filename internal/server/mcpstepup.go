package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// stepUp answers, and reports that it did, a request whose token's scopes do not grant a
// tool it calls that its tenant offers and that a scope of mcp_serve.scopes grants:
// 403 with the challenge MCP's authorization specification gives for a step-up
// (WWW-Authenticate: Bearer error="insufficient_scope", scope="…"), the scopes the token
// has and those that grant the tool. The client gets a token with them and sends the
// request again, in the same session. A tool no scope grants, or that the tenant does not
// offer, is the session's to refuse as a tool it does not have.
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
	granted := s.scopeGrant(p.scopes)
	var need []string
	var tools []string
	for _, name := range calledTools(body) {
		if granted(name) {
			continue
		}
		scopes := s.requiredScopes(name)
		if len(scopes) == 0 || !catalogueHolds(s.runs.CatalogFor(r.Context(), p.tenant), name, 0) {
			continue
		}
		need, tools = append(need, scopes...), append(tools, name)
	}
	if len(need) == 0 {
		return false
	}
	have := strings.Fields(p.scopes)
	want := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(have), need...))))
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

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "'" + n + "'"
	}
	return out
}

// calledTools are the names of the tools a request's JSON-RPC message (or batch of them)
// calls (tools/call); none for a body that is no JSON-RPC request.
func calledTools(body []byte) []string {
	type message struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	var msgs []message
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		if json.Unmarshal(b, &msgs) != nil {
			return nil
		}
	} else {
		var one message
		if json.Unmarshal(b, &one) != nil {
			return nil
		}
		msgs = []message{one}
	}
	var names []string
	for _, msg := range msgs {
		if msg.Method == "tools/call" && msg.Params.Name != "" {
			names = append(names, msg.Params.Name)
		}
	}
	return names
}

// withTokenInfo is r with its verified token's scopes where the MCP SDK hands them to the
// session's handlers with each request (its TokenInfo, which only its bearer-token
// middleware sets): the grants of that request (Server.requestGrant). raw is the
// token p was verified by, the only Authorization the SDK sees.
func withTokenInfo(r *http.Request, raw string, p principal) *http.Request {
	info := &auth.TokenInfo{Scopes: strings.Fields(p.scopes)}
	verified := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return info, nil }
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+raw)
	var out *http.Request
	auth.RequireBearerToken(verified, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
		http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) { out = req })).ServeHTTP(nowhere{}, r)
	if out == nil {
		return r // granted nothing (requestGrant): the token is there, its grant is not
	}
	return out
}

// nowhere is a ResponseWriter that keeps nothing.
type nowhere struct{}

func (nowhere) Header() http.Header         { return http.Header{} }
func (nowhere) Write(b []byte) (int, error) { return len(b), nil }
func (nowhere) WriteHeader(int)             {}
