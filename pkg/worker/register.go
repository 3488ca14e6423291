package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// errRejected marks a registration the orchestrator refused.
var errRejected = errors.New("registration refused")

// refusal is a registration the orchestrator refused, with the delay its status asked
// for before the next attempt (zero when it asked for none).
type refusal struct{ retryAfter time.Duration }

func (r *refusal) Error() string { return errRejected.Error() }
func (r *refusal) Unwrap() error { return errRejected }

// registerAll keeps the worker registered with every orchestrator replica Options.
// Orchestrator names until ctx ends: one registration loop per address, started and
// stopped as the addresses a dns:/// name resolves to change.
func (w *Worker) registerAll(ctx context.Context, drainReq chan<- struct{}) {
	var wg sync.WaitGroup
	loops := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range loops {
			stop()
		}
		wg.Wait()
	}()
	for {
		targets := w.resolveTargets(ctx)
		for t, stop := range loops {
			if !slices.Contains(targets, t) {
				w.log.Info("orchestrator replica gone from the address; leaving it", "orchestrator", t)
				stop()
				delete(loops, t)
			}
		}
		for _, t := range targets {
			if loops[t] != nil {
				continue
			}
			lctx, stop := context.WithCancel(ctx)
			loops[t] = stop
			wg.Go(func() { w.registerLoop(lctx, t, drainReq) })
		}
		if !w.resolves {
			<-ctx.Done()
			return
		}
		t := time.NewTimer(w.opts.ResolveInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// resolveTargets is the list of orchestrator addresses: Options.Orchestrator split at
// commas, each dns:///host:port entry resolved to all the addresses of host. A name that
// does not resolve (yet) keeps the addresses it had.
func (w *Worker) resolveTargets(ctx context.Context) []string {
	var out []string
	for _, entry := range strings.Split(w.opts.Orchestrator, ",") {
		entry = strings.TrimSpace(entry)
		name, ok := strings.CutPrefix(entry, "dns:///")
		if !ok {
			if entry != "" && !slices.Contains(out, entry) {
				out = append(out, entry)
			}
			continue
		}
		host, port, err := net.SplitHostPort(name)
		if err != nil {
			w.log.Warn("orchestrator address is not dns:///host:port", "orchestrator", entry, "error", err.Error())
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(rctx, host)
		cancel()
		if err != nil || len(addrs) == 0 {
			w.log.Warn("cannot resolve the orchestrator's name; keeping the addresses it had", "orchestrator", entry, "error", fmt.Sprint(err))
			addrs = w.lastResolved[entry]
		}
		slices.Sort(addrs)
		w.lastResolved[entry] = addrs
		for _, a := range addrs {
			if t := net.JoinHostPort(a, port); !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// registerLoop keeps the worker registered with the orchestrator at target until ctx
// ends, reconnecting with jittered exponential backoff whenever the stream breaks or the
// orchestrator refuses it.
func (w *Worker) registerLoop(ctx context.Context, target string, drainReq chan<- struct{}) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableServiceConfig(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// The connection's own reconnect backoff has the same cap as the registration
		// loop's (grpc-go's default cap is 120s): after an orchestrator outage of any
		// length, the worker is registered within MaxBackoff of the orchestrator serving
		// again. grpc-go jitters each delay by up to 20% either way, so the cap it is
		// given leaves room for that.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  w.opts.MinBackoff,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   max(w.opts.MinBackoff, time.Duration(float64(w.opts.MaxBackoff)/1.2)),
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, w.opts.DialOptions...)
	if w.opts.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(w.opts.TLS.ClientTLS(func(id spiffeid.ID) error {
			if !slices.Contains(w.opts.Orchestrators, id) {
				return fmt.Errorf("not one of the orchestrator identities %v", w.opts.Orchestrators)
			}
			return nil
		}))))
	}
	dial := func() (*registrationConn, error) {
		c := &registrationConn{}
		if w.opts.TLS != nil {
			c.rotated = w.opts.TLS.Rotated() // before the handshake: a rotation during it counts
		}
		var err error
		if c.conn, err = grpc.NewClient(target, opts...); err != nil {
			return nil, err
		}
		c.client = toolpb.NewToolRegistryServiceClient(c.conn)
		return c, nil
	}
	conn, err := dial()
	if err != nil {
		w.log.Error("cannot create orchestrator client", "error", err)
		return
	}
	defer func() { conn.close() }()

	failures := 0
	redial := false
	for ctx.Err() == nil {
		if conn.stale() || redial {
			// The certificate changed since this connection's handshake, or the
			// orchestrator refused the one it showed (it expired since): a new
			// registration must show the current one, so it needs a new connection.
			next, err := dial()
			if err != nil {
				w.log.Error("cannot create orchestrator client", "error", err)
				return
			}
			conn.close()
			conn = next
		}
		w.waitReachable(ctx, conn.conn, target)
		start := time.Now()
		err := w.follow(ctx, &conn, dial, target, drainReq)
		w.setRegistered(target, false, nil)
		redial = w.opts.TLS != nil && status.Code(err) == codes.Unauthenticated
		if ctx.Err() != nil {
			return
		}
		select {
		case <-w.drainCh:
			// The orchestrator refuses a worker whose health answers NOT_SERVING, as a
			// draining one does: registering again would only be refused, every second,
			// until the drain ends.
			w.log.Info("registration stream ended while draining: not registering again", "orchestrator", target, "error", err)
			return
		default:
		}
		// A session that lived a while was healthy: start the backoff over.
		if time.Since(start) > 10*time.Second && !errors.Is(err, errRejected) {
			failures = 0
		}
		delay := backoff(failures, w.opts.MinBackoff, w.opts.MaxBackoff)
		if r, ok := errors.AsType[*refusal](err); ok && r.retryAfter > delay {
			delay = min(r.retryAfter, w.opts.MaxBackoff) // as the orchestrator asked, within the cap
		}
		failures++
		w.log.Warn("registration stream ended; reconnecting", "orchestrator", target, "error", err, "retry_in", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// registrationConn is a connection to one orchestrator replica for registration
// streams, with the certificate rotation it was made before.
type registrationConn struct {
	conn    *grpc.ClientConn
	client  toolpb.ToolRegistryServiceClient
	rotated <-chan struct{} // nil without mutual TLS
}

// stale reports whether the worker's certificate changed since the connection was made.
func (c *registrationConn) stale() bool {
	if c.rotated == nil {
		return false
	}
	select {
	case <-c.rotated:
		return true
	default:
		return false
	}
}

func (c *registrationConn) close() { _ = c.conn.Close() }

// liveSession is a registration stream running in its own goroutine.
type liveSession struct {
	conn     *registrationConn
	cancel   context.CancelFunc
	accepted chan string // the lease id, once the orchestrator accepted the registration
	done     chan error  // how the stream ended
}

func (w *Worker) startSession(ctx context.Context, conn *registrationConn, target string, drainReq chan<- struct{}, replaces string) *liveSession {
	sctx, cancel := context.WithCancel(ctx)
	s := &liveSession{conn: conn, cancel: cancel, accepted: make(chan string, 1), done: make(chan error, 1)}
	go func() {
		s.done <- w.session(sctx, conn.client, target, drainReq, replaces, func(lease string) { s.accepted <- lease })
	}()
	return s
}

// follow runs registration streams on *conn until one ends for good, and returns how it
// ended. When the worker's certificate rotates while it is registered, it moves the
// registration to a new connection (which shows the new certificate) without leaving
// the routing table: it registers on the new connection naming its live lease
// (Registration.replaces_lease_id), and closes the old stream and connection once the
// orchestrator accepted; *conn is then the new connection. The orchestrator ends a
// lease when the certificate of its connection expires, so a worker that kept its first
// connection would lose its tools then, however often its certificate was renewed.
func (w *Worker) follow(ctx context.Context, conn **registrationConn, dial func() (*registrationConn, error), target string, drainReq chan<- struct{}) error {
	cur := w.startSession(ctx, *conn, target, drainReq, "")
	defer func() { cur.cancel() }()
	var lease string
	var retry <-chan time.Time
	tries := 0 // handovers that failed in a row
	drain := w.drainCh
	for {
		var rotated <-chan struct{}
		if lease != "" && retry == nil && drain != nil && w.opts.TLS != nil {
			rotated = cur.conn.rotated
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-cur.done:
			return err
		case lease = <-cur.accepted:
			continue
		case <-drain:
			// A draining worker stays where it is until it leaves: no more handovers
			// (a rotation's channel, closed, would otherwise be ready at every turn).
			drain, retry = nil, nil
			continue
		case <-retry:
			retry = nil
		case <-rotated:
		}
		next, err := dial()
		if err != nil {
			w.log.Warn("certificate rotated but no new connection to the orchestrator could be made; will try again", "orchestrator", target, "error", err.Error())
			tries++
			retry = time.After(backoff(tries, w.opts.MinBackoff, w.opts.MaxBackoff))
			continue
		}
		w.log.Info("certificate rotated: moving the registration to a new connection", "orchestrator", target, "lease_id", lease)
		ns := w.startSession(ctx, next, target, drainReq, lease)
		var newLease string
		var nerr error
		curDone := cur.done
	handover:
		for {
			select {
			case <-ctx.Done():
				ns.cancel()
				next.close()
				return ctx.Err()
			case newLease = <-ns.accepted:
				break handover
			case nerr = <-ns.done:
				break handover
			case err := <-curDone:
				// The old stream ended meanwhile (the orchestrator ends it as soon as the
				// new registration takes its place, before it acks): the new one, in
				// flight, takes the worker's place within the grace period either way.
				w.log.Debug("the old registration stream ended during the handover", "orchestrator", target, "error", fmt.Sprint(err))
				curDone = nil
			}
		}
		if newLease == "" {
			ns.cancel()
			next.close()
			if curDone == nil {
				return nerr // neither stream is left
			}
			w.log.Warn("the orchestrator refused the registration on a new connection; keeping the old one", "orchestrator", target, "error", fmt.Sprint(nerr))
			tries++
			retry = time.After(backoff(tries, w.opts.MinBackoff, w.opts.MaxBackoff))
			continue
		}
		cur.cancel()
		if curDone != nil {
			<-curDone
		}
		cur.conn.close()
		cur, *conn, lease, tries = ns, next, newLease, 0
		w.setRegistered(target, true, nil)
	}
}

// unreachableNotice is how long the worker waits for the orchestrator in silence before
// it says it cannot reach it, and how often it says so again.
const unreachableNotice = 5 * time.Second

// waitReachable waits until the connection to the orchestrator is ready, or ctx ends.
// The connection's own backoff paces the attempts; while the orchestrator cannot be
// reached the worker says so every unreachableNotice, so that a wrong address or an
// orchestrator that is down does not pass in silence.
func (w *Worker) waitReachable(ctx context.Context, conn *grpc.ClientConn, target string) {
	since := time.Now()
	conn.Connect()
	for ctx.Err() == nil {
		state := conn.GetState()
		if state == connectivity.Ready {
			return
		}
		if state == connectivity.Idle {
			conn.Connect()
		}
		wait, cancel := context.WithTimeout(ctx, unreachableNotice)
		changed := conn.WaitForStateChange(wait, state)
		cancel()
		if !changed && ctx.Err() == nil {
			w.log.Warn("cannot reach the orchestrator; still trying", "orchestrator", target,
				"state", conn.GetState().String(), "for", time.Since(since).Round(time.Second).String())
		}
	}
}

// backoff is exponential from min to max with equal jitter: half fixed, half random.
func backoff(failures int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < failures && d < hi; i++ {
		if d > hi/2 { // doubling would pass hi, or overflow when hi is huge
			d = hi
			break
		}
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(half+1)
}

// session runs one registration stream until it breaks or ctx ends; accepted is called
// with the lease id once the orchestrator accepted it. replaces names a live lease of
// this worker the registration takes the place of ("" for none).
func (w *Worker) session(ctx context.Context, client toolpb.ToolRegistryServiceClient, target string, drainReq chan<- struct{}, replaces string, accepted func(lease string)) error {
	sctx, cancel := context.WithCancel(ctx)
	var sender sync.WaitGroup
	defer func() {
		cancel()
		sender.Wait() // the heartbeat goroutine ends with the session
	}()
	// Waiting for the connection to be ready, rather than failing at once while it
	// reconnects, lets the connection's backoff alone pace the attempts.
	stream, err := client.Connect(sctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	var sendMu sync.Mutex
	send := func(m *toolpb.ConnectRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	reg := w.reg
	if replaces != "" {
		reg = proto.CloneOf(w.reg)
		reg.ReplacesLeaseId = replaces
	}
	if err := send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: reg}}); err != nil {
		return fmt.Errorf("send registration: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("await registration ack: %w", err)
	}
	ack := first.GetAck()
	if ack == nil {
		return fmt.Errorf("orchestrator answered the registration with %T, not an ack", first.GetMessage())
	}
	if !ack.GetAccepted() {
		w.setRegistered(target, false, ack.GetRejections())
		for _, r := range ack.GetRejections() {
			w.log.Error("orchestrator refused registration", "group", r.GetGroup(), "tool", r.GetTool(), "reason", r.GetReason())
		}
		// The stream ends with the refusal's status, which may say when to try again.
		_, err := stream.Recv()
		_, _, after, _ := wire.StatusReason(status.Convert(err))
		return &refusal{retryAfter: after}
	}
	w.setRegistered(target, true, nil)
	accepted(ack.GetLeaseId())
	interval := ack.GetHeartbeatInterval().AsDuration()
	if interval <= 0 {
		interval = 2 * time.Second
	}
	w.log.Info("registered with orchestrator", "orchestrator", target, "lease_id", ack.GetLeaseId(), "heartbeat", interval.String())

	// Heartbeats and the drain notice go out from one goroutine; replies are read here.
	// The heartbeats go on while the worker drains: its lease must outlive the calls it
	// finishes, or the orchestrator, once the lease expired, would probe it, find it
	// NOT_SERVING and fail them.
	sender.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		drain := w.drainCh
		for {
			select {
			case <-sctx.Done():
				return
			case <-drain:
				drain = nil
				_ = send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Draining{Draining: &toolpb.Draining{Reason: "worker shutting down"}}})
				w.drainSentOnce.Do(func() { close(w.drainSent) })
			case <-t.C:
				if err := send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Heartbeat{Heartbeat: &toolpb.Heartbeat{InFlight: w.active.Load()}}}); err != nil {
					cancel()
					return
				}
			}
		}
	})
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("orchestrator closed the registration stream")
			}
			return err
		}
		if d := msg.GetDrain(); d != nil {
			w.log.Info("drain requested by orchestrator", "reason", d.GetReason())
			select {
			case drainReq <- struct{}{}:
			default:
			}
		}
	}
}

func (w *Worker) setRegistered(target string, ok bool, rej []*toolpb.Rejection) {
	w.mu.Lock()
	if ok {
		w.registered[target] = true
	} else {
		delete(w.registered, target)
	}
	if rej != nil || ok {
		w.lastReject = rej
	}
	w.mu.Unlock()
}
