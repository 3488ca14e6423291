package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// Most tools take an object of scalar arguments: a handful of strings, numbers, integers
// and booleans, some required, some with an enum. For such flat schemas, validating a
// call does not need the generic path (a JSON tree with duplicate-key checks, a
// jsonschema walk, a re-encode): one pass over the tokens decides it and writes the
// canonical form. The fast path only ever says yes: whatever it is unsure about, and
// every invalid call, goes to the generic path, which also writes the error message.

// fastSchema is a flat object schema compiled for the fast path.
type fastSchema struct {
	props    map[string]fastProp
	required []string
	closed   bool // additionalProperties: false
}

type fastProp struct {
	typ  string // string, number, integer or boolean
	enum map[string]bool
}

// compileFast returns the fast path of a schema, or nil when the schema is not flat.
func compileFast(raw []byte) *fastSchema {
	var root map[string]json.RawMessage
	if json.Unmarshal(raw, &root) != nil {
		return nil
	}
	f := &fastSchema{props: map[string]fastProp{}}
	for k, v := range root {
		switch k {
		case "type":
			var t string
			if json.Unmarshal(v, &t) != nil || t != "object" {
				return nil
			}
		case "description", "title", "$schema", "$comment":
		case "required":
			if json.Unmarshal(v, &f.required) != nil {
				return nil
			}
		case "additionalProperties":
			var b bool
			if json.Unmarshal(v, &b) != nil || b {
				return nil // a schema here is not flat; true is the default
			}
			f.closed = true
		case "properties":
			var props map[string]map[string]json.RawMessage
			if json.Unmarshal(v, &props) != nil {
				return nil
			}
			for name, p := range props {
				fp, ok := compileProp(p)
				if !ok {
					return nil
				}
				f.props[name] = fp
			}
		default:
			return nil
		}
	}
	for _, r := range f.required {
		if _, ok := f.props[r]; !ok {
			return nil
		}
	}
	return f
}

func compileProp(p map[string]json.RawMessage) (fastProp, bool) {
	var fp fastProp
	for k, v := range p {
		switch k {
		case "type":
			if json.Unmarshal(v, &fp.typ) != nil {
				return fp, false
			}
			switch fp.typ {
			case "string", "number", "integer", "boolean":
			default:
				return fp, false
			}
		case "description", "title", "$comment":
		case "enum":
			var values []string
			if json.Unmarshal(v, &values) != nil {
				return fp, false
			}
			fp.enum = make(map[string]bool, len(values))
			for _, e := range values {
				fp.enum[e] = true
			}
		default:
			return fp, false
		}
	}
	if fp.typ == "" || (fp.enum != nil && fp.typ != "string") {
		return fp, false
	}
	return fp, true
}

var errNotFast = errors.New("not decided by the fast path")

// validate returns the canonical form of input when it certainly satisfies the schema,
// and errNotFast otherwise.
func (f *fastSchema) validate(input string) (string, error) {
	if !utf8.ValidString(input) {
		return "", errNotFast
	}
	dec := json.NewDecoder(strings.NewReader(input))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", errNotFast
	}
	type arg struct {
		key string
		val string // canonical JSON of the value
	}
	args := make([]arg, 0, len(f.props))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", errNotFast
		}
		key, ok := tok.(string)
		if !ok {
			return "", errNotFast
		}
		for _, a := range args {
			if a.key == key {
				return "", errNotFast // duplicate key
			}
		}
		tok, err = dec.Token()
		if err != nil {
			return "", errNotFast
		}
		prop, known := f.props[key]
		if !known && f.closed {
			return "", errNotFast
		}
		var val string
		switch v := tok.(type) {
		case string:
			if known && (prop.typ != "string" || (prop.enum != nil && !prop.enum[v])) {
				return "", errNotFast
			}
			val = jsontree.Quote(v)
		case json.Number:
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil || math.IsInf(x, 0) {
				return "", errNotFast
			}
			if known && !(prop.typ == "number" || (prop.typ == "integer" && x == math.Trunc(x))) {
				return "", errNotFast
			}
			val = string(v)
		case bool:
			if known && prop.typ != "boolean" {
				return "", errNotFast
			}
			val = strconv.FormatBool(v)
		default: // null, or a nested object or array: the generic path decides
			return "", errNotFast
		}
		args = append(args, arg{key, val})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", errNotFast
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errNotFast // trailing data
	}
	for _, r := range f.required {
		if !slices.ContainsFunc(args, func(a arg) bool { return a.key == r }) {
			return "", errNotFast
		}
	}
	slices.SortFunc(args, func(a, b arg) int { return strings.Compare(a.key, b.key) })
	var b bytes.Buffer
	b.WriteByte('{')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsontree.Quote(a.key))
		b.WriteByte(':')
		b.WriteString(a.val)
	}
	b.WriteByte('}')
	return b.String(), nil
}
