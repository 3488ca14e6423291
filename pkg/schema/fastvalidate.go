package schema

import (
	"encoding/json"
	"errors"
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

// fastArg is one argument the fast path read: its key and the canonical JSON of its
// value.
type fastArg struct {
	key, val string
}

// validate returns the canonical form of input when it certainly satisfies the schema,
// and errNotFast otherwise. It reads input in one pass, byte by byte, and allocates
// little: the canonical form, and the decoded text of strings that hold escapes.
func (f *fastSchema) validate(input string) (string, error) {
	if !utf8.ValidString(input) {
		return "", errNotFast
	}
	p := fastScanner{s: input}
	p.space()
	if !p.eat('{') {
		return "", errNotFast
	}
	var stack [8]fastArg
	args := stack[:0]
	p.space()
	if !p.eat('}') {
		for {
			key, ok := p.str()
			if !ok {
				return "", errNotFast
			}
			for _, a := range args {
				if a.key == key {
					return "", errNotFast // duplicate key
				}
			}
			p.space()
			if !p.eat(':') {
				return "", errNotFast
			}
			p.space()
			prop, known := f.props[key]
			if !known && f.closed {
				return "", errNotFast
			}
			val, ok := p.value(prop, known)
			if !ok {
				return "", errNotFast
			}
			args = append(args, fastArg{key, val})
			p.space()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return "", errNotFast
			}
			p.space()
		}
	}
	p.space()
	if p.i != len(p.s) {
		return "", errNotFast // trailing data
	}
	for _, r := range f.required {
		if !slices.ContainsFunc(args, func(a fastArg) bool { return a.key == r }) {
			return "", errNotFast
		}
	}
	// Insertion sort: a handful of arguments, and no allocation.
	for i := 1; i < len(args); i++ {
		for j := i; j > 0 && args[j].key < args[j-1].key; j-- {
			args[j], args[j-1] = args[j-1], args[j]
		}
	}
	n := 2
	for _, a := range args {
		n += len(a.key) + len(a.val) + 4
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		writeQuoted(&b, a.key)
		b.WriteByte(':')
		b.WriteString(a.val)
	}
	b.WriteByte('}')
	return b.String(), nil
}

// fastScanner reads the JSON of a flat object.
type fastScanner struct {
	s string
	i int
}

// space skips JSON whitespace.
func (p *fastScanner) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// eat consumes c if it is next.
func (p *fastScanner) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string literal and returns its decoded text.
func (p *fastScanner) str() (string, bool) {
	lit, escaped, ok := p.literal()
	if !ok {
		return "", false
	}
	if !escaped {
		return lit[1 : len(lit)-1], true
	}
	var v string
	if json.Unmarshal([]byte(lit), &v) != nil {
		return "", false
	}
	return v, true
}

// literal reads a string literal, quotes included, and says whether it holds escapes.
func (p *fastScanner) literal() (lit string, escaped, ok bool) {
	if !p.eat('"') {
		return "", false, false
	}
	start := p.i - 1
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return p.s[start:p.i], escaped, true
		case c == '\\':
			escaped = true
			p.i += 2
		case c < 0x20:
			return "", false, false
		default:
			p.i++
		}
	}
	return "", false, false
}

// value reads the value of an argument and returns its canonical JSON, checking it
// against prop when the schema knows the argument.
func (p *fastScanner) value(prop fastProp, known bool) (string, bool) {
	if p.i >= len(p.s) {
		return "", false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		lit, escaped, ok := p.literal()
		if !ok {
			return "", false
		}
		v := lit[1 : len(lit)-1]
		if escaped {
			if json.Unmarshal([]byte(lit), &v) != nil {
				return "", false
			}
		}
		if known && (prop.typ != "string" || (prop.enum != nil && !prop.enum[v])) {
			return "", false
		}
		if !escaped && !needsQuoting(v) {
			return lit, true
		}
		return jsontree.Quote(v), true
	case c == '-' || ('0' <= c && c <= '9'):
		lit, ok := p.number()
		if !ok {
			return "", false
		}
		if known && prop.typ != "number" && prop.typ != "integer" {
			return "", false
		}
		if plainInteger(lit) {
			return lit, true // finite, and an integer
		}
		if !known || prop.typ == "number" {
			if finiteDecimal(lit) {
				return lit, true
			}
		}
		x, err := strconv.ParseFloat(lit, 64)
		if err != nil || math.IsInf(x, 0) {
			return "", false
		}
		if known && prop.typ == "integer" && x != math.Trunc(x) {
			return "", false
		}
		return lit, true
	case strings.HasPrefix(p.s[p.i:], "true"), strings.HasPrefix(p.s[p.i:], "false"):
		lit := "true"
		if c == 'f' {
			lit = "false"
		}
		p.i += len(lit)
		if known && prop.typ != "boolean" {
			return "", false
		}
		return lit, true
	}
	return "", false // null, or a nested object or array: the generic path decides
}

// maxFiniteDigits is how many integer digits a number may have and be finite as a
// float64 whatever they are: 10^308 - 1 < 1.797e308.
const maxFiniteDigits = 308

// plainInteger reports whether lit, a JSON number, has no fraction and no exponent and
// few enough digits to be a finite float64: then it is an integer, with no need to parse.
func plainInteger(lit string) bool {
	digits := strings.TrimPrefix(lit, "-")
	return len(digits) <= maxFiniteDigits && !strings.ContainsAny(digits, ".eE")
}

// finiteDecimal reports whether lit, a JSON number, has no exponent and few enough
// integer digits to be a finite float64, with no need to parse it.
func finiteDecimal(lit string) bool {
	digits := strings.TrimPrefix(lit, "-")
	if strings.ContainsAny(digits, "eE") {
		return false
	}
	whole, _, _ := strings.Cut(digits, ".")
	return len(whole) <= maxFiniteDigits
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastScanner) number() (string, bool) {
	start := p.i
	p.eat('-')
	digits := func() int {
		n := 0
		for p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	switch {
	case p.eat('0'):
	case digits() == 0:
		return "", false
	}
	if p.eat('.') && digits() == 0 {
		return "", false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if digits() == 0 {
			return "", false
		}
	}
	return p.s[start:p.i], true
}

// needsQuoting reports whether the JSON of s (valid UTF-8) is not just s in quotes: it
// holds a quote, a backslash, a control character, or U+2028 or U+2029, which
// jsontree.Quote escapes.
func needsQuoting(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\':
			return true
		case c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9):
			return true
		}
	}
	return false
}

// writeQuoted writes the JSON of s as jsontree.Quote would.
func writeQuoted(b *strings.Builder, s string) {
	if needsQuoting(s) {
		b.WriteString(jsontree.Quote(s))
		return
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
}
