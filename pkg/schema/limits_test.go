package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// Hostile schemas, as a worker or an MCP server could register them.

// nested is a schema whose property "a" nests n levels deep.
func nested(n int) string {
	return `{"type":"object","properties":{"a":` + strings.Repeat(`{"properties":{"a":`, n-1) + `{}` + strings.Repeat(`}}`, n-1) + `}}`
}

// withAllOf is a schema of n subschemas: the root and n-1 empty ones in an allOf.
func withAllOf(n int) string {
	return `{"type":"object","allOf":[` + strings.TrimSuffix(strings.Repeat(`{},`, n-1), ",") + `]}`
}

// withProperties is a schema with n properties, each of them given by sub, and the
// root's other keywords in rest (which ends in a comma).
func withProperties(n int, sub func(i int) string, rest ...string) string {
	var b strings.Builder
	b.WriteString(`{"type":"object",` + strings.Join(rest, "") + `"properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":%s`, i, sub(i))
	}
	b.WriteString(`}}`)
	return b.String()
}

// withPatternProperties is a schema with n patternProperties.
func withPatternProperties(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf(`"^p%d$":{}`, i)
	}
	return `{"type":"object","patternProperties":{` + strings.Join(ps, ",") + `}}`
}

// laughs is a "billion laughs": n definitions, each applying the next one twice to the
// same value, or to its items when items is set.
func laughs(n int, items bool) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"$defs":{`)
	for i := range n {
		ref := fmt.Sprintf(`{"$ref":"#/$defs/d%d"}`, i+1)
		if items {
			ref = `{"items":` + ref + `}`
		}
		fmt.Fprintf(&b, `"d%d":{"allOf":[%s,%s]},`, i, ref, ref)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return b.String()
}

// refChain is a schema whose root applies a chain of n definitions, one after the
// other, to itself.
func refChain(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","$ref":"#/$defs/d0","$defs":{`)
	for i := range n - 1 {
		fmt.Fprintf(&b, `"d%d":{"$ref":"#/$defs/d%d"},`, i, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"required":["a"]}}}`, n-1)
	return b.String()
}

func enumOf(n int) string {
	return `{"type":"object","properties":{"a":{"enum":[` + strings.TrimSuffix(strings.Repeat(`"v",`, n), ",") + `]}}}`
}

// patternsOf is a schema with n properties, each with the pattern p.
func patternsOf(n int, p string) string {
	return withProperties(n, func(int) string { return `{"type":"string","pattern":` + jsontree.Quote(p) + `}` })
}

// treeSchema is a recursive schema: a tree of nodes, each with a value and children.
const treeSchema = `{"type":"object","properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"],"$defs":{"node":{
	"type":"object","properties":{"value":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
	"required":["value"],"additionalProperties":false}}}`

// tree is arguments for treeSchema: a tree of n nodes, each node's children the
// next ones, fanout at a time, down to depth levels.
func tree(depth, fanout int, leaf string) string {
	if depth == 0 {
		return `{"value":` + leaf + `}`
	}
	kids := make([]string, fanout)
	for i := range kids {
		kids[i] = tree(depth-1, fanout, leaf)
	}
	return `{"value":"n","children":[` + strings.Join(kids, ",") + `]}`
}

func TestHostileSchemas(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // the error, without "invalid input schema: " (a prefix of it when it ends in *); empty when the schema compiles
	}{
		{"over MaxBytes", `{"type":"object","description":"` + strings.Repeat("x", MaxBytes) + `"}`, `schema is 65570 bytes; the limit is 65536`},
		{
			"JSON nested over MaxJSONDepth",
			`{"type":"object","default":` + strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth) + `}`,
			`objects and arrays nest more than 192 levels deep`,
		},
		{"subschemas at MaxDepth", nested(MaxDepth), ""},
		{
			"subschemas just over MaxDepth",
			nested(MaxDepth + 1),
			`subschemas nest more than 64 levels deep at /properties/a` + strings.Repeat(`/properties/a`, 14) + `/prop…; the limit is 64`,
		},
		{"MaxNodes subschemas", withAllOf(MaxNodes), ""},
		{"MaxNodes+1 subschemas", withAllOf(MaxNodes + 1), `the schema has more than 2000 subschemas; the limit is 2000`},
		{"MaxProperties properties", withProperties(MaxProperties, func(int) string { return `{}` }), ""},
		{
			"MaxProperties+1 properties",
			withProperties(MaxProperties+1, func(int) string { return `{}` }),
			`"properties" at the root has 1001 entries; the limit is 1000`,
		},
		{
			// The JSON of 10,000 properties is over MaxBytes already, which FromJSON
			// checks first: an MCP server's schema has no other bound on its size.
			"10,000 properties",
			withProperties(10_000, func(int) string { return `{}` }),
			`schema is 108922 bytes; the limit is 65536`,
		},
		{"MaxProperties patternProperties", withPatternProperties(MaxProperties), ""},
		{
			"MaxProperties+1 patternProperties",
			withPatternProperties(MaxProperties + 1),
			`"patternProperties" at the root has 1001 entries; the limit is 1000`,
		},
		{"$ref to itself", `{"type":"object","$ref":"#"}`, `$ref loop: the root → the root applies to the same value again and again; a reference back must pass through properties or items`},
		{
			"$ref cycle between definitions",
			`{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/a"}]}}}`,
			`$ref loop: /$defs/a → /$defs/b → /$defs/b/anyOf/1 → /$defs/a applies to the same value again and again; a reference back must pass through properties or items`,
		},
		{
			"$ref cycle through an anchor",
			`{"type":"object","$anchor":"top","not":{"$ref":"#top"}}`,
			`$ref loop: the root → /not → the root applies to the same value again and again; a reference back must pass through properties or items`,
		},
		{
			"$ref cycle through $id",
			`{"$id":"https://example.com/r.json","type":"object","$ref":"s.json","$defs":{"s":{"$id":"s.json","$ref":"r.json"}}}`,
			`$ref loop: the root → /$defs/s → the root applies to the same value again and again; a reference back must pass through properties or items`,
		},
		{
			// jsonschema-go keeps the last of the two with the same $id, in an order
			// of its own: here the one that loops.
			"$ref cycle through an $id used twice",
			`{"$id":"https://example.com/r.json","type":"object","$ref":"s.json","properties":{"a":{"$id":"s.json","$ref":"r.json"}},"$defs":{"b":{"$id":"s.json","type":"string"}}}`,
			`$ref loop: the root → /properties/a → the root applies to the same value again and again; a reference back must pass through properties or items`,
		},
		{
			"$dynamicRef cycle",
			`{"type":"object","$dynamicAnchor":"n","allOf":[{"$dynamicRef":"#n"}]}`,
			`$ref loop: the root → /allOf/0 → the root applies to the same value again and again; a reference back must pass through properties or items`,
		},
		{"an unused definition that loops", `{"type":"object","$defs":{"a":{"$ref":"#/$defs/a"}}}`, ""},
		{"billion laughs", laughs(30, false), `validating one value against /$defs/d17 could take more than 100000 checks (its subschemas and references multiply); the limit is 100000`},
		{"billion laughs through items", laughs(30, true), `validating a value 14 levels down could take more than 100000 checks (the subschemas and references multiply); the limit is 100000`},
		{"one definition referenced 1000 times", withProperties(MaxProperties, func(int) string { return `{"$ref":"#/$defs/d"}` }, `"$defs":{"d":{"$ref":"#/$defs/e"},"e":{"type":"string"}},`), ""},
		{"a chain of 64 $refs", refChain(MaxDepth), ""},
		{
			"a chain of 65 $refs",
			refChain(MaxDepth + 1),
			`a chain of more than 64 subschemas ($ref, allOf, anyOf, oneOf, not, if, then, else) applies to one value, from the root; the limit is 64`,
		},
		{"file $ref", `{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`, `$ref "file:///etc/passwd" points outside the schema; only references within it are allowed`},
		{"http $ref", `{"type":"object","properties":{"a":{"$ref":"http://169.254.169.254/latest/meta-data"}}}`, `$ref "http://169.254.169.254/latest/meta-data" points outside the schema; only references within it are allowed`},
		{"https $ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json#/x"}}}`, `$ref "https://example.com/s.json" points outside the schema; only references within it are allowed`},
		{"urn $ref", `{"type":"object","properties":{"a":{"$ref":"urn:example:schema"}}}`, `$ref "urn:example:schema" points outside the schema; only references within it are allowed`},
		{"pattern of MaxPatternBytes", patternsOf(1, strings.Repeat("a", MaxPatternBytes)), ""},
		{
			"pattern over MaxPatternBytes",
			patternsOf(1, strings.Repeat("a", MaxPatternBytes+1)),
			`"pattern" at /properties/p0 is 1025 bytes long; the limit is 1024`,
		},
		{
			"pattern over MaxPatternInstructions",
			patternsOf(1, `\pL{1000}\pL{1000}`),
			`"pattern" at /properties/p0 compiles to 2002 instructions; the limit is 2000`,
		},
		{
			"patternProperties key over MaxPatternInstructions",
			`{"type":"object","patternProperties":{"^\\pL{1000}\\pL{1000}$":{}}}`,
			`a key of patternProperties at /patternProperties/^\pL{1000}\pL{1000}$ compiles to 2004 instructions; the limit is 2000`,
		},
		{"patterns at MaxTotalPatternInstructions", patternsOf(5, `\pL{999}\pL{999}`), ""},
		{
			"patterns over MaxTotalPatternInstructions",
			patternsOf(6, `\pL{999}\pL{999}`),
			`the schema's regular expressions compile to more than 10000 instructions in all (at /properties/p5); the limit is 10000`,
		},
		{"enum of MaxEnum values", enumOf(MaxEnum), ""},
		{"enum over MaxEnum values", enumOf(MaxEnum + 1), `"enum" at /properties/a has 1001 values; the limit is 1000`},
		{
			"JSON pointers over MaxPathBytes",
			`{"type":"object","properties":{"a":` + strings.Repeat(`{"properties":{"`+strings.Repeat("k", 900)+`":`, 63) + `{}` + strings.Repeat(`}}`, 63) + `}}`,
			`the JSON pointers of the subschemas add up to more than 1048576 bytes (at /properties/a/properties/kkkk*`,
		},
		{"minLength too large", `{"type":"object","properties":{"a":{"minLength":1e300}}}`, `"minLength" at /properties/a must be a non-negative integer of at most 2^53, got 1e300`},
		{"maxLength over int64", `{"type":"object","properties":{"a":{"maxLength":9223372036854775808}}}`, `"maxLength" at /properties/a must be a non-negative integer of at most 2^53, got 9223372036854775808`},
		{"minItems negative", `{"type":"object","properties":{"a":{"minItems":-1}}}`, `"minItems" at /properties/a must be a non-negative integer of at most 2^53, got -1`},
		{"maxProperties fractional", `{"type":"object","maxProperties":1.5}`, `"maxProperties" at the root must be a non-negative integer of at most 2^53, got 1.5`},
		{"maxItems written as a float", `{"type":"object","properties":{"a":{"maxItems":2.0}}}`, ""},
		{"maximum out of range", `{"type":"object","properties":{"a":{"maximum":1e400}}}`, `"maximum" at /properties/a must be a finite number, got 1e400`},
		{"multipleOf zero", `{"type":"object","properties":{"a":{"multipleOf":0}}}`, `"multipleOf" at /properties/a must be greater than 0, got 0`},
		{"recursive tree", treeSchema, ""},
		{
			// encoding/json would decode "AllOf" as allOf, out of sight of the checks.
			"a keyword in other case",
			`{"type":"object","properties":{"a":{"AllOf":[{"$ref":"#/properties/a"}]}}}`,
			`"AllOf" at /properties/a is not a keyword: JSON Schema keywords are case-sensitive (did you mean "allOf"?)`,
		},
		{
			"mutually recursive definitions through properties",
			`{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"object","properties":{"b":{"$ref":"#/$defs/b"}}},"b":{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}}}}}`,
			"",
		},
		{"$dynamicRef recursion", `{"type":"object","$dynamicAnchor":"n","properties":{"a":{"$dynamicRef":"#n"}}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromJSON([]byte(tt.in))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("FromJSON: %v", err)
				}
				if s.graph.valueChecks > MaxValueChecks {
					t.Errorf("the schema compiled, but validating one value may take %d checks", s.graph.valueChecks)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("FromJSON error = %v, want ErrInvalid", err)
			}
			got, want := err.Error(), "invalid input schema: "+tt.want
			if prefix, ok := strings.CutSuffix(want, "*"); ok && strings.HasPrefix(got, prefix) {
				return
			}
			if got != want {
				t.Errorf("FromJSON error:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// capPattern is the longest pattern of the form it tries that compiles within
// MaxPatternInstructions.
func capPattern() string {
	for n := 1000; n > 0; n-- {
		p := fmt.Sprintf(`^[\pL\pN _-]{1,%d}$`, n)
		if size, _ := patternProgram(p); size <= MaxPatternInstructions {
			return p
		}
	}
	panic("no pattern fits")
}

// atCapsSchema is a schema at the limits: MaxNodes subschemas, MaxProperties
// properties, MaxTotalPatternInstructions of patterns in patterns of
// MaxPatternInstructions, an enum of MaxEnum values, subschemas nested MaxDepth deep,
// a recursive definition, and a definition of thousands of subschemas that applies to
// the root. It is the worst a worker could register.
func atCapsSchema() string {
	build := func(fill int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","allOf":[{"$ref":"#/$defs/f"}],"properties":{`)
		defs := []string{"s0", "s1", "s2", "s3", "s4", "e", "t", "d"}
		for i := range MaxProperties {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"$ref":"#/$defs/%s"}`, i, defs[i%len(defs)])
		}
		b.WriteString(`},"$defs":{`)
		for i := range MaxTotalPatternInstructions / MaxPatternInstructions {
			fmt.Fprintf(&b, `"s%d":{"type":"string","maxLength":4096,"pattern":%s},`, i, jsontree.Quote(capPattern()))
		}
		b.WriteString(`"e":{"enum":[` + strings.TrimSuffix(strings.Repeat(`"v",`, MaxEnum), ",") + `]},`)
		b.WriteString(`"t":{"type":"object","properties":{"value":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["value"]},`)
		b.WriteString(`"d":` + strings.Repeat(`{"type":"array","items":`, MaxDepth-1) + `{"type":"integer"}` + strings.Repeat(`}`, MaxDepth-1) + `,`)
		b.WriteString(`"f":{"allOf":[` + strings.TrimSuffix(strings.Repeat(`{},`, fill), ",") + `]}}}`)
		return b.String()
	}
	tree, err := jsontree.Decode([]byte(build(0)), MaxJSONDepth)
	if err != nil {
		panic(err)
	}
	c := newLimitChecker()
	if err := c.schema(tree, 0, len("root")); err != nil {
		panic(err)
	}
	return build(MaxNodes - c.nodes)
}

func TestSchemaAtTheCaps(t *testing.T) {
	js := atCapsSchema()
	if len(js) > MaxBytes {
		t.Fatalf("the schema is %d bytes, over MaxBytes", len(js))
	}
	tree, err := jsontree.Decode([]byte(js), MaxJSONDepth)
	if err != nil {
		t.Fatal(err)
	}
	c := newLimitChecker()
	if err := c.schema(tree, 0, len("root")); err != nil {
		t.Fatal(err)
	}
	size, _ := patternProgram(capPattern())
	patterns := MaxTotalPatternInstructions / MaxPatternInstructions
	if c.nodes != MaxNodes || c.patternInstructions != patterns*size || size > MaxPatternInstructions || size < MaxPatternInstructions-10 {
		t.Errorf("the schema has %d subschemas and %d pattern instructions (patterns of %d), want %d, and patterns of nearly %d",
			c.nodes, c.patternInstructions, size, MaxNodes, MaxPatternInstructions)
	}
	s, err := FromJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if s.graph.valueChecks > MaxValueChecks {
		t.Errorf("validating one value may take %d checks, over MaxValueChecks", s.graph.valueChecks)
	}
	t.Logf("%d bytes; validating one value may take %d checks", len(js), s.graph.valueChecks)

	for _, tt := range []struct{ in, err string }{
		{in: `{"p0":"Lisbon","p5":"v","p6":{"value":"a","children":[{"value":"b"}]},"p7":[[[]]]}`},
		{in: `{"p0":"Lisbon!"}`, err: `invalid arguments: property "p0": pattern: "Lisbon!" does not match regular expression ` + jsontree.Quote(capPattern())},
		{in: `{"p5":"w"}`, err: `invalid arguments: property "p5": enum: w does not equal any of: [v v v v v v v v v v`},
		{in: `{"p6":{"value":"a","children":[{"value":1}]}}`, err: `invalid arguments: property "p6.children[].value": type: 1 has type "integer", want "string"`},
	} {
		_, err := s.Validate(tt.in)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("Validate(%s) = %v, want %s…", tt.in, jsontree.Truncate(fmt.Sprint(err), 300), tt.err)
		}
	}
}

// A recursive schema validates, at any depth arguments may have, and the work it
// counts grows with the arguments, not faster.
func TestRecursiveSchemaValidates(t *testing.T) {
	s, err := FromJSON([]byte(treeSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ in, err string }{
		{in: `{"root":` + tree(3, 3, `"leaf"`) + `}`},
		// The deepest arguments may nest: 64 objects and arrays, the root included.
		{in: `{"root":` + tree(31, 1, `"leaf"`) + `}`},
		{in: `{"root":` + tree(4, 2, `1`) + `}`, err: `invalid arguments: property "root.children[].children[].children[].children[].value": type: 1 has type "integer", want "string"`},
		{in: `{"root":{"value":"a","children":[{"value":"b","extra":1}]}}`, err: `invalid arguments: property "root.children[]": unexpected additional properties ["extra"]`},
		{in: `{"root":` + tree(32, 1, `"leaf"`) + `}`, err: `invalid arguments: objects and arrays nest more than 64 levels deep`},
	} {
		_, err := s.Validate(tt.in)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || err.Error() != tt.err) {
			t.Errorf("Validate(%.80s…) = %v, want %s", tt.in, err, tt.err)
		}
	}

	// The work counted for a tree: never more for a node than what
	// MaxValidationChecksPerByte allows for its bytes, so that a tree of any size and
	// depth is checked. (Deeper nodes count more: the validator copies an error once
	// for each level above it.)
	for _, shape := range []struct{ depth, fanout int }{{1, 3}, {3, 3}, {6, 3}, {9, 3}, {15, 1}, {31, 1}, {5, 10}} {
		in := `{"root":` + tree(shape.depth, shape.fanout, `"leaf"`) + `}`
		v, err := jsontree.Decode([]byte(in), jsontree.MaxArgumentDepth)
		if err != nil {
			t.Fatal(err)
		}
		spent, ok := s.graph.spend(v, validationBudget(len(in)))
		if !ok || spent > MaxValidationChecksPerByte*int64(len(in)) {
			t.Errorf("a tree %d deep, %d children a node (%d bytes), counts %d checks (within the budget: %v), over %d a byte",
				shape.depth, shape.fanout, len(in), spent, ok, MaxValidationChecksPerByte)
		}
	}
}

// wideAnyOf is the schema of the most costly checks the limits allow for each counted
// check: items that fail all but the last of the alternatives of an anyOf, the
// validator writing an error for each.
var wideAnyOf = `{"type":"object","properties":{"a":{"type":"array","items":{"anyOf":[` + strings.Repeat(`{"type":"string"},`, 99) + `{}]}}}}`

const wideAnyOfItem = `{"b":[1,2,3,4,5,6,7,8,9,10],"c":{"d":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"}}`

// largestWithinBudget returns the arguments with the most items, item each, that s
// checks within its budget, and those with twice as many.
func largestWithinBudget(t testing.TB, s Schema, item string, maxBytes int) (within, over string) {
	args := func(n int) string { return `{"a":[` + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + `]}` }
	for n := 1; ; n *= 2 {
		in := args(2 * n)
		v, err := jsontree.Decode([]byte(in), jsontree.MaxArgumentDepth)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.graph.spend(v, validationBudget(len(in))); !ok || len(in) > maxBytes {
			return args(n), in
		}
	}
}

func TestValidationBudget(t *testing.T) {
	s, err := FromJSON([]byte(wideAnyOf))
	if err != nil {
		t.Fatal(err)
	}
	within, over := largestWithinBudget(t, s, wideAnyOfItem, 1<<20)
	if _, err := s.Validate(within); err != nil {
		t.Errorf("Validate(%d bytes): %v", len(within), err)
	}
	want := fmt.Sprintf("invalid arguments: they would take too long to check against this schema (more than %d checks); send fewer or shorter values", validationBudget(len(over)))
	if _, err := s.Validate(over); err == nil || err.Error() != want {
		t.Errorf("Validate(%d bytes) = %v, want %s", len(over), err, want)
	}
	v, err := ValueFromJSON([]byte(wideAnyOf))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Validate(over); !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), "too long to check") {
		t.Errorf("Value.Validate(%d bytes) = %v, want the budget's error", len(over), err)
	}
}

func TestValueFromJSONLimits(t *testing.T) {
	for _, in := range []string{nested(MaxDepth + 1), withAllOf(MaxNodes + 1), `{"$ref":"#"}`, laughs(30, false), enumOf(MaxEnum + 1)} {
		if _, err := ValueFromJSON([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValueFromJSON(%.60s…) error = %v, want ErrInvalid", in, err)
		}
	}
	if _, err := ValueFromJSON([]byte(`{"type":"array","items":{"$ref":"#"}}`)); err != nil {
		t.Errorf("ValueFromJSON of a recursive array schema: %v", err)
	}
}
