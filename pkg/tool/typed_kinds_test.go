package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// color is an enum type: its values hold wherever a color appears in an input.
type color string

func (color) EnumValues() []any { return []any{"red", "green", color("blue")} }

// level is a numeric enum type that lists its values with a pointer receiver.
type level int

func (*level) EnumValues() []any { return []any{1, 2, 3} }

type celsius float64

type lineItem struct {
	SKU   string `json:"sku" jsonschema:"stock-keeping unit"`
	Size  string `json:"size" jsonschema:"garment size" enum:"S, M, L"`
	Qty   int    `json:"qty" enum:"1,2,5"`
	Color *color `json:"color,omitempty"`
}

// reading is a flat struct: its calls decode without encoding/json's reflection.
type reading struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit" enum:"C,F"`
}

type paint struct {
	Primary color            `json:"primary" jsonschema:"main color"`
	Trim    color            `json:"trim" enum:"red"`
	Colors  []color          `json:"colors,omitempty"`
	ByRoom  map[string]color `json:"by_room,omitempty"`
	Coats   level            `json:"coats"`
	Finish  *string          `json:"finish,omitempty" enum:"matte,gloss"`
	Ratio   float64          `json:"ratio,omitempty" enum:"0.5,1"`
	Dry     bool             `json:"dry,omitempty" enum:"true"`
	Rooms   []string         `json:"rooms,omitempty" enum:"hall,kitchen"`
}

// echo is a typed tool that answers with its input (as JSON, or as is for a string).
func echo[I any](t *testing.T) tool.Tool {
	t.Helper()
	tl, err := tool.Func("echo", "", func(_ context.Context, in I) (I, error) { return in, nil })
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestFuncInputKindsSchema(t *testing.T) {
	const (
		prefix = `{"type":"object","properties":`
		suffix = `,"additionalProperties":false}`
	)
	wrapped := func(property, inner string) string {
		return prefix + `{"` + property + `":` + inner + `},"required":["` + property + `"]` + suffix
	}
	lineItemSchema := `{"type":"object","properties":{` +
		`"sku":{"type":"string","description":"stock-keeping unit"},` +
		`"size":{"type":"string","description":"garment size","enum":["S","M","L"]},` +
		`"qty":{"type":"integer","enum":[1,2,5]},` +
		`"color":{"type":["null","string"],"enum":["red","green","blue",null]}},` +
		`"required":["sku","size","qty"]` + suffix
	tests := []struct {
		name string
		tool tool.Tool
		want string
	}{
		{"string", echo[string](t), wrapped("input", `{"type":"string"}`)},
		{"bool", echo[bool](t), wrapped("input", `{"type":"boolean"}`)},
		{"int", echo[int](t), wrapped("input", `{"type":"integer"}`)},
		{"uint8 keeps the bounds jsonschema-go infers", echo[uint8](t), wrapped("input", `{"type":"integer","minimum":0,"maximum":255}`)},
		{"named float", echo[celsius](t), wrapped("input", `{"type":"number"}`)},
		{"list of numbers", echo[[]float64](t), wrapped("items", `{"type":"array","items":{"type":"number"}}`)},
		{"list of strings", echo[[]string](t), wrapped("items", `{"type":"array","items":{"type":"string"}}`)},
		{"array", echo[[2]string](t), wrapped("items", `{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":2}`)},
		{"list of lists", echo[[][]int](t), wrapped("items", `{"type":"array","items":{"type":["null","array"],"items":{"type":"integer"}}}`)},
		{"list of structs with enum tags", echo[[]lineItem](t), wrapped("items", `{"type":"array","items":`+lineItemSchema+`}`)},
		{"map", echo[map[string]int](t), wrapped("entries", `{"type":"object","additionalProperties":{"type":"integer"}}`)},
		{"map of structs", echo[map[string]lineItem](t), wrapped("entries", `{"type":"object","additionalProperties":`+lineItemSchema+`}`)},
		{"enum type as input", echo[color](t), wrapped("input", `{"type":"string","enum":["red","green","blue"]}`)},
		{"numeric enum type as input", echo[level](t), wrapped("input", `{"type":"integer","enum":[1,2,3]}`)},
		{"enum type as element", echo[[]color](t), wrapped("items", `{"type":"array","items":{"type":"string","enum":["red","green","blue"]}}`)},
		{"enum type as map value", echo[map[string]level](t), wrapped("entries", `{"type":"object","additionalProperties":{"type":"integer","enum":[1,2,3]}}`)},
		{"struct with enum tags and enum types", echo[paint](t), prefix + `{` +
			`"primary":{"type":"string","description":"main color","enum":["red","green","blue"]},` +
			`"trim":{"type":"string","enum":["red"]},` +
			`"colors":{"type":["null","array"],"items":{"type":"string","enum":["red","green","blue"]}},` +
			`"by_room":{"type":"object","additionalProperties":{"type":"string","enum":["red","green","blue"]}},` +
			`"coats":{"type":"integer","enum":[1,2,3]},` +
			`"finish":{"type":["null","string"],"enum":["matte","gloss",null]},` +
			`"ratio":{"type":"number","enum":[0.5,1]},` +
			`"dry":{"type":"boolean","enum":[true]},` +
			`"rooms":{"type":["null","array"],"items":{"type":"string","enum":["hall","kitchen"]}}},` +
			`"required":["primary","trim","coats"]` + suffix},
		{"pointer to a struct with an enum field", echo[*lineItem](t), lineItemSchema},
		{"flat struct with an enum tag", echo[reading](t),
			prefix + `{"value":{"type":"number"},"unit":{"type":"string","enum":["C","F"]}},"required":["value","unit"]` + suffix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tool.Definition().InputSchema.String(); got != tt.want {
				t.Errorf("schema:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestFuncInputKindsCall(t *testing.T) {
	sum := tool.MustFunc("sum", "", func(_ context.Context, xs []float64) (float64, error) {
		total := 0.0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})
	describe := tool.MustFunc("describe", "", func(_ context.Context, in celsius) (string, error) {
		return fmt.Sprintf("%T %v", in, in), nil
	})
	invalid := func(msg string) tool.Result { return tool.ErrorWithCode(tool.CodeInvalidArguments, msg) }
	tests := []struct {
		name string
		tool tool.Tool
		in   string
		want tool.Result
	}{
		{"list of numbers", sum, `{"items":[1.5,2,-0.5]}`, tool.Text("3")},
		{"list, blank input is the zero value", echo[[]float64](t), ` `, tool.Text("null")},
		{"list, empty", sum, `{"items":[]}`, tool.Text("0")},
		{"string", echo[string](t), `{"input":"hello"}`, tool.Text("hello")},
		{"string, blank input is the zero value", echo[string](t), ``, tool.Text("")},
		{"bool", echo[bool](t), `{"input":true}`, tool.Text("true")},
		{"int", echo[int64](t), `{"input":-9007199254740993}`, tool.Text("-9007199254740993")},
		{"uint", echo[uint](t), `{"input":42}`, tool.Text("42")},
		{"named float", describe, `{"input":21.5}`, tool.Text("tool_test.celsius 21.5")},
		{"array", echo[[2]string](t), `{"items":["a","b"]}`, tool.Text(`["a","b"]`)},
		{"list of structs", echo[[]lineItem](t), `{"items":[{"sku":"A-1","size":"M","qty":2,"color":"blue"},{"sku":"B-2","size":"S","qty":1}]}`,
			tool.Text(`[{"sku":"A-1","size":"M","qty":2,"color":"blue"},{"sku":"B-2","size":"S","qty":1}]`)},
		{"map", echo[map[string]int](t), `{"entries":{"b":2,"a":1}}`, tool.Text(`{"a":1,"b":2}`)},
		{"map, empty", echo[map[string]int](t), `{"entries":{}}`, tool.Text(`{}`)},
		{"enum type as input", echo[color](t), `{"input":"green"}`, tool.Text(`"green"`)},
		{"struct with enums", echo[paint](t),
			`{"primary":"blue","trim":"red","colors":["green"],"by_room":{"hall":"red"},"coats":2,"finish":"matte","ratio":0.5,"dry":true,"rooms":["hall"]}`,
			tool.Text(`{"primary":"blue","trim":"red","colors":["green"],"by_room":{"hall":"red"},"coats":2,"finish":"matte","ratio":0.5,"dry":true,"rooms":["hall"]}`)},
		{"struct with a null pointer enum", echo[paint](t), `{"primary":"red","trim":"red","coats":1,"finish":null}`,
			tool.Text(`{"primary":"red","trim":"red","coats":1}`)},

		{"flat struct with an enum tag", echo[reading](t), `{"value":21.5,"unit":"C"}`, tool.Text(`{"value":21.5,"unit":"C"}`)},

		{"wrong enum value, flat struct", echo[reading](t), `{"value":21.5,"unit":"K"}`,
			invalid(`invalid arguments: property "unit": "K" is not one of "C", "F"`)},
		{"wrong enum value, input", echo[color](t), `{"input":"pink"}`,
			invalid(`invalid arguments: property "input": "pink" is not one of "red", "green", "blue"`)},
		{"wrong enum value, tag", echo[[]lineItem](t), `{"items":[{"sku":"A-1","size":"XL","qty":1}]}`,
			invalid(`invalid arguments: property "items[0].size": "XL" is not one of "S", "M", "L"`)},
		{"wrong enum value, numeric tag", echo[[]lineItem](t), `{"items":[{"sku":"A-1","size":"S","qty":3}]}`,
			invalid(`invalid arguments: property "items[0].qty": 3 is not one of 1, 2, 5`)},
		{"wrong enum value, pointer to an enum type", echo[[]lineItem](t), `{"items":[{"sku":"A-1","size":"S","qty":1,"color":"pink"}]}`,
			invalid(`invalid arguments: property "items[0].color": "pink" is not one of "red", "green", "blue", null`)},
		{"wrong enum value, tag replaces the type's values", echo[paint](t), `{"primary":"red","trim":"blue","coats":1}`,
			invalid(`invalid arguments: property "trim": "blue" is not one of "red"`)},
		{"wrong enum value, element", echo[[]color](t), `{"items":["red","mauve"]}`,
			invalid(`invalid arguments: property "items[1]": "mauve" is not one of "red", "green", "blue"`)},
		{"wrong enum value, map value", echo[paint](t), `{"primary":"red","trim":"red","coats":1,"by_room":{"hall":"teal"}}`,
			invalid(`invalid arguments: property "by_room.hall": "teal" is not one of "red", "green", "blue"`)},
		{"wrong enum value, numeric type", echo[paint](t), `{"primary":"red","trim":"red","coats":4}`,
			invalid(`invalid arguments: property "coats": 4 is not one of 1, 2, 3`)},
		{"wrong enum value, list field tag", echo[paint](t), `{"primary":"red","trim":"red","coats":1,"rooms":["attic"]}`,
			invalid(`invalid arguments: property "rooms[0]": "attic" is not one of "hall", "kitchen"`)},
		{"wrong kind, list", sum, `{"items":{"a":1}}`, invalid(`invalid arguments: property "items": expected array, got object`)},
		{"wrong kind, element", sum, `{"items":[1,"2"]}`, invalid(`invalid arguments: property "items[1]": expected number, got string`)},
		{"wrong kind, primitive", echo[int](t), `{"input":"3"}`, invalid(`invalid arguments: property "input": expected integer, got string`)},
		{"wrong kind, map value", echo[map[string]int](t), `{"entries":{"a":true}}`,
			invalid(`invalid arguments: property "entries.a": expected integer, got boolean`)},
		{"list is not null", sum, `{"items":null}`, invalid(`invalid arguments: property "items": expected array, got null`)},
		{"wrapper property missing", sum, `{}`, invalid(`invalid arguments: missing required property "items"`)},
		{"wrapper property misnamed", sum, `{"values":[1]}`, invalid(`invalid arguments: missing required property "items"`)},
		{"property next to the wrapper's", sum, `{"items":[1],"more":2}`,
			invalid(`invalid arguments: unexpected property "more"; allowed: "items"`)},
		{"bare value instead of the wrapper", sum, `[1,2]`, invalid(`invalid arguments: arguments must be a JSON object, got array`)},
		{"out of range", echo[uint8](t), `{"input":256}`, invalid(`invalid arguments: property "input": 256 is greater than the maximum 255`)},
		{"array of the wrong length", echo[[2]string](t), `{"items":["a"]}`,
			invalid(`invalid arguments: property "items": must have at least 2 items, got 1`)},
		{"integer spelt as float decodes", echo[int](t), `{"input":1.0}`, tool.Text("1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.tool.Call(context.Background(), tt.in)
			if err != nil {
				t.Fatalf("Call(%q) error = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(tool.Result{}, "Cause")); diff != "" {
				t.Errorf("Call(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if got.Code == tool.CodeInvalidArguments && !errors.Is(got.Cause, schema.ErrInvalidArguments) {
				t.Errorf("Call(%q) Cause = %v, want ErrInvalidArguments", tt.in, got.Cause)
			}
		})
	}
}

// TestFuncInputKindsDecode: the function gets exactly the value the arguments hold, in
// its own type (not only the JSON the tool answers with).
func TestFuncInputKindsDecode(t *testing.T) {
	blue := color("blue")
	decodes(t, `{"items":[{"sku":"A","size":"L","qty":5,"color":"blue"}]}`, []lineItem{{SKU: "A", Size: "L", Qty: 5, Color: &blue}})
	decodes(t, `{"entries":{"x":"red"}}`, map[string]color{"x": "red"})
	decodes(t, `{"input":3}`, level(3))
	decodes(t, `{"items":[true,false,true]}`, [3]bool{true, false, true})
	decodes(t, `{"items":[[1],null,[]]}`, [][]int{{1}, nil, {}})
	decodes(t, ``, level(0))
	decodes(t, ``, map[string]color(nil))
}

// decodes checks that a typed tool of input type I is called with want for args.
func decodes[I any](t *testing.T, args string, want I) {
	t.Helper()
	var got I
	tl := tool.MustFunc("t", "", func(_ context.Context, in I) (string, error) { got = in; return "ok", nil })
	res, err := tl.Call(context.Background(), args)
	if err != nil || res.Content != "ok" {
		t.Fatalf("Call(%s) = %+v, %v", args, res, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Call(%s) input (-want +got):\n%s", args, diff)
	}
}

type shape struct{ Sides int }

func (shape) EnumValues() []any { return []any{shape{3}} }

type noValues string

func (noValues) EnumValues() []any { return nil }

type mixed string

func (mixed) EnumValues() []any { return []any{"a", 1} }

type unencodable string

func (unencodable) EnumValues() []any { return []any{make(chan int)} }

// textLevel is an int in Go that decodes from a JSON string too: its enum values would
// not match the schema jsonschema-go infers for it (integer).
type textLevel int

func (textLevel) EnumValues() []any { return []any{"low"} }

func (l *textLevel) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = 1
		return nil
	}
	return json.Unmarshal(b, (*int)(l))
}

func TestFuncEnumErrors(t *testing.T) {
	type badTag struct {
		N int `json:"n" enum:"1,two"`
	}
	tests := []struct {
		name string
		make func() (tool.Tool, error)
		want string
	}{
		{"number tag value not a number", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, badTag) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": field tool_test.badTag.N: enum value two does not decode into int`},
		{"tag value out of range", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				N int8 `enum:"1,300"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { N int8 \"enum:\\\"1,300\\\"\" }.N: enum value 300 does not decode into int8"},
		{"tag value a fraction for an integer", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, []struct {
				N *uint `json:"n" enum:"1.5"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { N *uint \"json:\\\"n\\\" enum:\\\"1.5\\\"\" }.N: enum value 1.5 does not decode into uint"},
		{"tag value not a boolean", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				B bool `enum:"yes"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { B bool \"enum:\\\"yes\\\"\" }.B: enum value yes does not decode into bool"},
		{"empty tag", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				S string `enum:" "`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { S string \"enum:\\\" \\\"\" }.S: the enum tag is empty"},
		{"empty tag value", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				S string `enum:"a,,b"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { S string \"enum:\\\"a,,b\\\"\" }.S: the enum tag \"a,,b\" has an empty value"},
		{"tag value twice", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				S string `enum:"a, a"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { S string \"enum:\\\"a, a\\\"\" }.S: enum value \"a\" is given twice"},
		{"tag on a struct field", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				Items []lineItem `enum:"a"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { Items []tool_test.lineItem \"enum:\\\"a\\\"\" }.Items: an enum tag needs a string, a number or a boolean (or a pointer to one, or a list of them), not tool_test.lineItem"},
		{"tag on a map field", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct {
				M map[string]string `enum:"a"`
			}) (string, error) {
				return "", nil
			})
		}, "invalid input schema: tool \"t\": field struct { M map[string]string \"enum:\\\"a\\\"\" }.M: an enum tag needs a string, a number or a boolean (or a pointer to one, or a list of them), not map[string]string"},
		{"enum type not a string, number or boolean", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, []shape) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": type tool_test.shape implements tool.Enum but is not a string, a number or a boolean`},
		{"enum type without values", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, noValues) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": type tool_test.noValues: EnumValues returns no values`},
		{"enum type with a value of another type", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, map[string]mixed) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": type tool_test.mixed: enum value 1 does not decode into tool_test.mixed`},
		{"enum type with a value that is not JSON", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, unencodable) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": type tool_test.unencodable: enum value `},
		{"enum type whose values contradict its schema", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, textLevel) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": type tool_test.textLevel: enum value "low" is a JSON string; the schema of tool_test.textLevel wants integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.make()
			if !errors.Is(err, schema.ErrInvalid) || !matches(err.Error(), tt.want) {
				t.Errorf("Func error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// matches compares an error message with the one wanted; a want ending in a space is
// a prefix (for messages that quote another package's wording).
func matches(got, want string) bool {
	if want != "" && want[len(want)-1] == ' ' {
		return len(got) > len(want) && got[:len(want)] == want
	}
	return got == want
}

func ExampleFunc_list() {
	sum, err := tool.Func("sum", "Add numbers", func(_ context.Context, xs []float64) (float64, error) {
		total := 0.0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(sum.Definition().InputSchema)
	res, _ := sum.Call(context.Background(), `{"items":[1.5,2]}`)
	fmt.Println(res.Render())
	// Output:
	// {"type":"object","properties":{"items":{"type":"array","items":{"type":"number"}}},"required":["items"],"additionalProperties":false}
	// 3.5
}

// An integer written with a fraction or an exponent (1.0, 2e0), which the schema takes as
// an integer, reaches an integer field: Go's decoder refused it ("cannot unmarshal number
// 1.0 into ... int"), where the TypeScript and Python workers took it.
func TestIntegersWrittenAsFloats(t *testing.T) {
	type counts struct {
		N  int     `json:"n"`
		M  uint8   `json:"m"`
		L  []int64 `json:"l"`
		F  float64 `json:"f"`
		In struct {
			K int `json:"k"`
		} `json:"in"`
	}
	want := counts{N: 1, M: 2, L: []int64{3, 4, 250}, F: 1.5}
	want.In.K = 7
	decodes(t, `{"n":1.0,"m":2e0,"l":[3.0,4,2.5e2],"f":1.5,"in":{"k":70e-1}}`, want)
	decodes(t, `{"ms":1.0}`, struct {
		MS int `json:"ms"`
	}{1})
	decodes(t, `{"Value":5.00}`, struct{ Value int }{5})
	// Not an integer, or too large: refused as before, by the schema or the decoder.
	for _, args := range []string{`{"n":1.5}`, `{"m":3e2}`, `{"n":1e400}`} {
		res, _ := tool.MustFunc("t", "", func(_ context.Context, in counts) (string, error) { return "ok", nil }).Call(context.Background(), args)
		if !res.IsError() {
			t.Errorf("Call(%s) = %+v; want invalid arguments", args, res)
		}
	}
}
