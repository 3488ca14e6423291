package schema_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/golden"
	"github.com/toolmesh/toolmesh/pkg/schema"
)

// The exact schema texts models are shown, pinned inline because they
// are part of the spec.
func TestParamsSpecTexts(t *testing.T) {
	tests := []struct {
		name string
		got  schema.Schema
		want string
	}{
		{"empty", schema.Params(), `{"type":"object","properties":{}}`},
		{
			"string parameter",
			schema.Params(schema.String("name", "The name")),
			`{"type":"object","properties":{"name":{"type":"string","description":"The name"}},"required":["name"]}`,
		},
		{
			"optional only has no required key",
			schema.Params(schema.String("a", "A").AsOptional(), schema.Integer("b", "B").AsOptional()),
			`{"type":"object","properties":{"a":{"type":"string","description":"A"},"b":{"type":"integer","description":"B"}}}`,
		},
		{
			"enum",
			schema.Params(schema.String("color", "Color").WithEnum("red", "green", "blue")),
			`{"type":"object","properties":{"color":{"type":"string","description":"Color","enum":["red","green","blue"]}},"required":["color"]}`,
		},
		{
			"mixed types",
			schema.Params(schema.String("s", "S"), schema.Integer("i", "I"), schema.Number("n", "N"), schema.Boolean("b", "B")),
			`{"type":"object","properties":{"s":{"type":"string","description":"S"},"i":{"type":"integer","description":"I"},"n":{"type":"number","description":"N"},"b":{"type":"boolean","description":"B"}},"required":["s","i","n","b"]}`,
		},
		{
			"description defaults to name",
			schema.Params(schema.String("city", "")),
			`{"type":"object","properties":{"city":{"type":"string","description":"city"}},"required":["city"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.got.String(); got != tt.want {
				t.Errorf("Params:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParamsGolden(t *testing.T) {
	tests := []struct {
		name string
		ps   []schema.Parameter
	}{
		{"params_arrays", []schema.Parameter{
			schema.Array("tags", "Tags", schema.TypeString),
			schema.Array("scores", "", schema.TypeNumber).AsOptional(),
			schema.Array("anything", "No item type", ""),
			// Items only applies to arrays.
			{Name: "not_array", Type: schema.TypeString, Items: schema.TypeInteger},
		}},
		{"params_nested_object", []schema.Parameter{
			schema.Object("address", "Postal address",
				schema.String("street", ""),
				schema.String("city", "City"),
				schema.String("zip", "").AsOptional(),
				schema.Object("geo", "", schema.Number("lat", ""), schema.Number("lon", "")).AsOptional(),
			),
			schema.Object("options", "Only optional inside", schema.Boolean("dry_run", "").AsOptional()),
			schema.Object("free", "No nested properties"),
		}},
		{"params_enum_optional", []schema.Parameter{
			schema.String("unit", "Unit").WithEnum("celsius", "fahrenheit").AsOptional(),
			schema.Integer("days", "").WithEnum("1", "3", "7"),
			schema.String("empty_enum", "").WithEnum(),
		}},
		{"params_odd_types", []schema.Parameter{
			{Name: "zero_type"},
			{Name: "unknown_type", Type: "date"},
			{Name: "unknown_items", Type: schema.TypeArray, Items: "date"},
		}},
		{"params_duplicate_names", []schema.Parameter{
			schema.String("a", "first"),
			schema.Integer("b", ""),
			schema.Number("a", "second").AsOptional(),
		}},
		{"params_odd_characters", []schema.Parameter{
			schema.String(`q"uote`, `He said "hi" \ and left`),
			schema.String("new\nline", "tab\there\r\nnext").WithEnum(`"`, `\`, "\n", "\u0000"),
			schema.String("ünïcødé", "日本語 😀 <b>&amp;</b> \u2028").AsOptional(),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			golden.Check(t, tt.name, schema.Params(tt.ps...).String()+"\n")
		})
	}
}

// Whatever the names, descriptions and enum values
// contain, the schema is valid JSON that decodes back to them.
func TestParamsJSONValidity(t *testing.T) {
	odd := []string{`"quoted"`, `back\slash`, "new\nline", "tab\t", "nul\u0000", "ünïcødé 日本語 😀", "</script>&", "\u2028\u2029", "invalid\xffutf8"}
	for _, s := range odd {
		schema := schema.Params(schema.String(s, s).WithEnum(s), schema.Object("o", s, schema.String(s, s)))
		b := schema.JSON()
		if !json.Valid(b) {
			t.Fatalf("Params with %q is not valid JSON: %s", s, b)
		}
		var got struct {
			Properties map[string]struct {
				Description string
				Enum        []string
				Properties  map[string]struct{ Description string }
			}
			Required []string
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("Params with %q: %v", s, err)
		}
		want := s
		if s == "invalid\xffutf8" {
			want = "invalid\uFFFDutf8" // invalid UTF-8 cannot be represented; it is replaced
		}
		p, ok := got.Properties[want]
		if !ok {
			t.Fatalf("Params with %q: property missing in %s", s, b)
		}
		if p.Description != want || !cmp.Equal(p.Enum, []string{want}) {
			t.Errorf("Params with %q: description %q, enum %q", s, p.Description, p.Enum)
		}
		if got.Properties["o"].Properties[want].Description != want {
			t.Errorf("Params with %q: nested description lost in %s", s, b)
		}
	}
}

func TestParameterHelpers(t *testing.T) {
	base := schema.String("a", "A")
	opt := base.AsOptional()
	values := []string{"x", "y"}
	enum := base.WithEnum(values...)
	values[0] = "changed"
	props := []schema.Parameter{schema.Boolean("p", "")}
	obj := schema.Object("o", "O", props...)
	props[0].Name = "changed"

	tests := []struct {
		name string
		got  schema.Parameter
		want schema.Parameter
	}{
		{"String", base, schema.Parameter{Name: "a", Type: schema.TypeString, Description: "A"}},
		{"Integer", schema.Integer("i", "I"), schema.Parameter{Name: "i", Type: schema.TypeInteger, Description: "I"}},
		{"Number", schema.Number("n", "N"), schema.Parameter{Name: "n", Type: schema.TypeNumber, Description: "N"}},
		{"Boolean", schema.Boolean("b", "B"), schema.Parameter{Name: "b", Type: schema.TypeBoolean, Description: "B"}},
		{"Array", schema.Array("l", "L", schema.TypeInteger), schema.Parameter{Name: "l", Type: schema.TypeArray, Description: "L", Items: schema.TypeInteger}},
		{"Object copies props", obj, schema.Parameter{Name: "o", Type: schema.TypeObject, Description: "O", Properties: []schema.Parameter{{Name: "p", Type: schema.TypeBoolean}}}},
		{"AsOptional", opt, schema.Parameter{Name: "a", Type: schema.TypeString, Description: "A", Optional: true}},
		{"WithEnum copies values", enum, schema.Parameter{Name: "a", Type: schema.TypeString, Description: "A", Enum: []string{"x", "y"}}},
		{"original untouched", base, schema.Parameter{Name: "a", Type: schema.TypeString, Description: "A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A Params schema validates the way its JSON reads.
func TestParamsValidate(t *testing.T) {
	s := schema.Params(schema.Array("ids", "", schema.TypeInteger), schema.String("mode", "").WithEnum("a", "b").AsOptional())
	if got, err := s.Validate(`{"mode":"a","ids":[1,2]}`); err != nil || got != `{"ids":[1,2],"mode":"a"}` {
		t.Errorf("Validate(valid) = %s, %v", got, err)
	}
	if _, err := s.Validate(`{"ids":["1"]}`); err == nil || err.Error() != `invalid arguments: property "ids[0]": expected integer, got string` {
		t.Errorf("Validate(wrong item) error = %v", err)
	}
}
