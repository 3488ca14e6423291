package orchestrator

import (
	"net/http"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// restPaths hands the transcoder each request's path as the client escaped it.
//
// The transcoder matches the API's REST paths (GET /v1/runs/{run_id}, POST
// /v1/runs/{run_id}:cancel, ...) against the path Go's server has decoded already, and
// decodes each variable again. A run id with a '/' (sent as %2F) then read as two
// segments, one with a ':' (%3A) as a custom verb, one with a '%' (%25) failed its
// second decoding: each was a bare 404 with no status, for a run that exists. Given the
// escaped path, the transcoder splits it at the client's own slashes and decodes each
// variable once.
//
// A ':' the client left unescaped in the last segment separates a verb only before a
// verb of the API (cancel, approve): GET /v1/runs/team:42 reads run team:42, and POST
// /v1/runs/team:42:cancel cancels it. An id that ends in ":cancel" itself must be sent
// escaped, as the API's path rules ask of every reserved character in a variable.
func restPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := escapedRESTPath(r.URL.EscapedPath()); p != r.URL.Path {
			u := *r.URL
			u.Path, u.RawPath = p, ""
			r2 := *r
			r2.URL = &u
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// escapedRESTPath is the escaped path p with each ':' of its last segment escaped but
// the one before a verb of the API.
func escapedRESTPath(p string) string {
	slash := strings.LastIndexByte(p, '/')
	last := p[slash+1:]
	colon := strings.LastIndexByte(last, ':')
	if colon < 0 {
		return p
	}
	id, verb := last[:colon], ""
	if restVerbs()[last[colon+1:]] {
		verb = last[colon:]
	} else {
		id = last
	}
	if !strings.Contains(id, ":") {
		return p
	}
	return p[:slash+1] + strings.ReplaceAll(id, ":", "%3A") + verb
}

// restVerbs are the custom verbs of the API's REST paths (the part after the last ':'
// of a path rule), read from its annotations.
var restVerbs = sync.OnceValue(func() map[string]bool {
	verbs := map[string]bool{}
	methods := toolpb.File_toolmesh_v1_orchestrator_proto.Services().ByName("OrchestratorService").Methods()
	for i := range methods.Len() {
		rule, _ := proto.GetExtension(methods.Get(i).Options(), annotations.E_Http).(*annotations.HttpRule)
		for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
			for _, path := range []string{r.GetGet(), r.GetPost(), r.GetPut(), r.GetPatch(), r.GetDelete(), r.GetCustom().GetPath()} {
				last := path[strings.LastIndexByte(path, '/')+1:]
				if c := strings.LastIndexByte(last, ':'); c >= 0 && !strings.Contains(last[c:], "}") {
					verbs[last[c+1:]] = true
				}
			}
		}
	}
	return verbs
})
