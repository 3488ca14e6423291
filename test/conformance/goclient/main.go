// Command goclient is the conformance client of the Go SDK (pkg/client): it runs one
// command (run, get, watch, cancel) and prints what happened as test/conformance/README.md
// specifies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		var ce *client.Error
		switch {
		case errors.As(err, &ce):
			fmt.Printf("error %s %s %s\n", codeName(ce.Code), wire.ReasonName(ce.Reason), ce.Message)
		default:
			st := status.Convert(err)
			fmt.Printf("error %s UNSPECIFIED %s\n", codeName(st.Code()), st.Message())
		}
		os.Exit(1)
	}
}

// codeName is a gRPC code as the README names it: NOT_FOUND, INVALID_ARGUMENT.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func run(args []string) error {
	fs := flag.NewFlagSet("goclient", flag.ContinueOnError)
	orch := fs.String("orchestrator", "", "orchestrator host:port")
	token := fs.String("token", "", "bearer token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opts []grpc.DialOption
	if *token != "" {
		opts = append(opts, client.Bearer(*token, true))
	}
	cl, err := client.Dial(*orch, insecure.NewCredentials(), opts...)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	ctx := context.Background()
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New("a command: run, get, watch or cancel")
	}
	switch cmd, args := rest[0], rest[1:]; cmd {
	case "run":
		cmdFlags := flag.NewFlagSet("run", flag.ContinueOnError)
		var tools, groups repeated
		cmdFlags.Var(&tools, "tool", "tool to offer")
		cmdFlags.Var(&groups, "group", "group to offer")
		runID := cmdFlags.String("run-id", "", "the run's id")
		if err := cmdFlags.Parse(args); err != nil {
			return err
		}
		req := &toolpb.RunRequest{RunId: *runID, Tools: tools, ToolGroups: groups, Prompt: strings.Join(cmdFlags.Args(), " ")}
		return stream(cl.Run(ctx, req))
	case "watch":
		cmdFlags := flag.NewFlagSet("watch", flag.ContinueOnError)
		after := cmdFlags.Int64("after", 0, "watch after this sequence number")
		if err := cmdFlags.Parse(args); err != nil || cmdFlags.NArg() != 1 {
			return errors.New("watch [--after N] RUN_ID")
		}
		return stream(cl.Watch(ctx, cmdFlags.Arg(0), *after))
	case "get":
		if len(args) != 1 {
			return errors.New("get RUN_ID")
		}
		r, err := cl.GetRun(ctx, args[0])
		if err != nil {
			return err
		}
		return print(r)
	case "cancel":
		if len(args) != 1 {
			return errors.New("cancel RUN_ID")
		}
		st, err := cl.CancelRun(ctx, args[0], "")
		if err != nil {
			return err
		}
		return print(&toolpb.CancelRunResponse{State: st})
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// stream prints each event of a run until it ends.
func stream(events func(func(*toolpb.RunResponse, error) bool)) error {
	var failed error
	for ev, err := range events {
		if err != nil {
			var re *client.ReplanError
			var te *client.TerminatedError
			if errors.As(err, &re) || errors.As(err, &te) {
				continue // the event itself was printed: the run ended as the tool asked
			}
			failed = err
			break
		}
		if err := print(ev); err != nil {
			return err
		}
	}
	return failed
}

// print writes m as one line of protobuf JSON.
func print(m proto.Message) error {
	b, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
