package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// webClient calls the orchestrator's port over HTTP/1.1, as a browser or curl does.
type webClient struct {
	base, token string
}

// do sends method path with body (nil: none) and content type, and returns the status,
// the response's headers and its body.
func (w webClient) do(ctx context.Context, t *testing.T, method, path, contentType string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if strings.HasPrefix(path, "/toolmesh.v1.") && (contentType == "application/json" || strings.HasPrefix(contentType, "application/connect")) {
		req.Header.Set("Connect-Protocol-Version", "1") // a Connect call; REST sends none
	}
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	if resp.ProtoMajor != 1 {
		t.Errorf("%s %s answered over HTTP/%d, want HTTP/1.1", method, path, resp.ProtoMajor)
	}
	return resp.StatusCode, resp.Header, b
}

// envelope is one message of a streaming Connect or gRPC-Web body.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// envelopes splits a streaming body into its messages and their flags.
func envelopes(t *testing.T, b []byte) (flags []byte, msgs [][]byte) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a torn envelope: %q", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if int(n) > len(b)-5 {
			t.Fatalf("an envelope of %d bytes in %d", n, len(b)-5)
		}
		flags, msgs = append(flags, b[0]), append(msgs, b[5:5+n])
		b = b[5+n:]
	}
	return flags, msgs
}

// TestWebProtocols: the orchestrator's port serves OrchestratorService to HTTP/1.1
// clients over REST with JSON, the Connect protocol (unary and streaming, JSON) and
// gRPC-Web, beside gRPC, with the same tenants: a run acme started over Connect is
// watched over gRPC-Web and Connect, read and listed over REST and Connect, and
// cancelled over REST; globex sees none of it, and a call without a token is refused as
// it is over gRPC.
func TestWebProtocols(t *testing.T) {
	tm := startTenantsMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := "http://" + tm.m.orch.Addr
	acme := webClient{base: base, token: tm.sign.tenantToken(t, "acme")}
	globex := webClient{base: base, token: tm.sign.tenantToken(t, "globex")}
	events := webConnectRun(ctx, t, acme)
	t.Run("gRPC-Web", func(t *testing.T) { checkWebGRPCWeb(ctx, t, acme, events) })
	t.Run("REST and Connect unary", func(t *testing.T) { checkWebUnary(ctx, t, acme) })
	t.Run("filters, facts and quotas", func(t *testing.T) { checkWebListings(ctx, t, acme, globex) })
	t.Run("tenants", func(t *testing.T) { checkWebTenants(ctx, t, globex, webClient{base: base}) })
	t.Run("cross-site requests", func(t *testing.T) { checkWebCrossSite(ctx, t, acme) })
	t.Run("curl", func(t *testing.T) { checkWebCurl(ctx, t, acme) })
	t.Run("ids with reserved characters", func(t *testing.T) { checkWebEscapedIDs(ctx, t, acme) })
	t.Run("Connect without its version header", func(t *testing.T) { checkWebConnectWithoutVersion(ctx, t, acme) })
}

// checkWebConnectWithoutVersion makes a Connect unary call without the
// Connect-Protocol-Version header, as Connect's servers allow and its curl examples do:
// it is served (the transcoder took it for REST: a bare 404).
func checkWebConnectWithoutVersion(ctx context.Context, t *testing.T, acme webClient) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, acme.base+"/toolmesh.v1.OrchestratorService/ListRuns", strings.NewReader(`{"pageSize": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+acme.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	listed := &toolpb.ListRunsResponse{}
	if resp.StatusCode != http.StatusOK || protojson.Unmarshal(body, listed) != nil {
		t.Errorf("Connect ListRuns without Connect-Protocol-Version: HTTP %d %s; want the runs", resp.StatusCode, body)
	}
}

// checkWebEscapedIDs reads and cancels over REST a run whose id has colons, sent escaped
// (%3A) as the API's path rules ask of a variable, and unescaped, as curl users write
// it; an id with a '/' (%2F), which no run may have, is refused naming the field, where
// the transcoder answered all of them with a bare 404; one that is not UTF-8 is refused
// naming the path, where it was an internal error.
func checkWebEscapedIDs(ctx context.Context, t *testing.T, acme webClient) {
	t.Helper()
	const id = "team:job-7.x"
	req, _ := protojson.Marshal(&toolpb.RunRequest{RunId: id, Prompt: "echo", ToolGroups: []string{"echo_acme"}})
	code, _, body := acme.do(ctx, t, http.MethodPost, "/toolmesh.v1.OrchestratorService/Run", "application/connect+json", envelope(0, req))
	if _, msgs := envelopes(t, body); code != http.StatusOK || strings.TrimSpace(string(msgs[len(msgs)-1])) != "{}" {
		t.Fatalf("Connect Run of %q: HTTP %d %s", id, code, body)
	}
	for _, path := range []string{"/v1/runs/team%3Ajob-7.x", "/v1/runs/team:job-7.x"} {
		code, _, body := acme.do(ctx, t, http.MethodGet, path, "", nil)
		got := &toolpb.GetRunResponse{}
		if code != http.StatusOK || protojson.Unmarshal(body, got) != nil || got.GetRunId() != id {
			t.Errorf("REST GET %s: HTTP %d %s; want run %q", path, code, body, id)
		}
	}
	for _, path := range []string{"/v1/runs/team%3Ajob-7.x:cancel", "/v1/runs/team:job-7.x:cancel"} {
		if code, _, body := acme.do(ctx, t, http.MethodPost, path, "application/json", []byte(`{}`)); code != http.StatusOK || !strings.Contains(string(body), "RUN_STATE_SUCCEEDED") {
			t.Errorf("REST POST %s: HTTP %d %s; want the finished run's state", path, code, body)
		}
	}
	code, _, body = acme.do(ctx, t, http.MethodGet, "/v1/runs/team%2Fjob", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"run_id"`) || !strings.Contains(string(body), `team/job`) {
		t.Errorf("REST GET of an id with a '/': HTTP %d %s; want INVALID_ARGUMENT naming run_id", code, body)
	}
	// A query parameter does not override the path's run, nor a body's field.
	code, _, body = acme.do(ctx, t, http.MethodPost, "/v1/runs/no-such-run:cancel?run_id=team:job-7.x", "application/json", []byte(`{}`))
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"run_id"`) {
		t.Errorf("REST cancel with a run_id in the query: HTTP %d %s; want INVALID_ARGUMENT naming run_id", code, body)
	}
	code, _, body = acme.do(ctx, t, http.MethodGet, "/v1/runs?agent=50%off", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"query"`) {
		t.Errorf("REST list with a query that does not decode: HTTP %d %s; want INVALID_ARGUMENT naming the query", code, body)
	}
	code, _, body = acme.do(ctx, t, http.MethodGet, "/v1/runs/%FF", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"path"`) {
		t.Errorf("REST GET of an id that is not UTF-8: HTTP %d %s; want INVALID_ARGUMENT naming the path", code, body)
	}
}

// webConnectRun starts the run web-1 over Connect (JSON envelopes) and returns its events.
func webConnectRun(ctx context.Context, t *testing.T, acme webClient) []*toolpb.RunResponse {
	t.Helper()
	// A run started over Connect, streaming its events (JSON envelopes).
	req, _ := protojson.Marshal(&toolpb.RunRequest{RunId: "web-1", Prompt: "echo", ToolGroups: []string{"echo_acme"}})
	code, hdr, body := acme.do(ctx, t, http.MethodPost, "/toolmesh.v1.OrchestratorService/Run", "application/connect+json", envelope(0, req))
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Connect Run: HTTP %d %s %s", code, hdr.Get("Content-Type"), body)
	}
	flags, msgs := envelopes(t, body)
	if len(msgs) < 3 || flags[len(flags)-1] != 2 || strings.TrimSpace(string(msgs[len(msgs)-1])) != "{}" {
		t.Fatalf("Connect Run: %d messages, the last %q with flags %v; want events, then a clean end", len(msgs), msgs[len(msgs)-1], flags)
	}
	var connectEvents []*toolpb.RunResponse
	for _, m := range msgs[:len(msgs)-1] {
		ev := &toolpb.RunResponse{}
		if err := protojson.Unmarshal(m, ev); err != nil {
			t.Fatalf("Connect Run event %s: %v", m, err)
		}
		connectEvents = append(connectEvents, ev)
	}
	last := connectEvents[len(connectEvents)-1]
	if last.GetFinalResult() == nil || last.GetRunId() != "web-1" {
		t.Fatalf("the last Connect event %v, want web-1's final result", last)
	}

	return connectEvents
}

// checkWebGRPCWeb checks that web-1's events over gRPC-Web (binary), from the journal,
// are those Connect streamed, with the same sequence numbers.
func checkWebGRPCWeb(ctx context.Context, t *testing.T, acme webClient, connectEvents []*toolpb.RunResponse) {
	t.Helper()
	// The same events over gRPC-Web (binary), from the journal: same sequence numbers.
	wreq, _ := proto.Marshal(&toolpb.WatchRunRequest{RunId: "web-1"})
	code, hdr, body := acme.do(ctx, t, http.MethodPost, "/toolmesh.v1.OrchestratorService/WatchRun", "application/grpc-web+proto", envelope(0, wreq))
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/grpc-web") {
		t.Fatalf("gRPC-Web WatchRun: HTTP %d %s %q", code, hdr.Get("Content-Type"), body)
	}
	flags, msgs := envelopes(t, body)
	if len(msgs) != len(connectEvents)+1 || flags[len(flags)-1]&0x80 == 0 || !strings.Contains(strings.ToLower(string(msgs[len(msgs)-1])), "grpc-status: 0") {
		t.Fatalf("gRPC-Web WatchRun: %d messages (want %d and trailers), trailers %q", len(msgs), len(connectEvents)+1, msgs[len(msgs)-1])
	}
	for i, m := range msgs[:len(msgs)-1] {
		ev := &toolpb.RunResponse{}
		if err := proto.Unmarshal(m, ev); err != nil {
			t.Fatal(err)
		}
		if ev.GetSequence() != connectEvents[i].GetSequence() || fmt.Sprint(ev.GetEvent()) != fmt.Sprint(connectEvents[i].GetEvent()) {
			t.Errorf("gRPC-Web event %d: %v, over Connect %v", i, ev, connectEvents[i])
		}
	}

}

// checkWebUnary reads web-1 and lists acme's runs over REST and Connect.
func checkWebUnary(ctx context.Context, t *testing.T, acme webClient) {
	t.Helper()
	// REST: the run, then acme's runs.
	code, _, body := acme.do(ctx, t, http.MethodGet, "/v1/runs/web-1", "", nil)
	got := &toolpb.GetRunResponse{}
	if code != http.StatusOK || protojson.Unmarshal(body, got) != nil || got.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || got.GetTenant() != "acme" {
		t.Errorf("REST GET /v1/runs/web-1: HTTP %d %s", code, body)
	}
	code, _, body = acme.do(ctx, t, http.MethodGet, "/v1/runs?page_size=50", "", nil)
	listed := &toolpb.ListRunsResponse{}
	if code != http.StatusOK || protojson.Unmarshal(body, listed) != nil || !hasRun(listed, "web-1") {
		t.Errorf("REST GET /v1/runs: HTTP %d %s; want web-1 listed", code, body)
	}
	// Connect unary (JSON): the same list.
	code, _, body = acme.do(ctx, t, http.MethodPost, "/toolmesh.v1.OrchestratorService/ListRuns", "application/json", []byte(`{"pageSize": 50, "state": "RUN_STATE_SUCCEEDED"}`))
	if code != http.StatusOK || protojson.Unmarshal(body, listed) != nil || !hasRun(listed, "web-1") {
		t.Errorf("Connect ListRuns: HTTP %d %s; want web-1 listed", code, body)
	}

	// REST cancel of the finished run reports its state.
	code, _, body = acme.do(ctx, t, http.MethodPost, "/v1/runs/web-1:cancel", "application/json", []byte(`{"reason":"done anyway"}`))
	if code != http.StatusOK || !strings.Contains(string(body), "RUN_STATE_SUCCEEDED") {
		t.Errorf("REST cancel: HTTP %d %s", code, body)
	}

}

// checkWebListings checks ListRuns' start-time and agent filters, the facts GetRun
// reports of a run (model, tenant) and ListTenants, each tenant seeing its own quota line.
func checkWebListings(ctx context.Context, t *testing.T, acme, globex webClient) {
	t.Helper()
	code, _, body := acme.do(ctx, t, http.MethodGet, "/v1/runs/web-1", "", nil)
	got := &toolpb.GetRunResponse{}
	if code != http.StatusOK || protojson.Unmarshal(body, got) != nil || got.GetModel() == "" || got.GetTenant() != "acme" || got.GetAgent() != "" {
		t.Errorf("GetRun's facts: HTTP %d %s; want a model, tenant acme, no agent", code, body)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		query  string
		listed bool
	}{
		{"started_before=" + future, true},
		{"started_after=" + future, false},
		{"agent=nobody", false},
	} {
		code, _, body := acme.do(ctx, t, http.MethodGet, "/v1/runs?"+tc.query, "", nil)
		page := &toolpb.ListRunsResponse{}
		if code != http.StatusOK || protojson.Unmarshal(body, page) != nil || hasRun(page, "web-1") != tc.listed {
			t.Errorf("ListRuns %s: HTTP %d %s; want web-1 listed %v", tc.query, code, body, tc.listed)
		}
		for _, r := range page.GetRuns() {
			if r.GetTenant() != "acme" {
				t.Errorf("ListRuns %s lists %s of tenant %q", tc.query, r.GetRunId(), r.GetTenant())
			}
		}
	}
	for _, tc := range []struct {
		c    webClient
		want *toolpb.TenantUsage
	}{
		{acme, &toolpb.TenantUsage{Tenant: "acme"}},
		{globex, &toolpb.TenantUsage{Tenant: "globex", MaxConcurrentRuns: 2, ToolCallsPerMinute: 2}},
	} {
		code, _, body := tc.c.do(ctx, t, http.MethodGet, "/v1/tenants", "", nil)
		resp := &toolpb.ListTenantsResponse{}
		if code != http.StatusOK || protojson.Unmarshal(body, resp) != nil || len(resp.GetTenants()) != 1 {
			t.Fatalf("ListTenants as %s: HTTP %d %s; want its own line", tc.want.GetTenant(), code, body)
		}
		u := resp.GetTenants()[0]
		u.ToolCallsAvailable, u.RunningRuns = 0, 0 // they move with the other subtests
		if !proto.Equal(u, tc.want) {
			t.Errorf("ListTenants as %s: %v, want %v", tc.want.GetTenant(), u, tc.want)
		}
	}
}

// checkWebTenants checks that globex sees nothing of acme's run over any protocol, and
// that a call without a token is refused, a bad request naming its field.
func checkWebTenants(ctx context.Context, t *testing.T, globex, anonymous webClient) {
	t.Helper()
	// Another tenant sees nothing of it, over any protocol; no token is no entry.
	if code, _, body := globex.do(ctx, t, http.MethodGet, "/v1/runs/web-1", "", nil); code != http.StatusNotFound {
		t.Errorf("globex's REST GET of acme's run: HTTP %d %s, want 404", code, body)
	}
	if code, _, body := globex.do(ctx, t, http.MethodGet, "/v1/runs", "", nil); code != http.StatusOK || strings.Contains(string(body), "web-1") {
		t.Errorf("globex's REST list: HTTP %d %s; want acme's run left out", code, body)
	}
	if code, _, body := globex.do(ctx, t, http.MethodGet, "/v1/runs?tenant=acme", "", nil); code != http.StatusForbidden {
		t.Errorf("globex listing acme's runs: HTTP %d %s, want 403", code, body)
	}
	code, hdr, body := anonymous.do(ctx, t, http.MethodPost, "/toolmesh.v1.OrchestratorService/GetRun", "application/json", []byte(`{"runId":"web-1"}`))
	var cerr struct{ Code, Message string }
	if code != http.StatusUnauthorized || json.Unmarshal(body, &cerr) != nil || cerr.Code != "unauthenticated" {
		t.Errorf("Connect GetRun without a token: HTTP %d %s, want 401 unauthenticated", code, body)
	}
	if c := hdr.Get("WWW-Authenticate"); !strings.HasPrefix(c, "Bearer ") {
		t.Errorf("Connect GetRun without a token: WWW-Authenticate %q; a 401 challenges for a bearer token", c)
	}
	if code, hdr, body := anonymous.do(ctx, t, http.MethodGet, "/v1/runs/web-1", "", nil); code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer ") {
		t.Errorf("REST GET without a token: HTTP %d, WWW-Authenticate %q %s; want 401 with a bearer challenge", code, hdr.Get("WWW-Authenticate"), body)
	}
	// A bad request names its field, as over gRPC.
	code, _, body = globex.do(ctx, t, http.MethodGet, "/v1/runs?page_size=5000", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "page_size") {
		t.Errorf("REST list with page_size 5000: HTTP %d %s, want 400 naming page_size", code, body)
	}

}

// checkWebCrossSite checks that a browser's request another site's page made is refused.
func checkWebCrossSite(ctx context.Context, t *testing.T, acme webClient) {
	t.Helper()
	base := acme.base
	// A browser's request that another site's page made is refused (a client certificate
	// or cookie would go with it); one of the orchestrator's own pages passes.
	for _, tc := range []struct {
		header, value string
		want          int
	}{
		{"Origin", "https://evil.example", http.StatusForbidden},
		{"Origin", "null", http.StatusForbidden},
		{"Sec-Fetch-Site", "cross-site", http.StatusForbidden},
		{"Origin", base, http.StatusOK},
		{"Sec-Fetch-Site", "same-origin", http.StatusOK},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/runs/web-1:cancel", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+acme.token)
		req.Header.Set(tc.header, tc.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a cancel with %s: %s answered %d, want %d", tc.header, tc.value, resp.StatusCode, tc.want)
		}
	}

}

// checkWebCurl reads web-1 with curl, as the README shows it.
func checkWebCurl(ctx context.Context, t *testing.T, acme webClient) {
	t.Helper()
	base := acme.base
	// curl, as the README shows it.
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail-with-body", "-H", "Authorization: Bearer "+acme.token, base+"/v1/runs/web-1").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"RUN_STATE_SUCCEEDED"`) {
			t.Errorf("curl GET /v1/runs/web-1: %v %s", err, out)
		}
	} else {
		t.Log("no curl on this machine: the curl call is left out")
	}
}

// hasRun reports whether a page lists run id.
func hasRun(page *toolpb.ListRunsResponse, id string) bool {
	for _, r := range page.GetRuns() {
		if r.GetRunId() == id {
			return true
		}
	}
	return false
}

// TestWebApprovalFlow: the console's flow without a browser — a run started over
// Connect streams its events as they happen; the call waiting for approval is approved
// over REST by acme (globex's attempt is refused as if the run did not exist); the
// stream then carries the decision, with who decided, and the answer.
func TestWebApprovalFlow(t *testing.T) {
	cm := startConsoleMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := "http://" + cm.m.orch.Addr
	acme, globex := webClient{base: base, token: cm.acmeToken}, webClient{base: base, token: cm.globexToken}
	req, _ := protojson.Marshal(&toolpb.RunRequest{RunId: "web-approve", Prompt: consolePrompt, Tools: []string{"add"}})
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/toolmesh.v1.OrchestratorService/Run", bytes.NewReader(envelope(0, req)))
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Protocol-Version", "1")
	hreq.Header.Set("Authorization", "Bearer "+acme.token)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var decided *toolpb.ApprovalDecided
	var final string
	for {
		var head [5]byte
		if _, err := io.ReadFull(resp.Body, head[:]); err != nil {
			t.Fatalf("the stream ended before its end message: %v", err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatal(err)
		}
		if head[0]&2 != 0 {
			if strings.TrimSpace(string(msg)) != "{}" {
				t.Errorf("the stream ended with %s", msg)
			}
			break
		}
		ev := &toolpb.RunResponse{}
		if err := protojson.Unmarshal(msg, ev); err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.GetApprovalRequested() != nil:
			a := ev.GetApprovalRequested()
			path := fmt.Sprintf("/v1/runs/web-approve/calls/%s:approve", a.GetCallId())
			body := []byte(`{"decision":"APPROVAL_DECISION_APPROVE","reason":"fine"}`)
			if code, _, b := globex.do(ctx, t, http.MethodPost, path, "application/json", body); code != http.StatusNotFound {
				t.Errorf("globex approving acme's call: HTTP %d %s, want 404", code, b)
			}
			if code, _, b := acme.do(ctx, t, http.MethodPost, path, "application/json", body); code != http.StatusOK {
				t.Fatalf("acme approving over REST: HTTP %d %s", code, b)
			}
		case ev.GetApprovalDecided() != nil:
			decided = ev.GetApprovalDecided()
		case ev.GetFinalResult() != nil:
			final = ev.GetFinalResult().GetText()
		}
	}
	if decided == nil || !decided.GetApproved() || decided.GetDecidedBy() != "https://issuer.test#user-1" || decided.GetReason() != "fine" {
		t.Errorf("the decision %v; want approved by acme's token's subject", decided)
	}
	if final != consoleAnswer {
		t.Errorf("the answer %q, want %q", final, consoleAnswer)
	}
}
