package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCELFromConfig: a group's converter and an MCP group's tool filter written as CEL in
// the orchestrator's config, through real processes. The worker of the cel group
// receives exactly what keep passes and set writes (a secret stays out of the
// expressions' sight, so set cannot copy it under another name); the MCP group offers
// only the server's tools the filter keeps.
func TestCELFromConfig(t *testing.T) {
	srv := startMetaServer(t)
	m := startMesh(t, "celcontext.yaml", `
context:
  secrets: [authToken]
mcp_servers:
  meta: {url: `+srv.url+`}
groups:
  echo_cel:
    context:
      kind: cel
      keep: 'key.startsWith("x-") || key == "tenantId"'
      set:
        requestedAt: 'string(now)'
        caller: 'context.?user_id.orValue("anonymous")'
        copied: 'context.?authToken.orValue("none")'
  metaf:
    mcp: {server: meta, filter: 'description.startsWith("Echoes")'}
`)
	m.startWorker("cel", examplegroups.EchoPrefix+"cel")
	m.waitWorkers("cel")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	infos, err := m.c.ListTools(ctx, "metaf")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.GetDefinition().GetName())
	}
	if !slices.Equal(names, []string{"echo"}) {
		t.Errorf("the filtered MCP group lists %v, want [echo]", names)
	}

	before := time.Now().UTC().Add(-time.Second)
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "show me", ToolGroups: []string{"echo_cel", "metaf"},
		Context: map[string]string{"tenantId": "acme", "x-correlation-id": "c-1", "debug": "on", "user_id": "u-7", "authToken": "s3cr3t"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "seen" {
		t.Errorf("final %q", got)
	}
	var echo examplegroups.Echo
	var mcpAnswer string
	for _, f := range finished(evs, 1) {
		switch f.GetTool() {
		case "show_context_cel":
			if err := json.Unmarshal([]byte(f.GetContent()), &echo); err != nil {
				t.Fatalf("show_context_cel answered %q: %v", f.GetContent(), err)
			}
		case "echo":
			mcpAnswer = f.GetContent()
		}
	}
	at, err := time.Parse(time.RFC3339Nano, echo.Context["requestedAt"])
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("requestedAt = %q (%v): not the time of the call", echo.Context["requestedAt"], err)
	}
	delete(echo.Context, "requestedAt")
	want := map[string]string{"tenantId": "acme", "x-correlation-id": "c-1", "caller": "u-7", "copied": "none", toolctx.LoopIDKey: echo.Context[toolctx.LoopIDKey]}
	if diff := cmp.Diff(want, echo.Context); diff != "" || echo.Context[toolctx.LoopIDKey] == "" {
		t.Errorf("the cel group's worker received (-want +got):\n%s", diff)
	}
	if mcpAnswer != "echo: hi" {
		t.Errorf("the MCP group's echo answered %q", mcpAnswer)
	}
}
