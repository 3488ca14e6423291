package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzResultOf turns arbitrary tools/call results, as a hostile MCP server can send
// them, into tool results: it never panics, and what the model reads stays within the
// bound whatever the server sent.
func FuzzResultOf(f *testing.F) {
	for _, seed := range []string{
		`{"content":[{"type":"text","text":"hi"}]}`,
		`{"content":[{"type":"text","text":"bad"}],"isError":true}`,
		`{"content":[{"type":"image","mimeType":"image/png","data":"AAAA"},{"type":"resource_link","uri":"file:///x","name":"x"}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"mem://a","text":"t"}}],"structuredContent":{"a":1}}`,
		`{"content":[]}`, `{"isError":true}`, `{"content":[{"type":"audio","mimeType":"audio/wav","data":""}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var res sdk.CallToolResult
		if json.Unmarshal(data, &res) != nil {
			return
		}
		out := resultOf("echo", &res)
		if len(out.Content) > MaxResultBytes+1024 {
			t.Fatalf("a result of %d bytes reached the model; the bound is %d", len(out.Content), MaxResultBytes)
		}
	})
}
