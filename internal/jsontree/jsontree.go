// Package jsontree is the strict JSON reader and writer behind tool schemas and argument
// validation. encoding/json alone is too lenient for arguments that a model wrote: it
// keeps the last of two duplicate keys and silently replaces invalid UTF-8, so two
// parties could read the same bytes differently. Decode refuses both, keeps the order of
// object members (schemas are shown to the model in the order their author wrote them)
// and keeps numbers as written; Encode writes a decoded value back, canonically when
// asked.
//
// It imports only the standard library.
package jsontree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Object is a decoded JSON object that remembers the order of its members:
// schemas are shown to the model in the order their author wrote them.
type Object struct {
	Keys []string
	Vals map[string]any
}

// NewObject returns an empty object.
func NewObject() *Object { return &Object{Vals: map[string]any{}} }

// Get returns the value of a member.
func (o *Object) Get(key string) (any, bool) {
	v, ok := o.Vals[key]
	return v, ok
}

// Set replaces the value of an existing member in place or appends a new one.
func (o *Object) Set(key string, v any) {
	if _, ok := o.Vals[key]; !ok {
		o.Keys = append(o.Keys, key)
	}
	o.Vals[key] = v
}

// Remove deletes a member, if present.
func (o *Object) Remove(key string) {
	if _, ok := o.Vals[key]; ok {
		delete(o.Vals, key)
		o.Keys = slices.DeleteFunc(o.Keys, func(k string) bool { return k == key })
	}
}

// MaxArgumentDepth bounds how deeply tool arguments may nest objects and arrays.
// jsonschema-go builds its error messages for anyOf and oneOf by nesting the messages
// of every level, so validating deeply nested input against a recursive schema takes
// time that grows much faster than the depth (seconds at depth 2000). Real arguments
// nest a few levels; 64 leaves ample room and keeps the worst case to milliseconds.
const MaxArgumentDepth = 64

// NoDepthLimit leaves the bound to encoding/json (10000 levels); for schemas, which
// come from tool authors rather than from models.
const NoDepthLimit = 0

// Decode reads exactly one JSON value. Objects become *Object, arrays []any,
// numbers json.Number (so that no digit is lost), and strings, booleans and null their
// Go counterparts. It rejects invalid UTF-8, syntax errors, trailing data, duplicate
// object keys at any depth, and nesting deeper than maxDepth (unless NoDepthLimit);
// error messages are written for a model to act on.
func Decode(data []byte, maxDepth int) (any, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("invalid JSON: invalid UTF-8 at offset %d", invalidUTF8Offset(data))
	}
	// The scanner behind Unmarshal reports the exact offset of every syntax error,
	// including data after the top-level value; the token reader below does not.
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, describeSyntaxError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return decodeValue(dec, "", 0, maxDepth)
}

func invalidUTF8Offset(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}

func describeSyntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg := se.Error()
		if msg == "unexpected end of JSON input" {
			msg = "unexpected end of input"
		}
		return fmt.Errorf("invalid JSON: %s at offset %d", msg, se.Offset)
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

// decodeValue reads one value from a token stream that is known to be valid JSON.
func decodeValue(dec *json.Decoder, path string, depth, maxDepth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth++; maxDepth != NoDepthLimit && depth > maxDepth {
		return nil, fmt.Errorf("objects and arrays nest more than %d levels deep", maxDepth)
	}
	switch d {
	case '{':
		obj := NewObject()
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("invalid JSON: %v", err)
			}
			key, _ := kt.(string)
			if _, dup := obj.Vals[key]; dup {
				if path == "" {
					return nil, fmt.Errorf("duplicate key %q", key)
				}
				return nil, fmt.Errorf("duplicate key %q in property %q", key, path)
			}
			v, err := decodeValue(dec, ChildPath(path, key), depth, maxDepth)
			if err != nil {
				return nil, err
			}
			obj.Set(key, v)
		}
		_, err = dec.Token() // '}'
		return obj, err
	case '[':
		arr := []any{}
		for i := 0; dec.More(); i++ {
			v, err := decodeValue(dec, IndexPath(path, i), depth, maxDepth)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = dec.Token() // ']'
		return arr, err
	default:
		return nil, fmt.Errorf("invalid JSON: unexpected %v", d)
	}
}

// ChildPath and IndexPath build the property paths that error messages show, such
// as "address.city" or "items[2].name".
func ChildPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func IndexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// AtPath prefixes a message with the property it is about.
func AtPath(path, msg string) string {
	if path == "" {
		return msg
	}
	return fmt.Sprintf("property %q: %s", path, msg)
}

// Encode writes a decoded value compactly. With sortKeys, object members are
// sorted by key, which makes the output canonical: equal values give equal bytes
// (numbers keep their original spelling).
func Encode(v any, sortKeys bool) []byte {
	var b bytes.Buffer
	writeJSON(&b, v, sortKeys)
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, v any, sortKeys bool) {
	switch v := v.(type) {
	case *Object:
		keys := v.Keys
		if sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(Quote(k))
			b.WriteByte(':')
			writeJSON(b, v.Vals[k], sortKeys)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e, sortKeys)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(string(v))
	case string:
		b.WriteString(Quote(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	default:
		// Only values produced by Decode reach here.
		panic(fmt.Sprintf("jsontree: cannot encode %T", v))
	}
}

// Quote returns s as a JSON string. Unlike json.Marshal it leaves <, > and &
// alone: the text is for a model, not for an HTML page.
func Quote(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// Marshal is json.Marshal without HTML escaping.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ToPlain converts a decoded value to the form jsonschema-go validates: maps and
// float64 numbers (it would take a json.Number for a string). A number too large for
// a float64 is refused rather than validated as infinity.
func ToPlain(v any, path string) (any, error) {
	switch v := v.(type) {
	case *Object:
		m := make(map[string]any, len(v.Keys))
		for _, k := range v.Keys {
			pv, err := ToPlain(v.Vals[k], ChildPath(path, k))
			if err != nil {
				return nil, err
			}
			m[k] = pv
		}
		return m, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			pv, err := ToPlain(e, IndexPath(path, i))
			if err != nil {
				return nil, err
			}
			out[i] = pv
		}
		return out, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, errors.New(AtPath(path, fmt.Sprintf("number %s is out of range", v)))
		}
		return f, nil
	default:
		return v, nil
	}
}

// TypeName names the JSON type of a decoded value the way JSON Schema does.
func TypeName(v any) string {
	switch v := v.(type) {
	case *Object, map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err == nil {
			if _, frac := math.Modf(f); frac == 0 {
				return "integer"
			}
		}
		return "number"
	case float64:
		if _, frac := math.Modf(v); frac == 0 {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// IsBlank reports whether s holds nothing but JSON whitespace.
func IsBlank(s string) bool { return strings.Trim(s, " \t\r\n") == "" }

// Truncate keeps quoted values in error messages short.
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
