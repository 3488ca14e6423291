package tool

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// flatPlan decodes the arguments of a typed tool whose input is a flat struct — exported
// fields of booleans, numbers and strings only, named by their json tags — without
// encoding/json's reflection: the arguments a model sends most tools. It reads the
// canonical form the schema's validation produces (one object, compact, no duplicate
// keys, valid UTF-8) and gives up, leaving the call to encoding/json, on anything else
// it meets: an escaped string, a key it does not know exactly (encoding/json also
// matches keys case-insensitively), a value of another kind than its field's. So what
// it decodes, encoding/json decodes the same way; what it refuses, encoding/json
// decides (FuzzFlatAgreesWithJSON checks both).
type flatPlan struct {
	ptr    bool // the input type is a pointer to the struct
	fields []flatField
}

type flatField struct {
	name  string
	index int
	kind  reflect.Kind
}

// newFlatPlan returns the plan of input type t, or nil when t is not a flat struct.
func newFlatPlan(t reflect.Type) *flatPlan {
	p := &flatPlan{}
	if t.Kind() == reflect.Pointer {
		p.ptr, t = true, t.Elem()
	}
	if t.Kind() != reflect.Struct || unmarshals(t) {
		return nil
	}
	seen := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous || !f.IsExported() {
			return nil // embedded structs and unexported fields follow encoding/json's rules
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !plainName(name) {
			return nil // encoding/json has rules of its own for other names
		}
		if strings.Contains(opts, "string") || seen[strings.ToLower(name)] {
			return nil // ",string" values, and names equal but for case
		}
		seen[strings.ToLower(name)] = true
		switch k := f.Type.Kind(); k {
		case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if f.Type.PkgPath() != "" {
				return nil // a named type may have its own UnmarshalJSON
			}
			p.fields = append(p.fields, flatField{name: name, index: i, kind: k})
		default:
			return nil
		}
	}
	return p
}

// unmarshals reports whether t decodes itself (json.Unmarshaler, or
// encoding.TextUnmarshaler, which encoding/json refuses an object for).
func unmarshals(t reflect.Type) bool {
	for _, x := range []reflect.Type{t, reflect.PointerTo(t)} {
		if x.Implements(reflect.TypeFor[json.Unmarshaler]()) || x.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
			return true
		}
	}
	return false
}

// plainName reports whether name is made of ASCII letters, digits, '_' and '-' only.
func plainName(name string) bool {
	for i := range len(name) {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return name != ""
}

// decode decodes canonical into v (a *I), and reports whether it did; on false v may
// hold part of the arguments and the caller decodes again from a fresh value.
func (p *flatPlan) decode(canonical string, v reflect.Value) bool {
	s := canonical
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return false
	}
	s = s[1 : len(s)-1]
	if p.ptr {
		v = v.Elem()
	}
	v = v.Elem()
	for len(s) > 0 {
		key, rest, ok := flatString(s)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return false
		}
		s = rest[1:]
		var f *flatField
		for i := range p.fields {
			if p.fields[i].name == key {
				f = &p.fields[i]
				break
			}
		}
		if f == nil {
			return false
		}
		end := flatValueEnd(s)
		if end <= 0 {
			return false
		}
		val := s[:end]
		if !f.set(v.Field(f.index), val) {
			return false
		}
		s = s[end:]
		if len(s) > 0 {
			if s[0] != ',' {
				return false
			}
			s = s[1:]
			if len(s) == 0 {
				return false
			}
		}
	}
	return true
}

// flatString reads a JSON string at the start of s that encoding/json would decode to
// its bytes as they are: no escapes, no control characters, valid UTF-8.
func flatString(s string) (str, rest string, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", "", false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			if !utf8.ValidString(s[1:i]) {
				return "", "", false
			}
			return s[1:i], s[i+1:], true
		case c == '\\' || c < 0x20:
			return "", "", false
		}
	}
	return "", "", false
}

// flatValueEnd is the length of the scalar value at the start of s (a string without
// escapes, or a literal up to the next comma), or 0.
func flatValueEnd(s string) int {
	if len(s) == 0 {
		return 0
	}
	if s[0] == '"' {
		_, rest, ok := flatString(s)
		if !ok {
			return 0
		}
		return len(s) - len(rest)
	}
	if s[0] == '{' || s[0] == '[' {
		return 0
	}
	if i := strings.IndexByte(s, ','); i >= 0 {
		return i
	}
	return len(s)
}

// set stores val, a JSON scalar, in fv as encoding/json would, or reports false.
func (f *flatField) set(fv reflect.Value, val string) bool {
	if val == "null" {
		return true // encoding/json leaves a scalar as it was
	}
	switch f.kind {
	case reflect.String:
		if val[0] != '"' {
			return false
		}
		fv.SetString(val[1 : len(val)-1])
	case reflect.Bool:
		switch val {
		case "true":
			fv.SetBool(true)
		case "false":
			fv.SetBool(false)
		default:
			return false
		}
	case reflect.Float32, reflect.Float64:
		if !jsonNumber(val) {
			return false
		}
		x, err := strconv.ParseFloat(val, fv.Type().Bits())
		if err != nil || fv.OverflowFloat(x) {
			return false
		}
		fv.SetFloat(x)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !jsonNumber(val) {
			return false
		}
		x, err := strconv.ParseInt(val, 10, 64)
		if err != nil || fv.OverflowInt(x) {
			return false
		}
		fv.SetInt(x)
	default: // the unsigned kinds
		if !jsonNumber(val) {
			return false
		}
		x, err := strconv.ParseUint(val, 10, 64)
		if err != nil || fv.OverflowUint(x) {
			return false
		}
		fv.SetUint(x)
	}
	return true
}

// jsonNumber reports whether s is a number in JSON's grammar (strconv also takes
// "+1", "0x10", "1_000", "Inf", which JSON does not).
func jsonNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i == len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i == len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}
