// Package console serves toolmesh's browser console: one page of hand-written static
// files, embedded in the binary, that lists runs, follows a run's events live, answers
// approvals and shows the workers, the tool groups and the tenants' quotas.
//
// The page talks to the orchestrator's own API (toolmesh.v1.OrchestratorService over the
// Connect protocol, JSON) on the origin it was served from, with the user's credentials:
// a bearer token the user types in, kept in the tab's sessionStorage, or the client
// certificate the browser presents. The console holds no secret and authorizes nothing;
// the API checks every call as it checks a gRPC call.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed assets
var assets embed.FS

// Config is what the console's page is told (served as JSON at <prefix>config.json).
type Config struct {
	// TraceURL is a URL template of the operator's tracing UI with the placeholder
	// {trace_id}, e.g. "https://jaeger.example/trace/{trace_id}"; empty: no trace links.
	// The page links only to an http or https URL.
	TraceURL string
	// Tenancy says that the orchestrator has tenants configured (the page then shows
	// tenant columns/filters and the quota panel).
	Tenancy bool
}

// Headers every response of the console carries. The page loads nothing but its own
// files, runs no inline script or style, and calls no origin but its own.
var securityHeaders = [...][2]string{
	{"Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
	{"X-Frame-Options", "DENY"},
	{"Cache-Control", "no-cache"},
}

// contentTypes are the types of the files the console serves, by extension; a file of
// another extension is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
}

// file is one response body the console serves.
type file struct {
	body        []byte
	contentType string
	etag        string
}

func newFile(name string, body []byte) file {
	sum := sha256.Sum256(body)
	return file{body: body, contentType: contentTypes[path.Ext(name)], etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
}

// handler serves the files of the console under a prefix.
type handler struct {
	prefix string
	files  map[string]file // by path under the prefix; "" is the page
}

// Handler serves the console under prefix (e.g. "/console/"): the embedded files, and
// config.json. A prefix without a leading or a trailing slash gets one; the prefix
// without its trailing slash redirects to it, so that the page's relative links resolve.
//
// It answers GET and HEAD only (405 otherwise), serves a file at exactly its path (404
// for anything else: nothing outside the embedded files is reachable), revalidates
// through ETags, and sends security headers with every response: a Content-Security-
// Policy that lets the page load and call only its own origin.
func Handler(prefix string, cfg Config) http.Handler {
	if !strings.HasPrefix(prefix, "/") {
		prefix = "/" + prefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	h := &handler{prefix: prefix, files: map[string]file{}}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.TrimPrefix(p, "assets/")
		if _, ok := contentTypes[path.Ext(name)]; !ok {
			return nil
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		h.files[name] = newFile(name, body)
		return nil
	})
	if err != nil {
		panic("console: reading the embedded files: " + err.Error()) // they are in the binary
	}
	h.files[""] = h.files["index.html"]
	h.files["config.json"] = newFile("config.json", configJSON(cfg))
	return h
}

// configJSON is the page's config.json.
func configJSON(cfg Config) []byte {
	b, err := json.Marshal(struct {
		TraceURL string `json:"traceUrl"`
		Tenancy  bool   `json:"tenancy"`
	}{cfg.TraceURL, cfg.Tenancy})
	if err != nil {
		panic("console: encoding config.json: " + err.Error()) // two plain fields
	}
	return b
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	for _, kv := range securityHeaders {
		hdr.Set(kv[0], kv[1])
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == strings.TrimSuffix(h.prefix, "/") && h.prefix != "/" {
		http.Redirect(w, r, h.prefix, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	f, found := h.files[name]
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	hdr.Set("ETag", f.etag)
	if etagMatches(r.Header.Values("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Type", f.contentType)
	hdr.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(f.body)
	}
}

// etagMatches reports whether If-None-Match values name etag, or are "*": the weak
// comparison RFC 9110 prescribes for If-None-Match.
func etagMatches(values []string, etag string) bool {
	for _, v := range values {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
				return true
			}
		}
	}
	return false
}
