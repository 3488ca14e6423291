package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// Schemas come from workers and MCP servers, which toolmesh does not trust: FromJSON
// and ValueFromJSON hold every schema to the limits below, so that compiling one, and
// validating arguments against it, takes bounded time and memory whatever it says.
// Real tool schemas are far inside every one of them. (Params and WithParameter build
// schemas from Go code and are not held to them; a worker's schema is checked again when
// the orchestrator receives it.)
const (
	// MaxBytes bounds the JSON text of a schema.
	MaxBytes = 64 << 10
	// MaxDepth bounds how deeply subschemas nest: a property of a property of ... may
	// be at most 64 levels below the root. It also bounds the chains of subschemas that apply to one
	// and the same value ($ref, allOf, anyOf, oneOf, not, if, then, else,
	// dependentSchemas), which the document's nesting does not show when they pass
	// through $ref.
	MaxDepth = 64
	// MaxJSONDepth bounds how deeply the schema's JSON nests objects and arrays: room
	// for MaxDepth subschemas at two levels each ("properties", then the name) and a
	// value (const, enum, default) as deep as arguments may nest.
	MaxJSONDepth = 2*MaxDepth + jsontree.MaxArgumentDepth
	// MaxNodes bounds the number of subschemas, the root included. Compiling takes the
	// validator about 10 µs a subschema, so a schema at this limit and all the others
	// compiles in tens of milliseconds; a real schema within MaxBytes, whose subschemas
	// have types and descriptions, has far fewer.
	MaxNodes = 2_000
	// MaxProperties bounds the entries of one "properties", and of one
	// "patternProperties".
	MaxProperties = 1_000
	// MaxEnum bounds the values of one "enum".
	MaxEnum = 1_000
	// MaxPatternBytes bounds one regular expression ("pattern", or a key of
	// "patternProperties"); MaxPatternInstructions bounds the program it compiles to, and
	// MaxTotalPatternInstructions the programs of all of a schema's expressions. Go's
	// regexp matches in time linear in the text, but the factor is the program's size,
	// and a short expression can compile to a long program (\pL{1000} is 9 bytes and
	// 1,002 instructions).
	MaxPatternBytes             = 1 << 10
	MaxPatternInstructions      = 2_000
	MaxTotalPatternInstructions = 10_000
	// MaxPathBytes bounds the JSON pointers of all subschemas, added up: the validator
	// keeps one for each and quotes them in its errors, so long names deep down would
	// otherwise cost memory out of proportion to the schema.
	MaxPathBytes = 1 << 20
	// MaxValueChecks bounds the work of validating one value of the arguments against
	// the schema, in checks of about 100 ns each: each subschema that applies to the
	// value counts a few, and so does each entry of the keywords it then goes through
	// (properties, required, enum). A $ref is followed to the one subschema it names,
	// so a schema that refers to one definition many times does not grow; but
	// definitions that refer to each other several times over multiply the subschemas
	// that apply to one value (a "billion laughs"), and such a schema is refused.
	MaxValueChecks = 100_000
	// MaxValidationChecks and MaxValidationChecksPerByte bound the work of one
	// validation, all values of the arguments together: arguments of n bytes may take
	// MaxValidationChecks + n*MaxValidationChecksPerByte checks, so that the time to
	// validate grows at most linearly with their size, whatever the schema. Besides
	// what MaxValueChecks counts, these count the bytes the validator scans or copies:
	// a string matched against a pattern, and the error messages it builds on the way.
	// Arguments that would take more are refused before they are checked.
	MaxValidationChecks        = 250_000
	MaxValidationChecksPerByte = 4
)

// maxKeywordInteger is the largest value accepted for keywords such as minLength:
// the largest integer a float64 holds exactly.
const maxKeywordInteger = 1 << 53

// integerKeywords must be non-negative integers.
var integerKeywords = []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains"}

// numberKeywords must be finite numbers.
var numberKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}

// Keywords whose value is a schema, an array of schemas, or an object of schemas.
var (
	schemaKeywords = []string{
		"additionalItems", "contains", "unevaluatedItems", "additionalProperties", "propertyNames",
		"unevaluatedProperties", "not", "if", "then", "else", "contentSchema",
	}
	schemaListKeywords = []string{"prefixItems", "allOf", "anyOf", "oneOf"}
	schemaMapKeywords  = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)

// limitChecker walks the decoded JSON of a schema, before anything else reads it, and
// refuses it at the first limit it exceeds. Values of the wrong JSON type are left to
// the decoder of the schema, which names the keyword.
type limitChecker struct {
	nodes, pathBytes, patternInstructions int
	segments                              []string       // the JSON pointer of the subschema being checked
	programs                              map[string]int // the size of each pattern's program
}

// checked is what checkLimits learnt of a schema that the rest of its compilation
// needs.
type checked struct {
	programs map[string]int // the size of each pattern's program
}

// checkLimits checks a schema's JSON.
func checkLimits(root any) (*checked, error) {
	c := newLimitChecker()
	if err := c.schema(root, 0, len("root")); err != nil {
		return nil, err
	}
	return &checked{programs: c.programs}, nil
}

func newLimitChecker() *limitChecker { return &limitChecker{programs: map[string]int{}} }

// ptr is the JSON pointer of the current subschema, with extra segments appended.
func (c *limitChecker) ptr(extra ...string) string {
	var b strings.Builder
	for _, s := range append(c.segments, extra...) {
		b.WriteByte('/')
		b.WriteString(escapePointer(s))
	}
	if b.Len() == 0 {
		return "the root"
	}
	return jsontree.Truncate(b.String(), 200)
}

func (c *limitChecker) schema(v any, depth, pathLen int) error {
	obj, ok := v.(*jsontree.Object)
	if _, isBool := v.(bool); !ok && !isBool {
		return nil
	}
	if c.nodes++; c.nodes > MaxNodes {
		return fmt.Errorf("the schema has more than %d subschemas; the limit is %d", MaxNodes, MaxNodes)
	}
	if depth > MaxDepth {
		return fmt.Errorf("subschemas nest more than %d levels deep at %s; the limit is %d", MaxDepth, c.ptr(), MaxDepth)
	}
	if c.pathBytes += pathLen; c.pathBytes > MaxPathBytes {
		return fmt.Errorf("the JSON pointers of the subschemas add up to more than %d bytes (at %s); the limit is %d", MaxPathBytes, c.ptr(), MaxPathBytes)
	}
	if !ok {
		return nil
	}
	for _, kw := range obj.Keys {
		if name, ok := foldedKeyword(kw); ok {
			return fmt.Errorf("%q at %s is not a keyword: JSON Schema keywords are case-sensitive (did you mean %q?)", jsontree.Truncate(kw, 100), c.ptr(), name)
		}
	}
	if err := c.keywords(obj); err != nil {
		return err
	}
	child := func(v any, segs ...string) error {
		n := pathLen
		if depth == 0 {
			n = 0 // the root is "root"; its children start afresh
		}
		for _, s := range segs {
			n += 1 + len(escapePointer(s))
		}
		c.segments = append(c.segments, segs...)
		err := c.schema(v, depth+1, n)
		c.segments = c.segments[:len(c.segments)-len(segs)]
		return err
	}
	for _, kw := range obj.Keys {
		val := obj.Vals[kw]
		switch {
		case kw == "items":
			if list, ok := val.([]any); ok {
				for i, sub := range list {
					if err := child(sub, kw, strconv.Itoa(i)); err != nil {
						return err
					}
				}
				continue
			}
			if err := child(val, kw); err != nil {
				return err
			}
		case slices.Contains(schemaKeywords, kw):
			if err := child(val, kw); err != nil {
				return err
			}
		case slices.Contains(schemaListKeywords, kw):
			list, _ := val.([]any)
			for i, sub := range list {
				if err := child(sub, kw, strconv.Itoa(i)); err != nil {
					return err
				}
			}
		case slices.Contains(schemaMapKeywords, kw):
			m, ok := val.(*jsontree.Object)
			if !ok {
				continue
			}
			if (kw == "properties" || kw == "patternProperties") && len(m.Keys) > MaxProperties {
				return fmt.Errorf("%q at %s has %d entries; the limit is %d", kw, c.ptr(), len(m.Keys), MaxProperties)
			}
			for _, name := range m.Keys {
				if kw == "patternProperties" {
					if err := c.pattern(name, kw); err != nil {
						return err
					}
				}
				if err := child(m.Vals[name], kw, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonTypes are the names JSON Schema allows in "type".
var jsonTypes = []string{"null", "boolean", "object", "array", "number", "string", "integer"}

// keywords checks the keywords of one subschema that are not subschemas.
func (c *limitChecker) keywords(obj *jsontree.Object) error {
	// A misspelt type: jsonschema-go accepts it and then rejects every value, which
	// would make the tool uncallable.
	types, _ := obj.Vals["type"].([]any)
	if t, ok := obj.Vals["type"].(string); ok {
		types = []any{t}
	}
	for _, t := range types {
		if t, ok := t.(string); ok && !slices.Contains(jsonTypes, t) {
			where := ""
			if len(c.segments) > 0 {
				where = " at " + c.ptr()
			}
			return fmt.Errorf("unknown type %q%s", t, where)
		}
	}
	if p, ok := obj.Vals["pattern"].(string); ok {
		if err := c.pattern(p, "pattern"); err != nil {
			return err
		}
	}
	if e, ok := obj.Vals["enum"].([]any); ok && len(e) > MaxEnum {
		return fmt.Errorf(`"enum" at %s has %d values; the limit is %d`, c.ptr(), len(e), MaxEnum)
	}
	for _, kw := range integerKeywords {
		n, ok := obj.Vals[kw].(json.Number)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || f < 0 || f != math.Trunc(f) || f > maxKeywordInteger {
			return fmt.Errorf("%q at %s must be a non-negative integer of at most 2^53, got %s", kw, c.ptr(), jsontree.Truncate(string(n), 40))
		}
	}
	for _, kw := range numberKeywords {
		n, ok := obj.Vals[kw].(json.Number)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%q at %s must be a finite number, got %s", kw, c.ptr(), jsontree.Truncate(string(n), 40))
		}
		if kw == "multipleOf" && f <= 0 {
			return fmt.Errorf(`"multipleOf" at %s must be greater than 0, got %s`, c.ptr(), n)
		}
	}
	return nil
}

// pattern checks the size of one regular expression, and of its program. One that does
// not parse is left to the validator's compiler, which says why.
func (c *limitChecker) pattern(p, kw string) error {
	where := c.ptr()
	if kw == "patternProperties" {
		where = c.ptr(kw, p)
		kw = "a key of patternProperties"
	} else {
		kw = strconv.Quote(kw)
	}
	if len(p) > MaxPatternBytes {
		return fmt.Errorf("%s at %s is %d bytes long; the limit is %d", kw, where, len(p), MaxPatternBytes)
	}
	n, ok := patternProgram(p)
	if !ok {
		return nil
	}
	c.programs[p] = n
	if n > MaxPatternInstructions {
		return fmt.Errorf("%s at %s compiles to %d instructions; the limit is %d", kw, where, n, MaxPatternInstructions)
	}
	if c.patternInstructions += n; c.patternInstructions > MaxTotalPatternInstructions {
		return fmt.Errorf("the schema's regular expressions compile to more than %d instructions in all (at %s); the limit is %d",
			MaxTotalPatternInstructions, where, MaxTotalPatternInstructions)
	}
	return nil
}

// patternProgram returns the number of instructions a regular expression compiles to,
// as regexp compiles it, or false when it does not compile.
func patternProgram(p string) (int, bool) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return 0, false
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, false
	}
	return len(prog.Inst), true
}

// keywordNames are the keywords jsonschema-go decodes.
var keywordNames = sync.OnceValue(func() []string {
	names := []string{"type", "items", "dependencies", "const"}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[jsonschema.Schema]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
})

// foldedKeyword returns the keyword that kw spells in other case. The validator's
// decoder (encoding/json) matches keywords regardless of case, so "AllOf" would be
// applied as allOf while the checks here, which go by the exact keyword, did not see
// its subschemas.
func foldedKeyword(kw string) (string, bool) {
	for _, name := range keywordNames() {
		if kw != name && strings.EqualFold(kw, name) {
			return name, true
		}
	}
	return "", false
}
