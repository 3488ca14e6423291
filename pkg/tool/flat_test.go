package tool

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type flatAll struct {
	F   float64 `json:"f"`
	F32 float32 `json:"f32"`
	I   int     `json:"i"`
	I8  int8    `json:"i8"`
	U   uint    `json:"u"`
	U16 uint16  `json:"u16,omitempty"`
	S   string  `json:"s"`
	B   bool    `json:"b"`
	N   string  // no tag: its name
	Off string  `json:"-"`
}

// selfDecoding and textDecoding decode themselves: encoding/json calls their methods,
// so the plan must leave them to it.
type selfDecoding struct {
	Name string `json:"name"`
}

func (s *selfDecoding) UnmarshalJSON(b []byte) error {
	var v struct{ Name string }
	err := json.Unmarshal(b, &v)
	s.Name = strings.ToUpper(v.Name)
	return err
}

type textDecoding struct {
	Name string `json:"name"`
}

func (s *textDecoding) UnmarshalText(b []byte) error { s.Name = string(b); return nil }

// flatAgrees decodes in with the plan and with encoding/json (refusing unknown fields),
// and fails when the plan decoded what encoding/json refuses, or decoded it otherwise.
func flatAgrees(t *testing.T, in string) (planned bool) {
	t.Helper()
	plan := newFlatPlan(reflect.TypeFor[flatAll]())
	if plan == nil {
		t.Fatal("flatAll has no plan")
	}
	var got flatAll
	if !plan.decode(in, reflect.ValueOf(&got)) {
		return false
	}
	var want flatAll
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil || dec.More() {
		t.Fatalf("the plan decoded %q, which encoding/json refuses: %v", in, err)
	}
	if got != want {
		t.Fatalf("%q: the plan decoded %+v, encoding/json %+v", in, got, want)
	}
	return true
}

// TestFlatPlan: flat structs get a plan, others do not; the plan decodes canonical
// arguments as encoding/json does, and leaves to it everything else.
func TestFlatPlan(t *testing.T) {
	type nested struct {
		X struct{ A int } `json:"x"`
	}
	type named int
	type withNamed struct {
		N named `json:"n"`
	}
	type embedded struct{ flatAll }
	type stringOpt struct {
		A int `json:"a,string"`
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[nested](), reflect.TypeFor[withNamed](), reflect.TypeFor[embedded](),
		reflect.TypeFor[stringOpt](), reflect.TypeFor[[]int](), reflect.TypeFor[map[string]int](),
		reflect.TypeFor[selfDecoding](), reflect.TypeFor[*selfDecoding](), reflect.TypeFor[textDecoding]()} {
		if newFlatPlan(typ) != nil {
			t.Errorf("%s got a plan", typ)
		}
	}
	if newFlatPlan(reflect.TypeFor[*flatAll]()) == nil {
		t.Error("a pointer to a flat struct got no plan")
	}
	for _, in := range []string{
		`{}`, `{"f":12345.678901234567890123456789012345678901,"i":-3,"s":"héllo","b":true,"N":"n"}`,
		`{"f32":1.5,"i8":-128,"u":0,"u16":65535,"s":"","b":false}`, `{"f":1e308,"i":null,"s":null}`, `{"f":-0,"i":0}`,
		`{"i":1,"i":2}`,
	} {
		if !flatAgrees(t, in) {
			t.Errorf("the plan left %q to encoding/json", in)
		}
	}
	for _, in := range []string{
		`{"F":1}`, `{"zz":1}`, `{"i":1.5}`, `{"i8":128}`, `{"u":-1}`, `{"u16":65536}`, `{"f":1e400}`, `{"f32":1e39}`,
		`{"s":"a\"b"}`, `{"s":"tab\tinside"}`, "{\"s\":\"\xff\"}", `{"s":1}`, `{"f":"1"}`, `{"b":1}`, `{"f":+1}`, `{"f":01}`,
		`{"f":1.}`, `{"f":.5}`, `{"f":0x10}`, `{"f":Inf}`, `{"f":[1]}`, `{"f":{}}`, `{"i":1,}`, `{ "i":1}`, `[1]`, `null`,
		`{"Off":"x"}`, `{"-":1}`, `{"i":1}x`,
	} {
		if flatAgrees(t, in) {
			t.Errorf("the plan decoded %q itself", in)
		}
	}
}

// FuzzFlatAgreesWithJSON: whatever the plan decodes, encoding/json decodes the same way.
func FuzzFlatAgreesWithJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"f":1.25,"i":-3,"s":"x","b":true}`, `{"u16":65535,"i8":-128}`, `{"f":1e-400}`, `{"s":"\u00e9"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { flatAgrees(t, in) })
}

func BenchmarkFlatDecode(b *testing.B) {
	type add struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	plan := newFlatPlan(reflect.TypeFor[add]())
	in := `{"a":12345.678901234567890123456789012345678901,"b":98765.432109876543210987654321098765432109}`
	b.ReportAllocs()
	for b.Loop() {
		var v add
		if !plan.decode(in, reflect.ValueOf(&v)) {
			b.Fatal("not decoded")
		}
	}
}

// TestTypedToolHonoursItsUnmarshalJSON: a typed tool whose input decodes itself gets
// what its UnmarshalJSON makes of the arguments.
func TestTypedToolHonoursItsUnmarshalJSON(t *testing.T) {
	tl := MustFunc("shout", "Shout", func(_ context.Context, in selfDecoding) (string, error) { return in.Name, nil })
	res, err := tl.Call(context.Background(), `{"name":"abc"}`)
	if err != nil || res.Content != "ABC" {
		t.Errorf("the tool got %q, %v; want its UnmarshalJSON's ABC", res.Content, err)
	}
}
