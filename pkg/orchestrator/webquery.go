package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// restRequestError is why a REST request (its escaped path p) is refused before the
// transcoder reads it, or nil. The transcoder takes query parameters for any field, last:
// one naming a field the path binds (POST /v1/runs/a:cancel?run_id=b cancelled run b),
// or sent to a method whose fields all come from its body (?decision=... overrode the
// body's decision of an approval), replaced what the path or the body said, so that a
// proxy that allows by path allowed something else. The API's path rules take neither,
// and here neither is taken. A query that does not decode, which Go's parser drops
// without a word (a filter lost lists everything), or that is not UTF-8 text (an
// internal error in the transcoder), and a GET with a body (an internal error too) are
// bad requests naming what is wrong.
//
// The body gate has read the body by then: a GET's ContentLength is what it held.
func restRequestError(r *http.Request, p string) *connect.Error {
	if r.Method == http.MethodGet && r.ContentLength > 0 {
		return invalidRequest("body", errors.New("body: a GET takes no body: its fields are the path's and the query's"))
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalidRequest("query", fmt.Errorf("query: the query string does not decode: %w", err))
	}
	rule, ok := matchRESTRule(r.Method, p)
	given := map[string]string{} // the parameter that gave each field of the query, by the field's proto name
	for _, name := range slices.Sorted(maps.Keys(query)) {
		if !utf8.ValidString(name) || slices.ContainsFunc(query[name], func(v string) bool { return !utf8.ValidString(v) }) {
			return invalidRequest("query", fmt.Errorf("query: the parameter %q is not UTF-8 text", strings.ToValidUTF8(name, "\uFFFD")))
		}
		// A name that is no field of the request (a cache buster, $alt) is the
		// transcoder's to ignore.
		field, _, _ := strings.Cut(name, ".")
		switch {
		case !ok || !slices.Contains(rule.fields, field):
		case rule.body:
			return invalidRequest(name, fmt.Errorf("%s: %s %s takes its fields from the body, not the query", name, r.Method, rule.path))
		case slices.Contains(rule.vars, field):
			return invalidRequest(name, fmt.Errorf("%s: is the path's (%s), not the query's", name, rule.path))
		case field == name:
			if err := queryValueError(rule.input.Fields(), name, query[name]); err != nil {
				return invalidRequest(name, err)
			}
			if f := fieldOf(rule.input.Fields(), name); f != nil && !f.IsList() {
				// Under both its names (page_size, pageSize) a field is given twice:
				// the transcoder took either, as its map's order had it.
				if other, twice := given[string(f.Name())]; twice {
					return invalidRequest(name, fmt.Errorf("%s: is given as %s too; it takes one value", name, other))
				}
				given[string(f.Name())] = name
			}
		}
	}
	return nil
}

// fieldOf is the field of fields a query parameter names, by its proto or its JSON name.
func fieldOf(fields protoreflect.FieldDescriptors, name string) protoreflect.FieldDescriptor {
	if f := fields.ByName(protoreflect.Name(name)); f != nil {
		return f
	}
	return fields.ByJSONName(name)
}

// queryValueError is why values, the query's for the field name of fields, are not ones
// the transcoder reads, or nil: read as it reads them. Its own refusal named the field
// in its message only, with the value cut short; this one is a bad request as a body's
// field is, naming the parameter. Kinds the API's queries do not have are left to it.
func queryValueError(fields protoreflect.FieldDescriptors, name string, values []string) error {
	f := fieldOf(fields, name)
	if f == nil {
		return nil
	}
	if len(values) > 1 && !f.IsList() {
		return fmt.Errorf("%s: is given %d times; it takes one value", name, len(values))
	}
	for _, v := range values {
		var err error
		switch f.Kind() {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			var x int32
			if json.Unmarshal([]byte(v), &x) != nil {
				err = fmt.Errorf("%s: must be a whole number of 32 bits, got %q", name, v)
			}
		case protoreflect.EnumKind:
			var x int32
			if json.Unmarshal([]byte(v), &x) != nil && f.Enum().Values().ByName(protoreflect.Name(v)) == nil {
				var names []string
				for i := range f.Enum().Values().Len() {
					names = append(names, string(f.Enum().Values().Get(i).Name()))
				}
				err = fmt.Errorf("%s: no such value %q; one of %s", name, v, strings.Join(names, ", "))
			}
		case protoreflect.MessageKind:
			if f.Message().FullName() == "google.protobuf.Timestamp" {
				q := []byte(v) // quoted as the transcoder quotes it: unless it is already
				if len(q) > 0 && (q[0] != '"' || q[len(q)-1] != '"') {
					q = strconv.AppendQuote(nil, v)
				}
				if protojson.Unmarshal(q, new(timestamppb.Timestamp)) != nil {
					err = fmt.Errorf("%s: must be a time in RFC 3339 (2026-01-02T15:04:05Z), got %q", name, v)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// semicolonsEscaped is a raw query with its ';' escaped: Go's parser takes a ';' for a
// separator no more and drops the pair that holds one, so a filter such as
// state=RUN_STATE_RUNNING; was lost without a word (every run listed), and a client's
// $alt=json;enum-encoding=int made the query fail. Escaped, it is part of its value,
// as the client wrote it: a filter the API refuses by name, a parameter it ignores.
func semicolonsEscaped(raw string) string {
	return strings.ReplaceAll(raw, ";", "%3B")
}

// restRule is one REST path rule of the API.
type restRule struct {
	method, path string
	// segments are the path's, a variable as "{}", and verb what follows its last ':'.
	segments []string
	verb     string
	// body: the method's fields come from the body ("*"); vars are the fields the path
	// binds and fields all the request's, under their proto and JSON names.
	body         bool
	vars, fields []string
	// input is the request's message.
	input protoreflect.MessageDescriptor
}

// matchRESTRule is the rule of the API that a request of method for the escaped path p
// matches.
func matchRESTRule(method, p string) (restRule, bool) {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	verb := ""
	if last := segs[len(segs)-1]; strings.Contains(last, ":") {
		i := strings.LastIndexByte(last, ':')
		segs[len(segs)-1], verb = last[:i], last[i+1:]
	}
	for _, rule := range restRules() {
		if rule.method != method || rule.verb != verb || len(rule.segments) != len(segs) {
			continue
		}
		if matches(rule.segments, segs) {
			return rule, true
		}
	}
	return restRule{}, false
}

func matches(pattern, segs []string) bool {
	for i, s := range pattern {
		if s != "{}" && s != segs[i] {
			return false
		}
	}
	return true
}

// restRules are the API's REST path rules, read from its annotations.
var restRules = sync.OnceValue(func() []restRule {
	var rules []restRule
	methods := toolpb.File_toolmesh_v1_orchestrator_proto.Services().ByName("OrchestratorService").Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		top, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
		for _, h := range append([]*annotations.HttpRule{top}, top.GetAdditionalBindings()...) {
			method, path := "", ""
			switch {
			case h.GetGet() != "":
				method, path = "GET", h.GetGet()
			case h.GetPost() != "":
				method, path = "POST", h.GetPost()
			case h.GetPut() != "":
				method, path = "PUT", h.GetPut()
			case h.GetPatch() != "":
				method, path = "PATCH", h.GetPatch()
			case h.GetDelete() != "":
				method, path = "DELETE", h.GetDelete()
			default:
				continue
			}
			rule := restRule{method: method, path: path, body: h.GetBody() == "*", input: m.Input()}
			for j := range m.Input().Fields().Len() {
				f := m.Input().Fields().Get(j)
				rule.fields = append(rule.fields, string(f.Name()), f.JSONName())
			}
			template := strings.TrimPrefix(path, "/")
			if i := strings.LastIndexByte(template, ':'); i > strings.LastIndexByte(template, '}') {
				template, rule.verb = template[:i], template[i+1:]
			}
			for _, seg := range strings.Split(template, "/") {
				if name, ok := strings.CutPrefix(seg, "{"); ok {
					name = strings.TrimSuffix(name, "}")
					name, _, _ = strings.Cut(name, "=")
					rule.vars = append(rule.vars, name)
					if f := m.Input().Fields().ByName(protoreflect.Name(name)); f != nil {
						rule.vars = append(rule.vars, f.JSONName())
					}
					seg = "{}"
				}
				rule.segments = append(rule.segments, seg)
			}
			rules = append(rules, rule)
		}
	}
	return rules
})
