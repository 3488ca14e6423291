package examplegroups

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// EchoPrefix starts the role of a context-echo group: "echo_<name>".
const EchoPrefix = "echo_"

// Echo is what a context-echo tool answers: the ToolCallContext the tool received and
// every metadata entry of the gRPC request that carried the call.
type Echo struct {
	Context  map[string]string   `json:"context"`
	Metadata map[string][]string `json:"metadata"`
	// Tenant is the run's tenant as the call's token vouches for it (mutual TLS only).
	Tenant string `json:"verified_tenant,omitempty"`
}

// contextEcho returns a group with one tool, show_context_<name>, that answers with the
// ToolCallContext it received and the raw request metadata. It exists to show (and
// test) exactly what crosses the wire to a worker; role is "echo_<name>".
func contextEcho(name string, wrap Wrap) worker.Group {
	t := tool.New("show_context_"+name, "Show the out-of-band context this call received", schema.Empty(),
		func(ctx context.Context, _ string) (tool.Result, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			out := Echo{Context: toolctx.FromContext(ctx).Map(), Metadata: map[string][]string{}}
			out.Tenant, _ = worker.Tenant(ctx)
			for k, vs := range md {
				out.Metadata[k] = vs
			}
			b, err := json.Marshal(out)
			if err != nil {
				return tool.Result{}, err
			}
			return tool.Text(string(b)), nil
		}, tool.Idempotent())
	return worker.Group{
		Role:        EchoPrefix + name,
		Description: "Context echo: shows what out-of-band context reaches this group's workers",
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{t}),
	}
}
