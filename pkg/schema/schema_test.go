package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

const emptyJSON = `{"type":"object","properties":{}}`

func TestEmptySchema(t *testing.T) {
	for name, s := range map[string]schema.Schema{
		"Empty":      schema.Empty(),
		"zero value": {},
		"Params()":   schema.Params(),
	} {
		if got := s.String(); got != emptyJSON {
			t.Errorf("%s.String() = %s, want %s", name, got, emptyJSON)
		}
		if got := string(s.JSON()); got != emptyJSON {
			t.Errorf("%s.JSON() = %s, want %s", name, got, emptyJSON)
		}
		if got := s.Parameters(); got != nil {
			t.Errorf("%s.Parameters() = %v, want nil", name, got)
		}
	}
}

func TestSchemaJSONIsACopy(t *testing.T) {
	s := schema.Params(schema.String("a", ""))
	b := s.JSON()
	b[0] = 'X'
	if got := s.String(); got[0] != '{' {
		t.Errorf("changing the JSON() result changed the schema: %s", got)
	}
}

func TestSchemaFromJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"minimal", `{"type":"object"}`, `{"type":"object"}`},
		{
			"whitespace dropped, key order kept",
			"{\n  \"type\": \"object\",\n  \"required\": [\"b\"],\n  \"properties\": {\"b\": {\"type\": \"string\"}, \"a\": {\"type\": \"number\"}}\n}",
			`{"type":"object","required":["b"],"properties":{"b":{"type":"string"},"a":{"type":"number"}}}`,
		},
		{
			"no HTML escaping",
			`{"type":"object","description":"a \u003c b & c > d"}`,
			`{"type":"object","description":"a < b & c > d"}`,
		},
		{
			"local $ref",
			`{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}}`,
			`{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}}`,
		},
		{
			"draft-07",
			`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`,
			`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`,
		},
		{"numbers verbatim", `{"type":"object","maxProperties":1.0E2}`, `{"type":"object","maxProperties":1.0E2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := schema.FromJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("FromJSON(%s): %v", tt.in, err)
			}
			if got := s.String(); got != tt.want {
				t.Errorf("FromJSON(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestSchemaFromJSONErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"blank", " \n", "invalid input schema: schema is empty"},
		{"invalid JSON", `{"type":`, "invalid input schema: invalid JSON: unexpected end of input at offset 8"},
		{"not an object", `[]`, "invalid input schema: schema must be a JSON object, got array"},
		{"boolean schema", `true`, "invalid input schema: schema must be a JSON object, got boolean"},
		{"no type", `{"properties":{}}`, `invalid input schema: schema must have "type": "object"`},
		{"type not object", `{"type":"string"}`, `invalid input schema: schema "type" must be "object", got "string"`},
		{"type list", `{"type":["object","null"]}`, `invalid input schema: schema "type" must be "object", got ["object","null"]`},
		{"duplicate key", `{"type":"object","type":"object"}`, `invalid input schema: duplicate key "type"`},
		{
			"nested duplicate key",
			`{"type":"object","properties":{"a":{"type":"string","type":"number"}}}`,
			`invalid input schema: duplicate key "type" in property "properties.a"`,
		},
		{"misspelt nested type", `{"type":"object","properties":{"a":{"type":"strin"}}}`, `invalid input schema: unknown type "strin" at /properties/a`},
		{"keyword of wrong type", `{"type":"object","properties":{"a":3}}`, `invalid input schema: keyword "properties" must not be a number`},
		{"unsupported draft", `{"$schema":"https://example.com/s","type":"object"}`, `invalid input schema: unsupported $schema "https://example.com/s" (supported: draft 2020-12 and draft-07)`},
		{
			// jsonschema-go refuses remote references when no Loader is given; this
			// pins that guarantee.
			"remote $ref",
			`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`,
			`invalid input schema: $ref "https://example.com/a.json" points outside the schema; only references within it are allowed`,
		},
		{
			"file $ref",
			`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`,
			`invalid input schema: $ref "file:///etc/passwd" points outside the schema; only references within it are allowed`,
		},
		{
			"relative $ref",
			`{"type":"object","properties":{"a":{"$ref":"other.json#/x"}}}`,
			`invalid input schema: $ref "/other.json" points outside the schema; only references within it are allowed`,
		},
		{
			"remote $ref under an $id",
			`{"$id":"https://example.com/root.json","type":"object","properties":{"a":{"$ref":"b.json"}}}`,
			`invalid input schema: $ref "https://example.com/b.json" points outside the schema; only references within it are allowed`,
		},
		{"dangling local $ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`, ""},
		{"bad pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.FromJSON([]byte(tt.in))
			if !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("FromJSON(%s) error = %v, want ErrInvalid", tt.in, err)
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("FromJSON(%s) error:\n got %s\nwant %s", tt.in, err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	simple := schema.Params(
		schema.String("name", "Name"),
		schema.Integer("count", "").AsOptional(),
		schema.String("color", "").WithEnum("red", "green", "blue").AsOptional(),
		schema.Object("address", "", schema.String("city", ""), schema.Array("tags", "", schema.TypeString).AsOptional()).AsOptional(),
	)
	strict := mustSchema(t, `{"type":"object","properties":{
		"a":{"type":"number","minimum":1,"maximum":10},
		"b":{"type":"string","minLength":2,"maxLength":3,"pattern":"^x"},
		"c":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2},
		"d":{"type":["string","null"]},
		"e":{"const":"fixed"},
		"f":{"type":"number","exclusiveMinimum":0,"multipleOf":0.5},
		"g":{"type":"object","properties":{"x":{"type":"boolean"}},"additionalProperties":false}
	},"additionalProperties":false}`)
	tests := []struct {
		name   string
		schema schema.Schema
		in     string
		want   string // canonical output
		err    string // full error text, when the input is rejected
	}{
		// Accepted input and its canonical form.
		{name: "blank is {}", schema: schema.Empty(), in: "", want: `{}`},
		{name: "whitespace is {}", schema: schema.Empty(), in: " \t\r\n ", want: `{}`},
		{name: "empty object", schema: schema.Empty(), in: `{}`, want: `{}`},
		{name: "empty schema accepts any object", schema: schema.Schema{}, in: `{"x":[1,{"y":null}]}`, want: `{"x":[1,{"y":null}]}`},
		{
			name:   "keys sorted at every depth, numbers verbatim, no HTML escaping",
			schema: schema.Empty(),
			in:     "{ \"b\": 1.50, \"a\": {\"z\": 1e2, \"y\": \"<&>\"},\n \"c\": [3, 2] }",
			want:   `{"a":{"y":"<&>","z":1e2},"b":1.50,"c":[3,2]}`,
		},
		{name: "unicode escapes decoded", schema: schema.Empty(), in: `{"a":"\u00e9\n"}`, want: `{"a":"é\n"}`},
		{name: "required only", schema: simple, in: `{"name":"x"}`, want: `{"name":"x"}`},
		{
			name:   "all properties",
			schema: simple,
			in:     `{"name":"x","count":3,"color":"red","address":{"city":"Oslo","tags":["a"]}}`,
			want:   `{"address":{"city":"Oslo","tags":["a"]},"color":"red","count":3,"name":"x"}`,
		},
		{name: "integer written as 3.0", schema: simple, in: `{"name":"x","count":3.0}`, want: `{"count":3.0,"name":"x"}`},
		{name: "extra property allowed by default", schema: simple, in: `{"name":"x","extra":1}`, want: `{"extra":1,"name":"x"}`},
		{name: "nullable type", schema: strict, in: `{"d":null}`, want: `{"d":null}`},
		{name: "big integer kept exactly", schema: schema.Empty(), in: `{"n":12345678901234567890123}`, want: `{"n":12345678901234567890123}`},

		// Syntax.
		{name: "invalid JSON", schema: simple, in: `{"name": "x"`, err: `invalid arguments: invalid JSON: unexpected end of input at offset 12`},
		{name: "bad token", schema: simple, in: `{name: "x"}`, err: `invalid arguments: invalid JSON: invalid character 'n' looking for beginning of object key string at offset 2`},
		{name: "trailing data", schema: simple, in: `{"name":"x"} {}`, err: `invalid arguments: invalid JSON: invalid character '{' after top-level value at offset 14`},
		{name: "invalid UTF-8", schema: simple, in: "{\"name\":\"a\xffb\"}", err: `invalid arguments: invalid JSON: invalid UTF-8 at offset 10`},
		{name: "duplicate key", schema: simple, in: `{"name":"a","name":"b"}`, err: `invalid arguments: duplicate key "name"`},
		{name: "duplicate key after escapes", schema: simple, in: `{"name":"a","n\u0061me":"b"}`, err: `invalid arguments: duplicate key "name"`},
		{
			name:   "nested duplicate key",
			schema: simple,
			in:     `{"name":"a","address":{"city":"x","list":[{"k":1,"k":2}]}}`,
			err:    `invalid arguments: duplicate key "k" in property "address.list[0]"`,
		},
		{name: "array top level", schema: simple, in: `[]`, err: `invalid arguments: arguments must be a JSON object, got array`},
		{name: "string top level", schema: simple, in: `"x"`, err: `invalid arguments: arguments must be a JSON object, got string`},
		{name: "null top level", schema: simple, in: `null`, err: `invalid arguments: arguments must be a JSON object, got null`},
		{
			name:   "nesting at the limit",
			schema: schema.Empty(),
			in:     `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
			want:   `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
		},
		{
			// Deep input against a recursive anyOf would make jsonschema-go slow.
			name:   "nesting beyond the limit",
			schema: mustSchema(t, `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#/properties/a"}}]}}}`),
			in:     `{"a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`,
			err:    `invalid arguments: objects and arrays nest more than 64 levels deep`,
		},
		{name: "number out of range", schema: simple, in: `{"name":"x","count":1e400}`, err: `invalid arguments: property "count": number 1e400 is out of range`},

		// Schema violations.
		{name: "blank with required property", schema: simple, in: ``, err: `invalid arguments: missing required property "name"`},
		{name: "missing required", schema: simple, in: `{"count":1}`, err: `invalid arguments: missing required property "name"`},
		{
			name:   "several missing",
			schema: schema.Params(schema.String("a", ""), schema.String("b", "")),
			in:     `{}`,
			err:    `invalid arguments: missing required properties "a", "b"`,
		},
		{name: "missing nested required", schema: simple, in: `{"name":"x","address":{}}`, err: `invalid arguments: missing required property "address.city"`},
		{name: "wrong type", schema: simple, in: `{"name":1}`, err: `invalid arguments: property "name": expected string, got integer`},
		{name: "number for integer", schema: simple, in: `{"name":"x","count":1.5}`, err: `invalid arguments: property "count": expected integer, got number`},
		{name: "string for integer", schema: simple, in: `{"name":"x","count":"5"}`, err: `invalid arguments: property "count": expected integer, got string`},
		{name: "null for string", schema: simple, in: `{"name":null}`, err: `invalid arguments: property "name": expected string, got null`},
		{name: "wrong nested item type", schema: simple, in: `{"name":"x","address":{"city":"c","tags":["a",2]}}`, err: `invalid arguments: property "address.tags[1]": expected string, got integer`},
		{
			name:   "enum violation",
			schema: simple,
			in:     `{"name":"x","color":"purple"}`,
			err:    `invalid arguments: property "color": "purple" is not one of "red", "green", "blue"`,
		},
		{name: "extra property", schema: strict, in: `{"z":1}`, err: `invalid arguments: unexpected property "z"; allowed: "a", "b", "c", "d", "e", "f", "g"`},
		{name: "extra properties", schema: strict, in: `{"z":1,"y":2}`, err: `invalid arguments: unexpected properties "z", "y"; allowed: "a", "b", "c", "d", "e", "f", "g"`},
		{name: "nested extra property", schema: strict, in: `{"g":{"x":true,"q":1}}`, err: `invalid arguments: unexpected property "g.q"; allowed: "x"`},
		{name: "below minimum", schema: strict, in: `{"a":0.5}`, err: `invalid arguments: property "a": 0.5 is less than the minimum 1`},
		{name: "above maximum", schema: strict, in: `{"a":11}`, err: `invalid arguments: property "a": 11 is greater than the maximum 10`},
		{name: "too short", schema: strict, in: `{"b":"x"}`, err: `invalid arguments: property "b": must be at least 2 characters long, got 1`},
		{name: "too long", schema: strict, in: `{"b":"xéxé"}`, err: `invalid arguments: property "b": must be at most 3 characters long, got 4`},
		{name: "pattern", schema: strict, in: `{"b":"ab"}`, err: `invalid arguments: property "b": "ab" does not match the pattern "^x"`},
		{name: "too few items", schema: strict, in: `{"c":[]}`, err: `invalid arguments: property "c": must have at least 1 item, got 0`},
		{name: "too many items", schema: strict, in: `{"c":[1,2,3]}`, err: `invalid arguments: property "c": must have at most 2 items, got 3`},
		{name: "type list", schema: strict, in: `{"d":1}`, err: `invalid arguments: property "d": expected string or null, got integer`},
		{name: "const", schema: strict, in: `{"e":"other"}`, err: `invalid arguments: property "e": must be "fixed", got "other"`},
		{name: "exclusive minimum", schema: strict, in: `{"f":0}`, err: `invalid arguments: property "f": 0 must be greater than 0`},
		{name: "multiple of", schema: strict, in: `{"f":0.3}`, err: `invalid arguments: property "f": 0.3 is not a multiple of 0.5`},
		{
			// explain does not follow $ref; the message comes from jsonschema-go's
			// error, with the property path recovered from its schema pointers.
			name:   "violation behind a $ref",
			schema: mustSchema(t, `{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}}`),
			in:     `{"a":"s"}`,
			err:    `invalid arguments: property "a": type: s has type "string", want "number"`,
		},
		{
			name:   "anyOf",
			schema: mustSchema(t, `{"type":"object","properties":{"a":{"anyOf":[{"type":"number"},{"type":"boolean"}]}}}`),
			in:     `{"a":"s"}`,
			err:    `invalid arguments: no alternative matches: property "a": expected number, got string; or property "a": expected boolean, got string`,
		},
		{
			name:   "oneOf of objects",
			schema: mustSchema(t, `{"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]}`),
			in:     `{}`,
			err:    `invalid arguments: no alternative matches: missing required property "a"; or missing required property "b"`,
		},
		{
			name:   "property schema false",
			schema: mustSchema(t, `{"type":"object","properties":{"a":false}}`),
			in:     `{"a":1}`,
			err:    `invalid arguments: property "a": is not allowed`,
		},
		{
			name:   "allOf",
			schema: mustSchema(t, `{"type":"object","allOf":[{"required":["a"]}]}`),
			in:     `{}`,
			err:    `invalid arguments: missing required property "a"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.schema.Validate(tt.in)
			if tt.err != "" {
				if err == nil {
					t.Fatalf("Validate(%q) = %s, want error %s", tt.in, got, tt.err)
				}
				if !errors.Is(err, schema.ErrInvalidArguments) {
					t.Errorf("Validate(%q) error %v does not wrap ErrInvalidArguments", tt.in, err)
				}
				if err.Error() != tt.err {
					t.Errorf("Validate(%q) error:\n got %s\nwant %s", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("Validate(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestSchemaParameters(t *testing.T) {
	tests := []struct {
		name   string
		schema schema.Schema
		want   []schema.Parameter
	}{
		{
			name: "built by Params: exactly as given",
			schema: schema.Params(
				schema.String("a", ""),
				schema.Array("b", "Bees", schema.TypeInteger).AsOptional(),
				schema.Object("c", "", schema.Boolean("d", "")),
			),
			want: []schema.Parameter{
				{Name: "a", Type: schema.TypeString},
				{Name: "b", Type: schema.TypeArray, Description: "Bees", Optional: true, Items: schema.TypeInteger},
				{Name: "c", Type: schema.TypeObject, Properties: []schema.Parameter{{Name: "d", Type: schema.TypeBoolean}}},
			},
		},
		{
			name: "from JSON, in property order",
			schema: mustSchema(t, `{"type":"object","properties":{
				"z":{"type":"string","description":"Zed","enum":["p","q"]},
				"a":{"type":["null","array"],"items":{"type":"number"}},
				"o":{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}
			},"required":["z","o"]}`),
			want: []schema.Parameter{
				{Name: "z", Type: schema.TypeString, Description: "Zed", Enum: []string{"p", "q"}},
				{Name: "a", Type: schema.TypeArray, Optional: true, Items: schema.TypeNumber},
				{Name: "o", Type: schema.TypeObject, Properties: []schema.Parameter{{Name: "i", Type: schema.TypeInteger}}},
			},
		},
		{name: "no properties", schema: mustSchema(t, `{"type":"object"}`), want: nil},
		{name: "property without type", schema: mustSchema(t, `{"type":"object","properties":{"a":{}}}`), want: nil},
		{name: "anyOf property", schema: mustSchema(t, `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}}`), want: nil},
		{name: "non-string enum", schema: mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer","enum":[1,2]}}}`), want: nil},
		{name: "two types", schema: mustSchema(t, `{"type":"object","properties":{"a":{"type":["string","integer"]}}}`), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.schema.Parameters()); diff != "" {
				t.Errorf("Parameters() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParametersIsACopy(t *testing.T) {
	s := schema.Params(schema.String("a", "").WithEnum("x"))
	ps := s.Parameters()
	ps[0].Name = "changed"
	ps[0].Enum[0] = "changed"
	if diff := cmp.Diff([]schema.Parameter{{Name: "a", Type: schema.TypeString, Enum: []string{"x"}}}, s.Parameters()); diff != "" {
		t.Errorf("changing the Parameters() result changed the schema (-want +got):\n%s", diff)
	}
}

func TestWithParameter(t *testing.T) {
	tests := []struct {
		name   string
		schema schema.Schema
		p      schema.Parameter
		want   string
	}{
		{
			name:   "empty schema",
			schema: schema.Empty(),
			p:      schema.String("a", "A"),
			want:   `{"type":"object","properties":{"a":{"type":"string","description":"A"}},"required":["a"]}`,
		},
		{
			name:   "simple schema",
			schema: schema.Params(schema.String("a", "A")),
			p:      schema.Integer("b", "").AsOptional(),
			want:   `{"type":"object","properties":{"a":{"type":"string","description":"A"},"b":{"type":"integer","description":"b"}},"required":["a"]}`,
		},
		{
			name:   "simple schema, same name replaces",
			schema: schema.Params(schema.String("a", "A"), schema.String("b", "B")),
			p:      schema.Number("a", "New").AsOptional(),
			want:   `{"type":"object","properties":{"a":{"type":"number","description":"New"},"b":{"type":"string","description":"B"}},"required":["b"]}`,
		},
		{
			name:   "JSON schema keeps its keywords",
			schema: mustSchema(t, `{"type":"object","properties":{"x":{"type":"string","minLength":1}},"required":["x"],"additionalProperties":false}`),
			p:      schema.Boolean("y", "Why"),
			want:   `{"type":"object","properties":{"x":{"type":"string","minLength":1},"y":{"type":"boolean","description":"Why"}},"required":["x","y"],"additionalProperties":false}`,
		},
		{
			name:   "JSON schema without properties",
			schema: mustSchema(t, `{"type":"object","title":"T"}`),
			p:      schema.String("a", "").AsOptional(),
			want:   `{"type":"object","title":"T","properties":{"a":{"type":"string","description":"a"}}}`,
		},
		{
			name:   "JSON schema, optional replacement leaves required",
			schema: mustSchema(t, `{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`),
			p:      schema.String("x", "").AsOptional(),
			want:   `{"type":"object","properties":{"x":{"type":"string","description":"x"}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.schema.String()
			got := tt.schema.WithParameter(tt.p)
			if got.String() != tt.want {
				t.Errorf("WithParameter:\n got %s\nwant %s", got, tt.want)
			}
			if tt.schema.String() != before {
				t.Errorf("WithParameter changed the original schema to %s", tt.schema)
			}
			if _, err := got.Validate(`{}`); err != nil && !errors.Is(err, schema.ErrInvalidArguments) {
				t.Errorf("the new schema does not validate: %v", err)
			}
		})
	}
}

func TestSchemaEqualAndMarshal(t *testing.T) {
	a := schema.Params(schema.String("a", ""))
	b := mustSchema(t, `{"type":"object","properties":{"a":{"type":"string","description":"a"}},"required":["a"]}`)
	// go-cmp uses Schema.Equal, so definitions compare directly.
	if diff := cmp.Diff(tool.Definition{Name: "t", InputSchema: a}, tool.Definition{Name: "t", InputSchema: b}); diff != "" {
		t.Errorf("equal schemas differ:\n%s", diff)
	}
	if a.Equal(schema.Empty()) {
		t.Error("a schema with a parameter equals the empty schema")
	}
	got, err := json.Marshal(tool.Definition{Name: "t", InputSchema: schema.Schema{}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"Name":"t","Description":"","InputSchema":{"type":"object","properties":{}},"Metadata":null}`
	if string(got) != want {
		t.Errorf("json.Marshal(Definition) = %s, want %s", got, want)
	}
}

func mustSchema(t testing.TB, s string) schema.Schema {
	t.Helper()
	schema, err := schema.FromJSON([]byte(s))
	if err != nil {
		t.Fatalf("FromJSON(%s): %v", s, err)
	}
	return schema
}

// Keywords that explain does not cover still get a message that names the property.
func TestValidateFallbackNamesProperty(t *testing.T) {
	tests := []struct {
		name, schema, in, wantPrefix string
	}{
		{"contains", `{"type":"object","properties":{"a":{"type":"array","contains":{"type":"string"}}}}`, `{"a":[1]}`, `invalid arguments: property "a": contains: `},
		{"uniqueItems in items", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"array","uniqueItems":true}}}}`, `{"a":[[1,1]]}`, `invalid arguments: property "a[]": uniqueItems: `},
		{"not", `{"type":"object","properties":{"a":{"not":{"type":"string"}}}}`, `{"a":"x"}`, `invalid arguments: property "a": not: `},
		{"maxProperties", `{"type":"object","maxProperties":1}`, `{"a":1,"b":2}`, `invalid arguments: maxProperties: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mustSchema(t, tt.schema).Validate(tt.in)
			if !errors.Is(err, schema.ErrInvalidArguments) {
				t.Fatalf("Validate(%s) error = %v, want ErrInvalidArguments", tt.in, err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("Validate(%s) error = %q, want prefix %q", tt.in, err, tt.wantPrefix)
			}
		})
	}
}
