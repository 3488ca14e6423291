package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// rawAdder is the benchmark harness's limit (bench/cmd/rawadd) in this process: a bare
// grpc-go handler that decodes the arguments with encoding/json, adds and answers.
type rawAdder struct {
	toolpb.UnimplementedToolWorkerServiceServer
}

func (rawAdder) Invoke(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	var p struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	if err := json.Unmarshal([]byte(req.GetArgumentsJson()), &p); err != nil {
		return nil, err
	}
	return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: strconv.FormatFloat(p.A+p.B, 'f', -1, 64)}}, nil
}

// limitCall serves rawAdder with grpc-go's defaults on loopback and returns a call of it
// with grpc-go's defaults, carrying the hop's four context entries as toolmesh encodes
// them: what a hop would cost if toolmesh did nothing but move the same bytes.
func limitCall(b *testing.B) func() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	toolpb.RegisterToolWorkerServiceServer(g, rawAdder{})
	go func() { _ = g.Serve(lis) }()
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	c := toolpb.NewToolWorkerServiceClient(conn)
	md, err := ctxcodec.Codec{}.Encode(hopContext)
	if err != nil {
		b.Fatal(err)
	}
	var kv []string
	for k, vs := range md {
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	call := func() (string, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
		resp, err := c.Invoke(ctx, &toolpb.InvokeRequest{Tool: "add", ArgumentsJson: hopArguments})
		if err != nil {
			return "", err
		}
		return resp.GetText(), nil
	}
	if got, err := call(); err != nil || got != "111111.11101111112" {
		b.Fatalf("add = %q, %v", got, err)
	}
	return call
}

// BenchmarkLimitParallel is BenchmarkHopParallel's baseline: the same bytes and the same
// concurrency over a bare grpc-go call in this process (see limitCall). The ratio of the
// two cpu-µs/op is what toolmesh adds to a call.
func BenchmarkLimitParallel(b *testing.B) {
	call := limitCall(b)
	runParallel(b, func() error {
		if got, err := call(); err != nil || got != "111111.11101111112" {
			return fmt.Errorf("add = %q, %v", got, err)
		}
		return nil
	})
}
