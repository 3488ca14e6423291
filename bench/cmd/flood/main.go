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
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	id, err := trust.ParseID(o.serverID)
	if err != nil {
		return err
	}
	src, err := trust.Load(o.files, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer src.Close()
	c, err := client.Dial(o.addr, src.ClientCredentials(id))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f := &flooder{ctx: ctx, c: c, o: o}
	began := time.Now()
	f.flood()
	f.n.Seconds = time.Since(began).Seconds()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		f.n.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if s, ok := f.lastErr.Load().(string); ok {
		f.n.LastError = s
	}
	b, _ := json.Marshal(f.n)
	fmt.Println(string(b))
	return nil
}

// options are flood's command-line settings.
type options struct {
	addr, serverID string
	files          trust.Files
	runs           int    // runs kept open at once
	tool           string // the tool the runs are offered
	big, history   int    // the oversized prompt's bytes, the long conversation's messages
	// fixedRetry, when set, replaces the refusal's RetryInfo delay; pace is the pause
	// between two oversized requests, and between two long conversations.
	fixedRetry, pace time.Duration
}

// parseFlags reads the flags in args and checks that the required ones are set.
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "", "the orchestrator's address")
	fs.StringVar(&o.serverID, "server-id", "", "the orchestrator's SPIFFE ID")
	fs.StringVar(&o.files.CA, "tls-ca", "", "CA bundle (PEM)")
	fs.StringVar(&o.files.Cert, "tls-cert", "", "this tenant's client certificate (PEM)")
	fs.StringVar(&o.files.Key, "tls-key", "", "its key (PEM)")
	fs.IntVar(&o.runs, "runs", 1000, "runs kept open at once")
	fs.StringVar(&o.tool, "tool", "add", "the tool the runs are offered")
	fs.IntVar(&o.big, "big-bytes", 100<<20, "size of the oversized requests' prompt")
	fs.IntVar(&o.history, "history", 10_000, "messages of the long conversations")
	fs.DurationVar(&o.fixedRetry, "retry-after", 0, "wait this long after a refused run instead of the refusal's RetryInfo delay (a client that ignores it)")
	fs.DurationVar(&o.pace, "pace", 250*time.Millisecond, "pause between two oversized requests, and between two long conversations")
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		return o, err
	}
	if o.addr == "" || o.serverID == "" || !o.files.Configured() {
		return o, errors.New("-addr, -server-id and -tls-ca/-tls-cert/-tls-key are required")
	}
	return o, nil
}

// flooder is one flood against the orchestrator, until ctx is done, and what it counted.
type flooder struct {
	ctx     context.Context
	c       *client.Client
	o       options
	n       peer.FloodCounts
	lastErr atomic.Value // the last unexpected error's text
	started sync.Once
	wg      sync.WaitGroup
	// answered are the kinds of senders that have had an answer; the flood has begun
	// once every kind has (kinds of them).
	mu       sync.Mutex
	answered map[string]bool
	kinds    int
}

// ready says, once, that the flood has begun: every kind of sender (the runs, the
// oversized requests, the long conversations) has had an answer, so that each is
// counted however slowly the orchestrator answers one.
func (f *flooder) ready(kind string) {
	f.mu.Lock()
	if f.answered == nil {
		f.answered = map[string]bool{}
	}
	f.answered[kind] = true
	all := len(f.answered) >= f.kinds
	f.mu.Unlock()
	if all {
		f.started.Do(func() { fmt.Println(`{"msg":"flooding"}`) })
	}
}

// other counts an unexpected error and keeps it as the last.
func (f *flooder) other(err error) {
	atomic.AddInt64(&f.n.Errors, 1)
	f.lastErr.Store(err.Error())
}

// flood keeps the runs open, sends the oversized requests and the long conversations,
// and returns once every sender has stopped.
func (f *flooder) flood() {
	req := &toolpb.RunRequest{Prompt: "Add the two numbers, again and again.", Tools: []string{f.o.tool}}
	f.kinds = 1
	if f.o.big > 0 {
		f.kinds++
	}
	if f.o.history > 0 {
		f.kinds++
	}
	for range f.o.runs {
		f.wg.Go(func() { f.runs(req) })
	}
	if f.o.big > 0 {
		f.paced("big", &toolpb.RunRequest{Prompt: strings.Repeat("x", f.o.big), Tools: []string{f.o.tool}}, &f.n.BigRefused, &f.n.BigAccepted, codes.ResourceExhausted)
	}
	if f.o.history > 0 {
		msgs := make([]*toolpb.ConversationMessage, f.o.history)
		for i := range msgs {
			msgs[i] = &toolpb.ConversationMessage{Role: toolpb.Role_ROLE_USER, Text: "earlier turn"}
		}
		f.paced("history", &toolpb.RunRequest{Prompt: "Add the two numbers.", Messages: msgs, Tools: []string{f.o.tool}}, &f.n.HistoryRefused, &f.n.HistoryAccepted, codes.InvalidArgument)
	}
	f.wg.Wait()
}

// runs runs req again and again until the flood ends, waiting after a refusal as its
// RetryInfo says (or -retry-after).
func (f *flooder) runs(req *toolpb.RunRequest) {
	for f.ctx.Err() == nil {
		_, err := f.c.RunAndWait(f.ctx, req, nil)
		var ce *client.Error
		switch {
		case err == nil:
			atomic.AddInt64(&f.n.Admitted, 1)
		case errors.As(err, &ce) && ce.Code == codes.ResourceExhausted:
			atomic.AddInt64(&f.n.Refused, 1)
			f.ready("runs")
			wait := max(ce.RetryAfter, 100*time.Millisecond)
			if f.o.fixedRetry > 0 {
				wait = f.o.fixedRetry
			}
			sleep(f.ctx, wait)
			continue
		case f.ctx.Err() != nil:
			return
		default:
			f.other(err)
			sleep(f.ctx, 100*time.Millisecond)
		}
		f.ready("runs")
	}
}

// paced sends req one at a time, every -pace, until the flood ends, counting it in
// refused when it fails with want and in accepted when it runs.
func (f *flooder) paced(kind string, req *toolpb.RunRequest, refused, accepted *int64, want codes.Code) {
	f.wg.Go(func() {
		for f.ctx.Err() == nil {
			_, err := f.c.RunAndWait(f.ctx, req, nil)
			switch {
			case f.ctx.Err() != nil:
				return
			case err == nil:
				atomic.AddInt64(accepted, 1)
				f.ready(kind)
			case codeOf(err) == want:
				atomic.AddInt64(refused, 1)
				f.ready(kind)
			default:
				f.other(err)
			}
			sleep(f.ctx, f.o.pace)
		}
	})
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
