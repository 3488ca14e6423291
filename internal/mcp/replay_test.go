package mcp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// droppingServer serves s over HTTP and closes, without an answer, the connection of
// the next POST of a method (and tool) once told, if the connection served a request
// before: the server read the request and never handled it, as when it drops a
// connection the client had just sent on again (net/http sends a request that fails
// on a fresh connection again in no case). It counts the calls each tool's handler ran.
type droppingServer struct {
	url     string
	tls     *tls.Config  // the client's, trusting the server (HTTP/2)
	protos  atomic.Int32 // the highest HTTP major version a request came in
	mu      sync.Mutex
	drop    map[string]bool // "tools/call lookup", "tools/list": drop the next such POST
	dropped map[string]int
	ran     map[string]*atomic.Int32
}

// connKey is the context key of the request count of the connection a request came on.
type connKey struct{}

func startDroppingServer(t *testing.T, h2 bool) *droppingServer {
	t.Helper()
	d := &droppingServer{drop: map[string]bool{}, dropped: map[string]int{}, ran: map[string]*atomic.Int32{}}
	s := sdk.NewServer(&sdk.Implementation{Name: "dropping", Version: "v1"}, nil)
	for _, tl := range []*sdk.Tool{
		{Name: "lookup", Description: "Reads.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "set", Description: "Sets, idempotently.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		{Name: "charge", Description: "Charges: not to be repeated."},
	} {
		n := &atomic.Int32{}
		d.ran[tl.Name] = n
		sdk.AddTool(s, tl, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			n.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
		})
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served := r.Context().Value(connKey{}).(*atomic.Int32).Add(1) - 1
		if p := int32(r.ProtoMajor); p > d.protos.Load() {
			d.protos.Store(p)
		}
		if r.Method == http.MethodPost && served > 0 {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			_ = json.Unmarshal(body, &m)
			key := strings.TrimSpace(m.Method + " " + m.Params.Name)
			d.mu.Lock()
			dropIt := d.drop[key]
			if dropIt {
				d.drop[key] = false
				d.dropped[key]++
			}
			d.mu.Unlock()
			if dropIt {
				// HTTP/1.1: the connection is closed; HTTP/2: the stream is reset.
				panic(http.ErrAbortHandler)
			}
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &atomic.Int32{})
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the aborted handlers
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		d.tls = &tls.Config{RootCAs: pool}
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

// dropping arms a drop of the next POST of key, runs do, and says whether the POST was
// dropped (it came on a connection that served before); the drop is disarmed either way.
func (d *droppingServer) dropping(key string, do func()) bool {
	d.mu.Lock()
	d.drop[key] = true
	before := d.dropped[key]
	d.mu.Unlock()
	do()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop[key] = false
	return d.dropped[key] > before
}

// A request dropped by the server before it handled it is sent again when it is safe
// to repeat: listing the tools, calling a tool the server calls read-only or
// idempotent. A call of another tool fails, unrun, rather than risk running twice.
// net/http sends no POST again on its own: each of them failed with EOF, a tools/list
// leaving the group's tools unknown for its backoff.
func TestRequestsSafeToRepeatAreSentAgainAfterADrop(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) { sentAgainAfterADrop(t, h2) })
	}
}

func sentAgainAfterADrop(t *testing.T, h2 bool) {
	d := startDroppingServer(t, h2)
	defer func() {
		if want := map[bool]int32{false: 1, true: 2}[h2]; d.protos.Load() != want {
			t.Errorf("the requests came in HTTP/%d; want HTTP/%d", d.protos.Load(), want)
		}
	}()
	g := newGroup(t, mcp.Options{Server: mcp.Server{Name: "d", URL: d.url, TLS: d.tls}})
	ctx := testCtx(t)
	const tries = 50 // calls until one goes out on a connection that served before
	for _, name := range []string{"lookup", "set", "charge"} {
		tl := byName(t, g, name)
		drops := 0
		for range tries {
			ran := d.ran[name].Load()
			var res tool.Result
			if !d.dropping("tools/call "+name, func() { res = call(t, ctx, tl, `{}`) }) {
				continue
			}
			drops++
			switch got := d.ran[name].Load() - ran; {
			case name != "charge" && (res.IsError() || res.Content != "done" || got != 1):
				t.Errorf("%s, its request dropped: %+v (ran %d times); want it sent again, run once and answered", name, res, got)
			case name == "charge" && (!res.IsError() || got != 0):
				t.Errorf("charge, its request dropped: %+v (ran %d times); want an error, and no request sent again", res, got)
			}
			break
		}
		if drops == 0 {
			t.Errorf("no call of %s in %d went out on a connection that served before", name, tries)
		}
	}
	// A new session's list of the tools, dropped, is sent again.
	for i := range tries {
		var ts []tool.Tool
		var err error
		if d.dropping("tools/list", func() {
			ts, err = newGroup(t, mcp.Options{Server: mcp.Server{Name: fmt.Sprint("s", i), URL: d.url, TLS: d.tls}}).Tools(ctx)
		}) {
			if err != nil || len(ts) != 3 {
				t.Errorf("the tools of a session whose tools/list was dropped: %d, %v; want the list sent again", len(ts), err)
			}
			return
		}
	}
	t.Errorf("no tools/list in %d sessions went out on a connection that served before", tries)
}
