package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// The model reads every validation error and has to fix its call from it alone, so an
// error must say which property is wrong and how. jsonschema-go decides validity; its
// messages, though, name schema locations rather than properties ("validating
// /properties/a: type: x has type \"string\", want \"number\""). explain re-derives a
// precise message for the keywords models most often get wrong.

// explainer writes the messages; it compiles each pattern once, when a message first
// needs it.
type explainer struct {
	patterns sync.Map // pattern → *regexp.Regexp, or nil when it does not compile
}

func (x *explainer) pattern(p string) *regexp.Regexp {
	if re, ok := x.patterns.Load(p); ok {
		return re.(*regexp.Regexp)
	}
	re, err := regexp.Compile(p)
	if err != nil {
		re = nil
	}
	x.patterns.Store(p, re)
	return re
}

// explain returns a message for the first violation it finds, walking the instance in
// the order the model wrote it, or "" when it finds none. It only follows subschemas
// that apply unconditionally (properties, additionalProperties, items, allOf), and
// anyOf/oneOf only when it can show that every alternative fails, so what it reports is
// always a real violation; anything else is left to describeValidationError.
func (x *explainer) explain(s *jsonschema.Schema, v any, path string) string {
	if s == nil || s.Ref != "" || s.DynamicRef != "" {
		return ""
	}
	if isFalseSchema(s) {
		return jsontree.AtPath(path, "is not allowed")
	}
	if s.Type != "" || len(s.Types) > 0 {
		want := s.Types
		if s.Type != "" {
			want = []string{s.Type}
		}
		if got := jsontree.TypeName(v); !typeMatches(got, want) {
			return jsontree.AtPath(path, fmt.Sprintf("expected %s, got %s", strings.Join(want, " or "), got))
		}
	}
	if s.Enum != nil && !equalsOneOf(s.Enum, v, path) {
		return jsontree.AtPath(path, fmt.Sprintf("%s is not one of %s", shortJSON(v), joinJSON(s.Enum)))
	}
	if s.Const != nil && !equalsOneOf([]any{*s.Const}, v, path) {
		return jsontree.AtPath(path, fmt.Sprintf("must be %s, got %s", joinJSON([]any{*s.Const}), shortJSON(v)))
	}
	switch v := v.(type) {
	case json.Number:
		if msg := explainNumber(s, v); msg != "" {
			return jsontree.AtPath(path, msg)
		}
	case string:
		if msg := x.explainString(s, v); msg != "" {
			return jsontree.AtPath(path, msg)
		}
	case []any:
		if msg := x.explainArray(s, v, path); msg != "" {
			return msg
		}
	case *jsontree.Object:
		if msg := x.explainObject(s, v, path); msg != "" {
			return msg
		}
	}
	for _, sub := range s.AllOf {
		if msg := x.explain(sub, v, path); msg != "" {
			return msg
		}
	}
	// An alternative that fails is explained only when every alternative has a
	// violation explain can name; otherwise the fallback message is more honest.
	for _, alts := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf} {
		if len(alts) == 0 {
			continue
		}
		msgs := make([]string, 0, len(alts))
		for _, alt := range alts {
			msg := x.explain(alt, v, path)
			if msg == "" {
				break
			}
			msgs = append(msgs, msg)
		}
		if len(msgs) == len(alts) {
			return "no alternative matches: " + strings.Join(msgs, "; or ")
		}
	}
	return ""
}

// equalsOneOf reports whether the decoded value v equals one of values. Converting a
// large object or array costs its size, and none of the values can equal one unless
// it is an object or array too.
func equalsOneOf(values []any, v any, path string) bool {
	if isContainer(v) && !slices.ContainsFunc(values, isContainer) {
		return false
	}
	pv, _ := jsontree.ToPlain(v, path)
	return slices.ContainsFunc(values, func(e any) bool { return jsonschema.Equal(e, pv) })
}

func isContainer(v any) bool {
	switch v.(type) {
	case *jsontree.Object, []any, map[string]any:
		return true
	}
	return false
}

func typeMatches(got string, want []string) bool {
	return slices.Contains(want, got) || got == "integer" && slices.Contains(want, "number")
}

// isFalseSchema reports whether s is the schema `false`, which jsonschema-go reads as
// {"not": {}}.
func isFalseSchema(s *jsonschema.Schema) bool {
	if s == nil || s.Not == nil || !reflect.ValueOf(*s.Not).IsZero() {
		return false
	}
	rest := *s
	rest.Not = nil
	return reflect.ValueOf(rest).IsZero()
}

func explainNumber(s *jsonschema.Schema, n json.Number) string {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return ""
	}
	switch {
	case s.Minimum != nil && f < *s.Minimum:
		return fmt.Sprintf("%s is less than the minimum %s", n, formatFloat(*s.Minimum))
	case s.Maximum != nil && f > *s.Maximum:
		return fmt.Sprintf("%s is greater than the maximum %s", n, formatFloat(*s.Maximum))
	case s.ExclusiveMinimum != nil && f <= *s.ExclusiveMinimum:
		return fmt.Sprintf("%s must be greater than %s", n, formatFloat(*s.ExclusiveMinimum))
	case s.ExclusiveMaximum != nil && f >= *s.ExclusiveMaximum:
		return fmt.Sprintf("%s must be less than %s", n, formatFloat(*s.ExclusiveMaximum))
	}
	if s.MultipleOf != nil {
		// The same test as jsonschema-go's.
		if _, frac := math.Modf(f / *s.MultipleOf); frac != 0 {
			return fmt.Sprintf("%s is not a multiple of %s", n, formatFloat(*s.MultipleOf))
		}
	}
	return ""
}

func (x *explainer) explainString(s *jsonschema.Schema, str string) string {
	n := utf8.RuneCountInString(str)
	switch {
	case s.MinLength != nil && n < *s.MinLength:
		return fmt.Sprintf("must be at least %s long, got %d", plural(*s.MinLength, "character"), n)
	case s.MaxLength != nil && n > *s.MaxLength:
		return fmt.Sprintf("must be at most %s long, got %d", plural(*s.MaxLength, "character"), n)
	}
	if s.Pattern != "" {
		if re := x.pattern(s.Pattern); re != nil && !re.MatchString(str) {
			return fmt.Sprintf("%s does not match the pattern %s", shortJSON(str), jsontree.Quote(s.Pattern))
		}
	}
	return ""
}

func (x *explainer) explainArray(s *jsonschema.Schema, arr []any, path string) string {
	switch {
	case s.MinItems != nil && len(arr) < *s.MinItems:
		return jsontree.AtPath(path, fmt.Sprintf("must have at least %s, got %d", plural(*s.MinItems, "item"), len(arr)))
	case s.MaxItems != nil && len(arr) > *s.MaxItems:
		return jsontree.AtPath(path, fmt.Sprintf("must have at most %s, got %d", plural(*s.MaxItems, "item"), len(arr)))
	}
	// Positional item schemas (prefixItems, draft-07 tuple items) are left to the
	// fallback message.
	if s.Items == nil || len(s.PrefixItems) > 0 || len(s.ItemsArray) > 0 {
		return ""
	}
	for i, e := range arr {
		if msg := x.explain(s.Items, e, jsontree.IndexPath(path, i)); msg != "" {
			return msg
		}
	}
	return ""
}

func (x *explainer) explainObject(s *jsonschema.Schema, obj *jsontree.Object, path string) string {
	var missing []string
	for _, r := range s.Required {
		if _, ok := obj.Get(r); !ok {
			missing = append(missing, jsontree.ChildPath(path, r))
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		return fmt.Sprintf("missing required property %q", missing[0])
	default:
		return "missing required properties " + joinQuoted(missing)
	}
	// Extra properties are only judged here when nothing but "properties" decides
	// which ones are expected.
	if s.AdditionalProperties != nil && len(s.PatternProperties) == 0 {
		var extra []string
		for _, k := range obj.Keys {
			if _, ok := s.Properties[k]; !ok {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 && isFalseSchema(s.AdditionalProperties) {
			paths := make([]string, len(extra))
			for i, k := range extra {
				paths[i] = jsontree.ChildPath(path, k)
			}
			msg := "unexpected property " + joinQuoted(paths)
			if len(paths) > 1 {
				msg = "unexpected properties " + joinQuoted(paths)
			}
			if n := len(s.Properties); n > 0 && n <= 20 {
				allowed := slices.Sorted(func(yield func(string) bool) {
					for k := range s.Properties {
						if !yield(k) {
							return
						}
					}
				})
				msg += "; allowed: " + joinQuoted(allowed)
			}
			return msg
		}
		for _, k := range extra {
			if msg := x.explain(s.AdditionalProperties, obj.Vals[k], jsontree.ChildPath(path, k)); msg != "" {
				return msg
			}
		}
	}
	for _, k := range obj.Keys {
		if sub, ok := s.Properties[k]; ok {
			if msg := x.explain(sub, obj.Vals[k], jsontree.ChildPath(path, k)); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// describeValidationError turns a jsonschema-go error that explain could not account
// for into a message that names the property. The error is a chain of "validating
// <schema pointer>: " prefixes around the actual complaint; the pointers that extend
// one another through "properties" and "items" spell the path of the property.
func describeValidationError(err error) string {
	msg := err.Error()
	var ptrs []string
	for strings.HasPrefix(msg, "validating ") {
		rest := msg[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		ptrs = append(ptrs, rest[:i])
		msg = rest[i+2:]
	}
	return jsontree.AtPath(instancePath(ptrs), msg)
}

func instancePath(ptrs []string) string {
	path, prev := "", ""
	for _, p := range ptrs {
		if !strings.HasPrefix(p, "/") {
			prev = "" // the root, or a schema named by its $id
			continue
		}
		rel, ok := strings.CutPrefix(p, prev)
		if ok && strings.HasPrefix(rel, "/") {
			segs := strings.Split(rel[1:], "/")
			for i := 0; i < len(segs); i++ {
				switch segs[i] {
				case "properties":
					if i+1 < len(segs) {
						i++
						path = jsontree.ChildPath(path, unescapePointer(segs[i]))
					}
				case "items", "additionalItems", "unevaluatedItems":
					path += "[]"
				}
			}
		}
		// Otherwise the validator followed a $ref to elsewhere in the schema: the
		// instance did not move.
		prev = p
	}
	return path
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// shortJSON renders a decoded value for a message, cut to a readable length.
func shortJSON(v any) string { return jsontree.Truncate(string(jsontree.Encode(v, false)), 80) }

func joinJSON(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		b, err := jsontree.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		parts[i] = jsontree.Truncate(string(b), 80)
	}
	return strings.Join(parts, ", ")
}

func joinQuoted(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = strconv.Quote(s)
	}
	return strings.Join(parts, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
