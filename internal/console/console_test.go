package console

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const prefix = "/console/"

var testConfig = Config{TraceURL: "https://jaeger.example/trace/{trace_id}", Tenancy: true}

// get serves one request to a console under prefix.
func get(t *testing.T, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for k, vs := range header {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	Handler(prefix, testConfig).ServeHTTP(w, r)
	return w
}

// checkSecurityHeaders fails unless a response carries every security header.
func checkSecurityHeaders(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	for _, kv := range securityHeaders {
		if got := w.Header().Get(kv[0]); got != kv[1] {
			t.Errorf("%s = %q, want %q", kv[0], got, kv[1])
		}
	}
}

func embedded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServesEachFileWithItsType(t *testing.T) {
	for _, tc := range []struct{ path, file, ctype string }{
		{"/console/", "index.html", "text/html; charset=utf-8"},
		{"/console/index.html", "index.html", "text/html; charset=utf-8"},
		{"/console/app.js", "app.js", "text/javascript; charset=utf-8"},
		{"/console/api.js", "api.js", "text/javascript; charset=utf-8"},
		{"/console/style.css", "style.css", "text/css; charset=utf-8"},
		{"/console/favicon.svg", "favicon.svg", "image/svg+xml"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			w := get(t, http.MethodGet, tc.path, nil)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d", w.Code)
			}
			if got := w.Header().Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type = %q, want %q", got, tc.ctype)
			}
			if !bytes.Equal(w.Body.Bytes(), embedded(t, tc.file)) {
				t.Errorf("the body is not %s", tc.file)
			}
			if w.Header().Get("ETag") == "" {
				t.Error("no ETag")
			}
			checkSecurityHeaders(t, w)
		})
	}
}

// TestServesEveryAsset: every embedded file is reachable with a known type.
func TestServesEveryAsset(t *testing.T) {
	n := 0
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		name := strings.TrimPrefix(p, "assets/")
		w := get(t, http.MethodGet, prefix+name, nil)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != contentTypes[path.Ext(name)] || contentTypes[path.Ext(name)] == "" {
			t.Errorf("%s: status %d, Content-Type %q", name, w.Code, w.Header().Get("Content-Type"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Errorf("only %d files embedded", n)
	}
}

func TestConfigJSON(t *testing.T) {
	for _, cfg := range []Config{testConfig, {}} {
		w := httptest.NewRecorder()
		Handler("/console/", cfg).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/config.json", nil))
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
		}
		checkSecurityHeaders(t, w)
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"traceUrl": cfg.TraceURL, "tenancy": cfg.Tenancy}
		if len(got) != len(want) || got["traceUrl"] != want["traceUrl"] || got["tenancy"] != want["tenancy"] {
			t.Errorf("config.json = %v, want %v", got, want)
		}
	}
}

func TestUnknownPathsAreNotFound(t *testing.T) {
	for _, target := range []string{
		"/console/nope.js",
		"/console/assets/app.js",
		"/console/../go.mod",
		"/console/%2e%2e/x",
		"/console/%2e%2e%2fgo.mod",
		"/console/..%2fconsole.go",
		"/console/./app.js",
		"/console//app.js",
		"/console/app.js/",
		"/console/APP.JS",
		"/console/console.go",
		"/console/console_test.go",
		"/console/config.json/x",
		"/other/app.js",
		"/app.js",
	} {
		w := get(t, http.MethodGet, target, nil)
		if w.Code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", target, w.Code)
		}
		checkSecurityHeaders(t, w)
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		w := get(t, m, "/console/", nil)
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", m, w.Code)
		}
		if got := w.Header().Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s: Allow = %q", m, got)
		}
		checkSecurityHeaders(t, w)
	}
	w := get(t, http.MethodHead, "/console/app.js", nil)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HEAD: status %d, %d bytes of body", w.Code, w.Body.Len())
	}
	if got, want := w.Header().Get("Content-Length"), strconv.Itoa(len(embedded(t, "app.js"))); got != want {
		t.Errorf("HEAD: Content-Length = %q, want %s", got, want)
	}
}

func TestETagRevalidation(t *testing.T) {
	first := get(t, http.MethodGet, "/console/app.js", nil)
	etag := first.Header().Get("ETag")
	if !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(etag) {
		t.Fatalf("ETag %q", etag)
	}
	if other := get(t, http.MethodGet, "/console/style.css", nil).Header().Get("ETag"); other == etag {
		t.Error("two files share an ETag")
	}
	for _, inm := range []string{etag, "W/" + etag, "*", `"x", ` + etag} {
		w := get(t, http.MethodGet, "/console/app.js", http.Header{"If-None-Match": {inm}})
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: status %d, %d bytes", inm, w.Code, w.Body.Len())
		}
		if w.Header().Get("ETag") != etag {
			t.Errorf("If-None-Match %s: ETag %q", inm, w.Header().Get("ETag"))
		}
		checkSecurityHeaders(t, w)
	}
	w := get(t, http.MethodGet, "/console/app.js", http.Header{"If-None-Match": {`"stale"`}})
	if w.Code != http.StatusOK || w.Body.Len() == 0 {
		t.Errorf("a stale ETag: status %d", w.Code)
	}
}

func TestPrefix(t *testing.T) {
	w := get(t, http.MethodGet, "/console", nil)
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/console/" {
		t.Errorf("/console: status %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	for _, p := range []string{"ui", "/ui", "ui/"} {
		w := httptest.NewRecorder()
		Handler(p, Config{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/ui/app.js", nil))
		if w.Code != http.StatusOK {
			t.Errorf("prefix %q: status %d", p, w.Code)
		}
	}
	w = httptest.NewRecorder()
	Handler("/", Config{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("prefix /: status %d", w.Code)
	}
}

// TestMountedOnAMux: behind a ServeMux, as the orchestrator mounts it.
func TestMountedOnAMux(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(prefix, Handler(prefix, testConfig))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for target, want := range map[string]int{"/console/": 200, "/console/run.js": 200, "/console/%2e%2e/x": 404, "/console/nope": 404} {
		res, err := http.Get(srv.URL + target)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: status %d, want %d", target, res.StatusCode, want)
		}
	}
}
