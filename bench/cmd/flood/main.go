// Command flood is the abusive tenant of the benchmark's tenant-isolation rows: one
// client identity that keeps -runs runs open at once against an orchestrator, and sends,
// paced, requests of -big-bytes and conversations of -history messages, while the
// benchmark measures another tenant's latency.
//
// A refused run (RESOURCE_EXHAUSTED) is retried after the RetryInfo delay the refusal
// carries, as pkg/client's callers do; an admitted run runs to its end. The oversized
// requests and the long conversations are sent one at a time, every -pace, so that this
// process's own CPU (it shares the machine with the orchestrator) stays a small part of
// the load.
//
// It prints {"msg":"flooding"} once its first refusal or admitted run came back, and at
// SIGTERM or SIGINT one JSON line of counts, then exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/cli"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !cli.IsHelp(err) {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	addr := fs.String("addr", "", "the orchestrator's address")
	serverID := fs.String("server-id", "", "the orchestrator's SPIFFE ID")
	var files trust.Files
	fs.StringVar(&files.CA, "tls-ca", "", "CA bundle (PEM)")
	fs.StringVar(&files.Cert, "tls-cert", "", "this tenant's client certificate (PEM)")
	fs.StringVar(&files.Key, "tls-key", "", "its key (PEM)")
	runs := fs.Int("runs", 1000, "runs kept open at once")
	tool := fs.String("tool", "add", "the tool the runs are offered")
	big := fs.Int("big-bytes", 100<<20, "size of the oversized requests' prompt")
	history := fs.Int("history", 10_000, "messages of the long conversations")
	fixedRetry := fs.Duration("retry-after", 0, "wait this long after a refused run instead of the refusal's RetryInfo delay (a client that ignores it)")
	pace := fs.Duration("pace", 250*time.Millisecond, "pause between two oversized requests, and between two long conversations")
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return err
	}
	if *addr == "" || *serverID == "" || !files.Configured() {
		return errors.New("-addr, -server-id and -tls-ca/-tls-cert/-tls-key are required")
	}
	id, err := trust.ParseID(*serverID)
	if err != nil {
		return err
	}
	src, err := trust.Load(files, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer src.Close()
	c, err := client.Dial(*addr, src.ClientCredentials(id))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var n peer.FloodCounts
	began := time.Now()
	var lastErr atomic.Value
	var started sync.Once
	ready := func() { started.Do(func() { fmt.Println(`{"msg":"flooding"}`) }) }
	other := func(err error) {
		atomic.AddInt64(&n.Errors, 1)
		lastErr.Store(err.Error())
	}
	req := &toolpb.RunRequest{Prompt: "Add the two numbers, again and again.", Tools: []string{*tool}}
	var wg sync.WaitGroup
	for range *runs {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.RunAndWait(ctx, req, nil)
				var ce *client.Error
				switch {
				case err == nil:
					atomic.AddInt64(&n.Admitted, 1)
				case errors.As(err, &ce) && ce.Code == codes.ResourceExhausted:
					atomic.AddInt64(&n.Refused, 1)
					ready()
					wait := max(ce.RetryAfter, 100*time.Millisecond)
					if *fixedRetry > 0 {
						wait = *fixedRetry
					}
					sleep(ctx, wait)
					continue
				case ctx.Err() != nil:
					return
				default:
					other(err)
					sleep(ctx, 100*time.Millisecond)
				}
				ready()
			}
		})
	}
	paced := func(req *toolpb.RunRequest, refused, accepted *int64, want codes.Code) {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.RunAndWait(ctx, req, nil)
				switch {
				case ctx.Err() != nil:
					return
				case err == nil:
					atomic.AddInt64(accepted, 1)
					ready()
				case codeOf(err) == want:
					atomic.AddInt64(refused, 1)
					ready()
				default:
					other(err)
				}
				sleep(ctx, *pace)
			}
		})
	}
	if *big > 0 {
		paced(&toolpb.RunRequest{Prompt: strings.Repeat("x", *big), Tools: []string{*tool}}, &n.BigRefused, &n.BigAccepted, codes.ResourceExhausted)
	}
	if *history > 0 {
		msgs := make([]*toolpb.ConversationMessage, *history)
		for i := range msgs {
			msgs[i] = &toolpb.ConversationMessage{Role: toolpb.Role_ROLE_USER, Text: "earlier turn"}
		}
		paced(&toolpb.RunRequest{Prompt: "Add the two numbers.", Messages: msgs, Tools: []string{*tool}}, &n.HistoryRefused, &n.HistoryAccepted, codes.InvalidArgument)
	}
	wg.Wait()
	n.Seconds = time.Since(began).Seconds()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		n.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if s, ok := lastErr.Load().(string); ok {
		n.LastError = s
	}
	b, _ := json.Marshal(n)
	fmt.Println(string(b))
	return nil
}

// codeOf is the gRPC code of err (a pkg/client error keeps its status).
func codeOf(err error) codes.Code { return status.Code(err) }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
