package tool_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// The exact texts asserted by Embabel's ToolTest (§1.13), pinned inline because they
// are part of the spec.
func TestParamsSpecTexts(t *testing.T) {
	tests := []struct {
		name string
		got  tool.Schema
		want string
	}{
		{"empty", tool.Params(), `{"type":"object","properties":{}}`},
		{
			"string parameter",
			tool.Params(tool.String("name", "The name")),
			`{"type":"object","properties":{"name":{"type":"string","description":"The name"}},"required":["name"]}`,
		},
		{
			"optional only has no required key",
			tool.Params(tool.String("a", "A").AsOptional(), tool.Integer("b", "B").AsOptional()),
			`{"type":"object","properties":{"a":{"type":"string","description":"A"},"b":{"type":"integer","description":"B"}}}`,
		},
		{
			"enum",
			tool.Params(tool.String("color", "Color").WithEnum("red", "green", "blue")),
			`{"type":"object","properties":{"color":{"type":"string","description":"Color","enum":["red","green","blue"]}},"required":["color"]}`,
		},
		{
			"mixed types",
			tool.Params(tool.String("s", "S"), tool.Integer("i", "I"), tool.Number("n", "N"), tool.Boolean("b", "B")),
			`{"type":"object","properties":{"s":{"type":"string","description":"S"},"i":{"type":"integer","description":"I"},"n":{"type":"number","description":"N"},"b":{"type":"boolean","description":"B"}},"required":["s","i","n","b"]}`,
		},
		{
			"description defaults to name",
			tool.Params(tool.String("city", "")),
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
		ps   []tool.Parameter
	}{
		{"params_arrays", []tool.Parameter{
			tool.Array("tags", "Tags", tool.TypeString),
			tool.Array("scores", "", tool.TypeNumber).AsOptional(),
			tool.Array("anything", "No item type", ""),
			// Items only applies to arrays.
			{Name: "not_array", Type: tool.TypeString, Items: tool.TypeInteger},
		}},
		{"params_nested_object", []tool.Parameter{
			tool.ObjectParam("address", "Postal address",
				tool.String("street", ""),
				tool.String("city", "City"),
				tool.String("zip", "").AsOptional(),
				tool.ObjectParam("geo", "", tool.Number("lat", ""), tool.Number("lon", "")).AsOptional(),
			),
			tool.ObjectParam("options", "Only optional inside", tool.Boolean("dry_run", "").AsOptional()),
			tool.ObjectParam("free", "No nested properties"),
		}},
		{"params_enum_optional", []tool.Parameter{
			tool.String("unit", "Unit").WithEnum("celsius", "fahrenheit").AsOptional(),
			tool.Integer("days", "").WithEnum("1", "3", "7"),
			tool.String("empty_enum", "").WithEnum(),
		}},
		{"params_odd_types", []tool.Parameter{
			{Name: "zero_type"},
			{Name: "unknown_type", Type: "date"},
			{Name: "unknown_items", Type: tool.TypeArray, Items: "date"},
		}},
		{"params_duplicate_names", []tool.Parameter{
			tool.String("a", "first"),
			tool.Integer("b", ""),
			tool.Number("a", "second").AsOptional(),
		}},
		{"params_odd_characters", []tool.Parameter{
			tool.String(`q"uote`, `He said "hi" \ and left`),
			tool.String("new\nline", "tab\there\r\nnext").WithEnum(`"`, `\`, "\n", "\u0000"),
			tool.String("ünïcødé", "日本語 😀 <b>&amp;</b> \u2028").AsOptional(),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGolden(t, tt.name, tool.Params(tt.ps...).String()+"\n")
		})
	}
}

// Embabel's JsonSchemaValidity test: whatever the names, descriptions and enum values
// contain, the schema is valid JSON that decodes back to them.
func TestParamsJSONValidity(t *testing.T) {
	odd := []string{`"quoted"`, `back\slash`, "new\nline", "tab\t", "nul\u0000", "ünïcødé 日本語 😀", "</script>&", "\u2028\u2029", "invalid\xffutf8"}
	for _, s := range odd {
		schema := tool.Params(tool.String(s, s).WithEnum(s), tool.ObjectParam("o", s, tool.String(s, s)))
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
	base := tool.String("a", "A")
	opt := base.AsOptional()
	values := []string{"x", "y"}
	enum := base.WithEnum(values...)
	values[0] = "changed"
	props := []tool.Parameter{tool.Boolean("p", "")}
	obj := tool.ObjectParam("o", "O", props...)
	props[0].Name = "changed"

	tests := []struct {
		name string
		got  tool.Parameter
		want tool.Parameter
	}{
		{"String", base, tool.Parameter{Name: "a", Type: tool.TypeString, Description: "A"}},
		{"Integer", tool.Integer("i", "I"), tool.Parameter{Name: "i", Type: tool.TypeInteger, Description: "I"}},
		{"Number", tool.Number("n", "N"), tool.Parameter{Name: "n", Type: tool.TypeNumber, Description: "N"}},
		{"Boolean", tool.Boolean("b", "B"), tool.Parameter{Name: "b", Type: tool.TypeBoolean, Description: "B"}},
		{"Array", tool.Array("l", "L", tool.TypeInteger), tool.Parameter{Name: "l", Type: tool.TypeArray, Description: "L", Items: tool.TypeInteger}},
		{"ObjectParam copies props", obj, tool.Parameter{Name: "o", Type: tool.TypeObject, Description: "O", Properties: []tool.Parameter{{Name: "p", Type: tool.TypeBoolean}}}},
		{"AsOptional", opt, tool.Parameter{Name: "a", Type: tool.TypeString, Description: "A", Optional: true}},
		{"WithEnum copies values", enum, tool.Parameter{Name: "a", Type: tool.TypeString, Description: "A", Enum: []string{"x", "y"}}},
		{"original untouched", base, tool.Parameter{Name: "a", Type: tool.TypeString, Description: "A"}},
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
	s := tool.Params(tool.Array("ids", "", tool.TypeInteger), tool.String("mode", "").WithEnum("a", "b").AsOptional())
	if got, err := s.Validate(`{"mode":"a","ids":[1,2]}`); err != nil || got != `{"ids":[1,2],"mode":"a"}` {
		t.Errorf("Validate(valid) = %s, %v", got, err)
	}
	if _, err := s.Validate(`{"ids":["1"]}`); err == nil || err.Error() != `invalid arguments: property "ids[0]": expected integer, got string` {
		t.Errorf("Validate(wrong item) error = %v", err)
	}
}
