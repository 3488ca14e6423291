package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRESTQueriesTheRulesDoNotTake: a REST request whose query names a field the path
// binds, or that goes to a method whose fields come from its body, is refused naming the
// parameter (the transcoder let it override the path's run and the body's decision); so
// is a query that does not decode or is not UTF-8 (dropped, or an internal error), and a
// GET with a body. The queries the rules take reach the transcoder, names that are no
// field of the request too (the transcoder ignores them), and a ';' reaches it escaped,
// part of its value (Go's parser dropped the pair).
func TestRESTQueriesTheRulesDoNotTake(t *testing.T) {
	for _, tc := range []struct {
		method, target, body string
		field                string // "": reaches the transcoder
	}{
		{"POST", "/v1/runs/harmless:cancel?run_id=victim", "{}", "run_id"},
		{"POST", "/v1/runs/harmless:cancel?reason=why", "{}", "reason"},
		{"POST", "/v1/runs/r/calls/c:approve?decision=APPROVAL_DECISION_DENY", `{"decision":"APPROVAL_DECISION_APPROVE"}`, "decision"},
		{"POST", "/v1/runs/r/calls/c:approve?callId=d", "{}", "callId"},
		{"GET", "/v1/runs/nonexistent?runId=r1", "", "runId"},
		{"GET", "/v1/runs/nonexistent?run_id=r1", "", "run_id"},
		{"GET", "/v1/runs/nonexistent?run_id.x=r1", "", "run_id.x"},
		{"GET", "/v1/runs?agent=50%off", "", "query"},
		{"POST", "/v1/runs/x:cancel?%24alt=json%3Benum-encoding%3Dint", "{}", ""}, // no field of the request
		{"POST", "/v1/runs/x:cancel?_=123", "{}", ""},
		{"GET", "/v1/runs?$alt=json;enum-encoding=int", "", ""},
		{"GET", "/v1/runs?agent=%ff", "", "query"},
		{"GET", "/v1/tools?tool_groups=%ff", "", "query"},
		{"GET", "/v1/runs", "{}", "body"},
		{"GET", "/v1/runs?state=RUN_STATE_RUNNING&page_size=5", "", ""},
		{"GET", "/v1/runs?state=2&pageSize=-5&started_after=2026-01-02T15:04:05.5%2B01:00&startedBefore=2026-01-02T15:04:05Z", "", ""},
		// A value the transcoder does not read: its refusal named the parameter in its
		// message only, the value cut short.
		{"GET", "/v1/runs?page_size=abc", "", "page_size"},
		{"GET", "/v1/runs?pageSize=99999999999", "", "pageSize"},
		{"GET", "/v1/runs?state=RUNNING", "", "state"},
		{"GET", "/v1/runs?started_after=garbage-garbage-garbage-garbage-garbage", "", "started_after"},
		{"GET", "/v1/runs?startedBefore=2026-01-02", "", "startedBefore"},
		{"GET", "/v1/runs?agent=a&agent=b", "", "agent"},
		{"GET", "/v1/runs?page_size=1&pageSize=500", "", "page_size"},        // one field under both its names
		{"GET", "/v1/runs?started_after=%222026-01-02T15:04:05Z%22", "", ""}, // quoted already, as the transcoder takes it
		{"GET", "/v1/runs/r1?unknown=1", "", ""},
		{"POST", "/v1/runs/harmless:cancel", "{}", ""},
		{"POST", "/toolmesh.v1.OrchestratorService/CancelRun?run_id=x", "{}", ""}, // Connect's: the transcoder's
		{"GET", "/v1/nowhere?run_id=x", "", ""},                                   // no rule: the transcoder's 404
	} {
		reached := false
		h := restPaths(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
		w := httptest.NewRecorder()
		var body *strings.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if body != nil {
			r = httptest.NewRequest(tc.method, tc.target, body)
		}
		h.ServeHTTP(w, r)
		switch {
		case tc.field == "" && !reached:
			t.Errorf("%s %s: refused (HTTP %d %s); want it to reach the transcoder", tc.method, tc.target, w.Code, w.Body)
		case tc.field != "" && (reached || w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"field":"`+tc.field+`"`)):
			t.Errorf("%s %s: reached the transcoder %v, HTTP %d %s; want 400 naming %s", tc.method, tc.target, reached, w.Code, w.Body, tc.field)
		}
	}
}

func TestRESTQuerySemicolonsAreValues(t *testing.T) {
	var got string
	h := restPaths(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.URL.Query().Get("agent") }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/runs?agent=a;b", nil))
	if got != "a;b" {
		t.Errorf("the transcoder read agent %q; want the value as sent, a;b", got)
	}
	// A filter with one is refused as the value it is, not dropped.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/runs?state=RUN_STATE_RUNNING;", nil))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `RUN_STATE_RUNNING;`) {
		t.Errorf("state=RUN_STATE_RUNNING;: HTTP %d %s, want 400 naming the value", w.Code, w.Body)
	}
}
