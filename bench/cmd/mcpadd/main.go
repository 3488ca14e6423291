// Command mcpadd is the benchmark's MCP peer: the same add tool served by the official
// Go MCP SDK (github.com/modelcontextprotocol/go-sdk) with its default options, over
// streamable HTTP or over stdio.
//
//	mcpadd -transport http [-listen 127.0.0.1:0]   prints {"msg":"serving","url":"http://..."} on stdout
//	mcpadd -transport stdio                        speaks MCP on stdin/stdout
//
// It stops on SIGTERM or SIGINT, or (stdio) when stdin closes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/cli"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "mcpadd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mcpadd", flag.ContinueOnError)
	transport := fs.String("transport", "http", "http (streamable HTTP) or stdio")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve streamable HTTP on")
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mcpadd", Version: "v1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: peer.Name, Description: peer.Description},
		func(_ context.Context, _ *mcp.CallToolRequest, in peer.Pair) (*mcp.CallToolResult, any, error) {
			sum, err := peer.Sum(in)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: sum}}}, nil, nil
		})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch *transport {
	case "stdio":
		err := server.Run(ctx, &mcp.StdioTransport{})
		if ctx.Err() != nil {
			return nil
		}
		return err
	case "http":
		lis, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		line, _ := json.Marshal(map[string]string{"msg": "serving", "url": "http://" + lis.Addr().String() + "/"})
		fmt.Println(string(line))
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	default:
		return fmt.Errorf("-transport must be http or stdio, got %q", *transport)
	}
}
