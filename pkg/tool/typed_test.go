package tool_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/golden"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

type weatherIn struct {
	City  string   `json:"city" jsonschema:"City name"`
	Days  int      `json:"days,omitempty" jsonschema:"How many days, 1 to 7"`
	Units []string `json:"units,omitempty"`
	Geo   *geo     `json:"geo,omitempty"`
}

type geo struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

type weatherOut struct {
	City  string  `json:"city"`
	TempC float64 `json:"temp_c"`
	Note  string  `json:"note,omitempty"`
}

func TestFuncSchema(t *testing.T) {
	tests := []struct {
		name string
		tool func() (tool.Tool, error)
	}{
		{"typed_weather", func() (tool.Tool, error) {
			return tool.Func("weather", "Forecast", func(context.Context, weatherIn) (weatherOut, error) { return weatherOut{}, nil })
		}},
		{"typed_pointer_input", func() (tool.Tool, error) {
			return tool.Func("weather", "Forecast", func(context.Context, *weatherIn) (string, error) { return "", nil })
		}},
		{"typed_empty_struct", func() (tool.Tool, error) {
			return tool.Func("now", "Current time", func(context.Context, struct{}) (time.Time, error) { return time.Time{}, nil })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := tt.tool()
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tt.name, tl.Definition().InputSchema.String()+"\n")
		})
	}
}

func TestFuncDefinition(t *testing.T) {
	tl := tool.MustFunc("weather", "Forecast",
		func(context.Context, weatherIn) (weatherOut, error) { return weatherOut{}, nil },
		tool.ReturnDirect(), tool.DefinitionMetadata(map[string]string{"team": "geo"}))
	d := tl.Definition()
	if d.Name != "weather" || d.Description != "Forecast" || d.Metadata["team"] != "geo" {
		t.Errorf("Definition() = %+v", d)
	}
	if !tl.Metadata().ReturnDirect {
		t.Error("ReturnDirect option lost")
	}
	want := []schema.Parameter{
		{Name: "city", Type: schema.TypeString, Description: "City name"},
		{Name: "days", Type: schema.TypeInteger, Description: "How many days, 1 to 7", Optional: true},
		{Name: "units", Type: schema.TypeArray, Optional: true, Items: schema.TypeString},
		{Name: "geo", Type: schema.TypeObject, Optional: true, Properties: []schema.Parameter{
			{Name: "lat", Type: schema.TypeNumber},
			{Name: "lon", Type: schema.TypeNumber},
		}},
	}
	if diff := cmp.Diff(want, d.InputSchema.Parameters()); diff != "" {
		t.Errorf("Parameters() mismatch (-want +got):\n%s", diff)
	}
}

func TestFuncErrors(t *testing.T) {
	tests := []struct {
		name string
		make func() (tool.Tool, error)
		want string
	}{
		{"map input without string keys", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, map[int]string) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": input type map[int]string is not a struct, a pointer to a struct, a string, a boolean, a number, a slice, an array or a map with string keys`},
		{"interface input", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, any) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": input type interface {} is not a struct, a pointer to a struct, a string, a boolean, a number, a slice, an array or a map with string keys`},
		{"pointer to a primitive", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, *int) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": input type *int is not a struct or a pointer to a struct`},
		{"list of an unsupported type", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, []complex128) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": ForType([]complex128): computing element schema: type complex128 is unsupported by jsonschema`},
		{"pointer to pointer", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, **weatherIn) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": input type **tool_test.weatherIn is not a struct or a pointer to a struct`},
		{"unsupported field", func() (tool.Tool, error) {
			return tool.Func("t", "", func(context.Context, struct{ C chan int }) (string, error) { return "", nil })
		}, `invalid input schema: tool "t": ForType(struct { C chan int }): type chan int is unsupported by jsonschema`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.make()
			if !errors.Is(err, schema.ErrInvalid) || err.Error() != tt.want {
				t.Errorf("Func error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("MustFunc with a channel input did not panic")
		}
	}()
	tool.MustFunc("t", "", func(context.Context, chan int) (string, error) { return "", nil })
}

func TestFuncCall(t *testing.T) {
	boom := errors.New("no such city")
	replan := tool.ReplanRequested{Reason: "city moved"}
	artifact := tool.ArtifactResult("see artifact", tool.Artifact{TypeName: "Forecast"})

	forecast := tool.MustFunc("weather", "", func(_ context.Context, in weatherIn) (weatherOut, error) {
		switch in.City {
		case "Nowhere":
			return weatherOut{}, boom
		case "Atlantis":
			return weatherOut{}, fmt.Errorf("lookup: %w", replan)
		}
		return weatherOut{City: in.City, TempC: 21.5, Note: fmt.Sprintf("%d days, units %v, geo %v", in.Days, in.Units, in.Geo)}, nil
	})
	greet := tool.MustFunc("greet", "", func(_ context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return "Hello, " + in.Name + `! "quoted"`, nil
	})
	passThrough := tool.MustFunc("raw", "", func(context.Context, struct{}) (tool.Result, error) { return artifact, nil })
	anyResult := tool.MustFunc("any", "", func(context.Context, struct{}) (any, error) { return tool.Text("as any"), nil })
	number := tool.MustFunc("add", "", func(_ context.Context, in struct{ A, B int }) (int, error) { return in.A + in.B, nil })
	unencodable := tool.MustFunc("bad", "", func(context.Context, struct{}) (any, error) { return make(chan int), nil })
	pointer := tool.MustFunc("ptr", "", func(_ context.Context, in *weatherIn) (string, error) {
		if in == nil {
			return "nil", nil
		}
		return "city=" + in.City, nil
	})

	invalid := func(msg string) tool.Result { return tool.ErrorWithCode(tool.CodeInvalidArguments, msg) }
	tests := []struct {
		name    string
		tool    tool.Tool
		in      string
		want    tool.Result
		wantErr error
	}{
		{name: "struct output is JSON text", tool: forecast, in: `{"city":"Oslo","days":3,"units":["C"],"geo":{"lat":1,"lon":2}}`,
			want: tool.Text(`{"city":"Oslo","temp_c":21.5,"note":"3 days, units [C], geo &{1 2}"}`)},
		{name: "blank input is the zero value", tool: forecast, in: "  ",
			want: tool.Text(`{"city":"","temp_c":21.5,"note":"0 days, units [], geo <nil>"}`)},
		{name: "string output not JSON-quoted", tool: greet, in: `{"name":"Ada"}`, want: tool.Text(`Hello, Ada! "quoted"`)},
		{name: "Result output passes through", tool: passThrough, in: `{}`, want: artifact},
		{name: "Result in any passes through", tool: anyResult, in: ``, want: tool.Text("as any")},
		{name: "number output", tool: number, in: `{"A":5,"B":3}`, want: tool.Text("8")},
		{name: "pointer input", tool: pointer, in: `{"city":"Rome"}`, want: tool.Text("city=Rome")},
		{name: "pointer input, blank", tool: pointer, in: ``, want: tool.Text("city=")},
		{name: "error becomes error result", tool: forecast, in: `{"city":"Nowhere"}`,
			want: tool.Result{Kind: tool.KindError, Content: "no such city", Code: tool.CodeFailed}},
		{name: "signal propagates", tool: forecast, in: `{"city":"Atlantis"}`, wantErr: replan},
		{name: "invalid JSON", tool: forecast, in: `{"city":`,
			want: invalid("invalid arguments: invalid JSON: unexpected end of input at offset 8")},
		{name: "missing required", tool: forecast, in: `{"days":1}`,
			want: invalid(`invalid arguments: missing required property "city"`)},
		{name: "wrong type", tool: forecast, in: `{"city":"Oslo","days":"3"}`,
			want: invalid(`invalid arguments: property "days": expected integer, got string`)},
		{name: "unknown property, even in another case", tool: forecast, in: `{"City":"Oslo"}`,
			want: invalid(`invalid arguments: missing required property "city"`)},
		{name: "unknown property", tool: forecast, in: `{"city":"Oslo","when":"now"}`,
			want: invalid(`invalid arguments: unexpected property "when"; allowed: "city", "days", "geo", "units"`)},
		{name: "duplicate key", tool: greet, in: `{"name":"a","name":"b"}`,
			want: invalid(`invalid arguments: duplicate key "name"`)},
		{name: "integer spelt as float decodes", tool: number, in: `{"A":1.0,"B":2}`,
			want: tool.Text("3")},
		{name: "unencodable output", tool: unencodable, in: ``,
			want: tool.Result{Kind: tool.KindError, Content: "cannot encode the tool's output as JSON: json: unsupported type: chan int", Code: tool.CodeFailed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.tool.Call(context.Background(), tt.in)
			if (err == nil) != (tt.wantErr == nil) || (err != nil && !reflect.DeepEqual(unwrapAll(err), unwrapAll(tt.wantErr))) {
				t.Fatalf("Call(%q) error = %v, want %v", tt.in, err, tt.wantErr)
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

func TestFuncPassesContext(t *testing.T) {
	tl := tool.MustFunc("t", "", func(ctx context.Context, _ struct{}) (string, error) {
		v, _ := ctx.Value(ctxKey{}).(string)
		return v, nil
	})
	got, err := tl.Call(context.WithValue(context.Background(), ctxKey{}, "from ctx"), "{}")
	if err != nil || got.Content != "from ctx" {
		t.Errorf("Call = %+v, %v; want the context value", got, err)
	}
}

func ExampleFunc() {
	type input struct {
		City string `json:"city" jsonschema:"City to look up"`
		Days int    `json:"days,omitempty" jsonschema:"Number of days"`
	}
	forecast, err := tool.Func("forecast", "Weather forecast for a city",
		func(_ context.Context, in input) (string, error) {
			return fmt.Sprintf("%s: sunny for %d days", in.City, in.Days), nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(forecast.Definition().InputSchema)

	res, _ := forecast.Call(context.Background(), `{"city":"Lisbon","days":3}`)
	fmt.Println(res.Render())

	res, _ = forecast.Call(context.Background(), `{"days":3}`)
	fmt.Println(res.Render())
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"City to look up"},"days":{"type":"integer","description":"Number of days"}},"required":["city"],"additionalProperties":false}
	// Lisbon: sunny for 3 days
	// Error: invalid arguments: missing required property "city"
}
