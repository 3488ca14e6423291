// Command rawadd is the benchmark's limit: a bare grpc-go server (no interceptors, no
// stats handlers, default options) that answers toolmesh's ToolWorkerService.Invoke with
// a hand-written handler computing add. It reuses the generated toolpb messages, so the
// raw call carries exactly the bytes a toolmesh hop carries (tool name, JSON arguments,
// text result); what it leaves out is toolmesh's machinery: routing, decorators, the
// context codec, schema validation and the worker SDK.
//
// It prints one JSON line {"msg":"serving","address":"..."} on stdout once it serves,
// and stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "rawadd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("rawadd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	withHealth := fs.Bool("health", false, "serve grpc.health.v1 too: the benchmark holds Watch streams open on it to measure what an open server stream costs a bare grpc-go server")
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	toolpb.RegisterToolWorkerServiceServer(g, adder{})
	if *withHealth {
		healthpb.RegisterHealthServer(g, health.NewServer())
	}
	line, _ := json.Marshal(map[string]string{"msg": "serving", "address": lis.Addr().String()})
	fmt.Println(string(line))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	return g.Serve(lis)
}

// adder is the hand-written handler: decode the arguments, add, answer with the text.
type adder struct {
	toolpb.UnimplementedToolWorkerServiceServer
}

func (adder) Invoke(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	if req.GetTool() != peer.Name {
		return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{
			Message: fmt.Sprintf("unknown tool %q", req.GetTool()), Code: toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNKNOWN_TOOL,
		}}}, nil
	}
	sum, err := peer.Add([]byte(req.GetArgumentsJson()))
	if err != nil {
		return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{
			Message: err.Error(), Code: toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS,
		}}}, nil
	}
	return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: sum}}, nil
}
