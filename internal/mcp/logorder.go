package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// logOrder keeps a call's log messages and progress notifications (ordered) ahead of its
// result on their way to the endpoint's client; "log messages" below stands for both. The go-sdk client hands a server's notifications to their handler
// on a goroutine of its own, one after another, but gives a response to its caller at
// once: a call's result can overtake the log messages the server sent before it, which
// then reach the endpoint's client after the result (on its session's stream, if at all)
// instead of before it on the call's. So the session's connection counts the log
// messages the SDK reads (read: an HTTP session's client as it reads the event streams,
// a stdio session's connection as the SDK takes each message from it), the session's log
// handler those it passed on (handled, once onLog returns), and a call whose client hears
// its log messages waits, once it has its result, until every log message read before is
// handled (wait), for at most logWait. The count follows the SDK's reading of the
// messages (it skips events of another type than "message", and refuses a log message
// with an id or without an object of params); a message the SDK refuses for another
// reason is never handled, and the call that waits for it waits logWait.
type logOrder struct {
	mu            sync.Mutex
	read, handled int64
	// skew is what read counted that the handler has not got (a message the SDK dropped,
	// or one late): a wait that timed out adds its shortfall, so that the next calls do
	// not wait for it, and a late message's handling takes it back once the count allows
	// (until then, a late message handled during the next call's wait counts as one of
	// that call's: after a timeout, the next call's messages may come after its result).
	skew    int64
	changed chan struct{} // closed and replaced at each handled message
}

// logWait bounds a call's wait for its log messages: they are handled within
// microseconds unless the process is very busy (at 250 ms, a test under load saw a
// result overtake its third message), as long as a late one is still the call's
// (logGrace). A call waits that long only for a message the SDK never handles.
const logWait = logGrace

func (o *logOrder) noteRead() {
	o.mu.Lock()
	o.read++
	o.mu.Unlock()
}

func (o *logOrder) noteHandled() {
	o.mu.Lock()
	o.handled++
	if o.handled+o.skew > o.read {
		// A message a timed-out wait gave up on came after all: the skew counted it.
		o.skew = max(o.read-o.handled, 0)
	}
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	o.mu.Unlock()
}

// wait returns once every log message read so far is handled, after at most d, or when
// ctx ends.
func (o *logOrder) wait(ctx context.Context, d time.Duration) {
	o.mu.Lock()
	read := o.read
	target := read - o.skew
	o.mu.Unlock()
	var timeout <-chan time.Time
	for {
		o.mu.Lock()
		if o.handled >= target {
			o.mu.Unlock()
			return
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			// What it gave up on: as much as two calls that time out together gave up
			// on, not twice that.
			o.mu.Lock()
			o.skew = max(o.skew, read-o.handled)
			o.mu.Unlock()
			return
		case <-ctx.Done():
			return
		}
	}
}

// awaitLogs waits, for a call in ctx on cs whose endpoint client hears its log
// messages, until the log messages of cs read so far are handled (logOrder.wait): while
// the call is still in flight, so that onLog gives them to it.
func (g *Group) awaitLogs(ctx context.Context, cs *sdk.ClientSession) {
	if r := relayFrom(ctx); r == nil || (r.log == nil && r.progress == nil) {
		return
	}
	if o, ok := g.orders.Load(cs); ok {
		o.(*logOrder).wait(ctx, logWait)
	}
}

// countingStdio is a stdio transport whose connection counts, for order, the log
// messages the SDK reads from it.
type countingStdio struct {
	next  sdk.Transport
	order *logOrder
}

func (t countingStdio) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.next.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{Connection: c, order: t.order}, nil
}

// countingConn notes each log message as the SDK reads it, before the SDK hands it to
// its handler or reads what follows it.
type countingConn struct {
	sdk.Connection
	order *logOrder
}

func (c countingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && err == nil && !r.IsCall() && ordered[r.Method] &&
		bytes.HasPrefix(bytes.TrimLeft(r.Params, " \t\r\n"), []byte{'{'}) {
		c.order.noteRead()
	}
	return m, err
}

// countingTransport counts, for order, the log messages in the event streams of the
// responses it carries.
type countingTransport struct {
	order *logOrder
	next  http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(r)
	if err != nil || res.Body == nil {
		return res, err
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
		res.Body = &countingBody{ReadCloser: res.Body, order: t.order}
	}
	return res, nil
}

// countingBody passes an event stream through as it is and notes each event that is a
// log message (notifications/message) as it is read, before whatever follows it.
type countingBody struct {
	io.ReadCloser
	order *logOrder
	line  []byte // the line read so far, up to maxEventScan bytes
	data  []byte // the event's data so far
	// named says that the event has a type other than "message", which the SDK
	// skips.
	named bool
	// lineOver and over say that the line, and the event's data, are longer than
	// maxEventScan: only their start is kept.
	lineOver, over bool
}

// maxEventScan bounds what countingBody keeps of an event's data to find its method.
const maxEventScan = 64 << 10

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if room := maxEventScan - len(b.line); len(part) > room {
			part, b.lineOver = part[:max(room, 0)], true
		}
		b.line = append(b.line, part...)
		if i < 0 {
			break
		}
		b.endLine()
		rest = rest[i+1:]
	}
	if err != nil {
		// The stream's end ends its last line and event, as the SDK takes them.
		if len(b.line) > 0 || b.lineOver {
			b.endLine()
		}
		if len(b.data) > 0 {
			b.endLine() // a blank line
		}
	}
	return n, err
}

// endLine takes the line read so far: an event's data, or the blank line that ends it.
func (b *countingBody) endLine() {
	line := bytes.TrimSuffix(b.line, []byte{'\r'})
	b.line = b.line[:0]
	if b.lineOver {
		b.over, b.lineOver = true, false
	}
	if len(line) == 0 {
		if !b.named && isLogMessage(b.data, b.over) {
			b.order.noteRead()
		}
		b.data, b.over, b.named = b.data[:0], false, false
		return
	}
	if name, ok := bytes.CutPrefix(line, []byte("event:")); ok {
		name = bytes.TrimSpace(name)
		b.named = len(name) > 0 && string(name) != "message"
		return
	}
	rest, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	rest = bytes.TrimPrefix(rest, []byte{' '})
	if len(b.data) > 0 {
		b.data = append(b.data, '\n')
	}
	if room := maxEventScan - len(b.data); len(rest) > room {
		rest, b.over = rest[:max(room, 0)], true
	}
	b.data = append(b.data, rest...)
}

// isLogMessage reports whether data, an event's JSON-RPC message (cut when over), is a
// log message or a progress notification (ordered).
func isLogMessage(data []byte, over bool) bool {
	if len(data) == 0 {
		return false
	}
	if !bytes.Contains(data, []byte("notifications")) {
		return false // most events: decoded only when they may be a log message
	}
	if !over {
		// As the SDK takes it: a notification (no id, or a null one) whose params are
		// an object.
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		return json.Unmarshal(data, &m) == nil && ordered[m.Method] && (m.ID == nil || string(m.ID) == "null") &&
			bytes.HasPrefix(bytes.TrimLeft(m.Params, " \t\r\n"), []byte{'{'})
	}
	// A message too long to decode here: its method is near its start, where encoders
	// put it.
	i := bytes.Index(data, []byte(`"method"`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(data[i+len(`"method"`):], " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte{':'})
	rest = bytes.TrimLeft(rest, " \t\r\n")
	for method := range ordered {
		if ok && (bytes.HasPrefix(rest, []byte(`"`+method+`"`)) || bytes.HasPrefix(rest, []byte(`"`+strings.ReplaceAll(method, "/", `\/`)+`"`))) {
			return true
		}
	}
	return false
}

// ordered are the notifications logOrder keeps ahead of a call's result: log messages
// and progress notifications, which the SDK hands to their handlers alike.
var ordered = map[string]bool{"notifications/message": true, "notifications/progress": true}
