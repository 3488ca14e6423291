package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// startImageServer is a streamable-HTTP MCP server (go-sdk) whose snapshot tool answers
// with text and a PNG.
func startImageServer(t *testing.T, png []byte) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "camera", Version: "v1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "snapshot", Description: "Takes a picture."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a picture"}, &sdk.ImageContent{Data: png, MIMEType: "image/png"}}}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestMCPMediaBothWays: an MCP server's image reaches a run's assets and GetRun as the
// tool's artifact while the model reads its placeholder; through the MCP endpoint, a
// worker's PNG artifact reaches the MCP client as image content, and a worker tool's
// progress reports reach the client that sent a progress token.
func TestMCPMediaBothWays(t *testing.T) {
	png, err := examplegroups.HandbookPoster()
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "Take a picture."
	useModel(t, &promptModel{scripts: map[string]*turnModel{prompt: {turns: []modelTurn{
		{calls: [][2]string{{"snapshot", `{}`}}},
		{text: "Done."},
	}}}})
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "", `
provider: {name: openai}
mcp_serve:
  listen: `+addr+`
mcp_servers:
  camera: {url: `+startImageServer(t, png)+`}
groups:
  camera:
    mcp: {server: camera}
    assets: [{type: mcp.snapshot}]
`)
	m.startWorker("handbook-1", "handbook")
	m.startWorker("crm-1", "crm")
	m.waitWorkers("handbook-1", "crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "camera-1", Prompt: prompt, ToolGroups: []string{"camera"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if f := finished(evs, 0); len(f) != 1 || f[0].GetContent() != fmt.Sprintf("a picture\n[image: image/png, %d bytes]", len(png)) {
		t.Errorf("the model read %v", f)
	}
	r, err := m.c.GetRun(ctx, "camera-1")
	if err != nil {
		t.Fatal(err)
	}
	want := &toolpb.BlackboardObject{TypeName: "mcp.snapshot", Data: png, MediaType: "image/png", Size: int64(len(png))}
	if len(r.GetAssets()) != 1 || !proto.Equal(r.GetAssets()[0].GetObject(), want) {
		t.Errorf("GetRun assets %v, want the picture", r.GetAssets())
	}

	var mu sync.Mutex
	var progress []string
	heard := make(chan struct{}, 8)
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params.Message)
			mu.Unlock()
			heard <- struct{}{}
		},
	})
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: examplegroups.HandbookPosterTool, Arguments: map[string]any{}})
	if err != nil || len(res.Content) != 2 {
		t.Fatalf("handbook_poster over MCP: %v %v", res, err)
	}
	if img, ok := res.Content[1].(*sdk.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Errorf("handbook_poster's second content is %#v, want the PNG", res.Content[1])
	}
	params := &sdk.CallToolParams{Name: "export_report", Arguments: map[string]any{"pages": 3}}
	params.SetProgressToken("report")
	if res, err := session.CallTool(ctx, params); err != nil || res.IsError {
		t.Fatalf("export_report over MCP: %v %v", res, err)
	}
	for range 3 { // the client may handle a notification after the result it preceded
		select {
		case <-heard:
		case <-ctx.Done():
			t.Fatalf("heard %v", progress)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(progress, "|"); got != "exporting page 1 of 3|exporting page 2 of 3|exporting page 3 of 3" {
		t.Errorf("progress heard over MCP: %q", got)
	}
}
