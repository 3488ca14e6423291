package process_test

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func TestBlackboardLookups(t *testing.T) {
	var b process.Blackboard
	for _, e := range []struct{ name, typ, js string }{
		{"", "crm.v1.Customer", `{"id":1}`},
		{"vip", "crm.v1.Customer", `{"id":2}`},
		{"", "Order", `{"_typeName":"shop.Order","id":7}`},
		{"", "map", `{"_typeLabels":["Invoice","billing.Document"],"id":9}`},
		{"vip", "crm.v1.Customer", `{"id":3}`},
	} {
		if _, err := b.Add(e.name, tool.Entry{TypeName: e.typ, JSON: []byte(e.js)}); err != nil {
			t.Fatal(err)
		}
	}
	last := func(typ string) string {
		e, ok := b.Last(typ)
		if !ok {
			return ""
		}
		return string(e.JSON)
	}
	for typ, want := range map[string]string{
		"Customer":        `{"id":3}`,
		"crm.v1.Customer": `{"id":3}`,
		"v1.Customer":     "",
		"Order":           `{"_typeName":"shop.Order","id":7}`,
		"shop.Order":      `{"_typeName":"shop.Order","id":7}`,
		"Document":        `{"_typeLabels":["Invoice","billing.Document"],"id":9}`,
		"Invoice":         `{"_typeLabels":["Invoice","billing.Document"],"id":9}`,
		"":                "",
	} {
		if got := last(typ); got != want {
			t.Errorf("Last(%q) = %s, want %s", typ, got, want)
		}
	}
	if n := b.Count("Customer"); n != 3 {
		t.Errorf("Count(Customer) = %d", n)
	}
	// A name bound again points at the newer entry; the older stays.
	if e, _ := b.Get("vip"); string(e.JSON) != `{"id":3}` || len(b.Entries) != 5 {
		t.Errorf("Get(vip) = %s with %d entries", e.JSON, len(b.Entries))
	}
	// Clone shares nothing.
	c := b.Clone()
	_, _ = c.Add("other", tool.Entry{TypeName: "X", JSON: []byte(`1`)})
	if len(b.Entries) != 5 || len(b.Bindings) != 1 {
		t.Errorf("the clone changed the original: %d entries, %d bindings", len(b.Entries), len(b.Bindings))
	}
}

func TestBlackboardRefusesBadEntries(t *testing.T) {
	b := process.Blackboard{Bounds: process.Bounds{MaxEntries: 2, MaxBytes: 20}}
	for _, c := range []struct {
		e    tool.Entry
		want string
	}{
		{tool.Entry{TypeName: "X", JSON: []byte(`{not json`)}, "not valid JSON"},
		{tool.Entry{TypeName: " ", JSON: []byte(`1`)}, "empty type name"},
		{tool.Entry{TypeName: strings.Repeat("x", 300), JSON: []byte(`1`)}, "at most 256 bytes"},
		{tool.Entry{TypeName: "X", JSON: []byte(`"` + strings.Repeat("y", 30) + `"`)}, "over its 20 bytes"},
	} {
		if _, err := b.Add("", c.e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%q, %.20s): %v, want %q", c.e.TypeName, c.e.JSON, err, c.want)
		}
	}
	_, _ = b.Add("", tool.Entry{TypeName: "X", JSON: []byte(`1`)})
	_, _ = b.Add("", tool.Entry{TypeName: "X", JSON: []byte(`2`)})
	if _, err := b.Add("", tool.Entry{TypeName: "X", JSON: []byte(`3`)}); err == nil || !strings.Contains(err.Error(), "full (2 entries)") {
		t.Errorf("third entry: %v", err)
	}
	if len(b.Entries) != 2 {
		t.Errorf("%d entries", len(b.Entries))
	}
}

func TestCallBoard(t *testing.T) {
	seen := []tool.Binding{{Name: "c", Entry: tool.Entry{TypeName: "crm.Customer", JSON: []byte(`{"id":1}`)}}}
	b := toolcall.NewCallBoard(seen, 16)
	if e, ok := b.Last("Customer"); !ok || string(e.JSON) != `{"id":1}` {
		t.Errorf("Last = %s %v", e.JSON, ok)
	}
	if err := b.Bind("c", tool.Entry{TypeName: "crm.Customer", JSON: []byte(`{"id":2}`)}); err != nil {
		t.Fatal(err)
	}
	if e, _ := b.Get("c"); string(e.JSON) != `{"id":2}` {
		t.Errorf("Get(c) = %s, want the call's own binding", e.JSON)
	}
	if err := b.Add(tool.Entry{TypeName: "X", JSON: []byte(`"0123456789"`)}); err == nil {
		t.Error("an addition over the bound was accepted")
	}
	if err := b.Add(tool.Entry{TypeName: "X", JSON: []byte(`nope`)}); err == nil {
		t.Error("a value that is not JSON was accepted")
	}
	if got := b.Added(); len(got) != 1 || got[0].Name != "c" {
		t.Errorf("Added = %v", got)
	}
}

// TestAdditionsReportedInOrder: concurrent additions reach the channel in the order of
// their positions on the blackboard.
func TestAdditionsReportedInOrder(t *testing.T) {
	var got []int
	p := process.New("run", process.Limits{}, process.Bounds{}, func(o process.Output) error {
		got = append(got, o.(process.EntryAdded).Index) // serialised by the process
		return nil
	})
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 50; i++ {
				_ = p.Add(process.Origin{}, "", tool.Entry{TypeName: "N", JSON: []byte(`1`)})
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	for i, idx := range got {
		if idx != i {
			t.Fatalf("report %d has index %d", i, idx)
		}
	}
	if len(got) != 400 {
		t.Fatalf("%d reports", len(got))
	}
}

// TestCanAdd: a set of entries is checked whole, and nothing is added by the check.
func TestCanAdd(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{MaxEntries: 2}, nil)
	good := tool.Binding{Entry: tool.Entry{TypeName: "X", JSON: []byte(`1`)}}
	bad := tool.Binding{Entry: tool.Entry{TypeName: "X", JSON: []byte(`{no`)}}
	if err := p.CanAdd([]tool.Binding{good, bad}); err == nil || !strings.Contains(err.Error(), "blackboard object 2 of 2 was refused") {
		t.Errorf("CanAdd(good, bad) = %v", err)
	}
	if err := p.CanAdd([]tool.Binding{good, good, good}); err == nil || !strings.Contains(err.Error(), "object 3 of 3") {
		t.Errorf("CanAdd over the bound = %v", err)
	}
	if err := p.CanAdd([]tool.Binding{good, good}); err != nil {
		t.Errorf("CanAdd(good, good) = %v", err)
	}
	if n := len(p.Snapshot().Blackboard.Entries); n != 0 {
		t.Errorf("CanAdd added %d entries", n)
	}
}

// A blob joins the blackboard with its bytes and media type; its data counts against the
// byte bound as JSON does, and it holds one value: a bad media type, or JSON beside the
// data, is refused with what is wrong.
func TestBlackboardHoldsBlobs(t *testing.T) {
	b := process.Blackboard{Bounds: process.Bounds{MaxBytes: 12}}
	png := tool.Entry{TypeName: "chart.Png", Data: []byte("0123456789"), MediaType: "image/png"}
	i, err := b.Add("chart", png)
	if err != nil {
		t.Fatal(err)
	}
	png.Data[0] = 'X' // the blackboard keeps its own copy
	if e, ok := b.Get("chart"); !ok || i != 0 || string(e.Data) != "0123456789" || e.MediaType != "image/png" || len(e.JSON) != 0 || b.Bytes != 10 {
		t.Errorf("Get(chart) = %+v (%d bytes)", e, b.Bytes)
	}
	if e, ok := b.Last("Png"); !ok || e.TypeName != "chart.Png" {
		t.Errorf("Last(Png) = %+v, %v", e, ok)
	}
	for _, c := range []struct {
		e    tool.Entry
		want string
	}{
		{tool.Entry{TypeName: "Pdf", Data: []byte("123"), MediaType: "application/pdf"}, `blackboard entry of type "Pdf": 3 bytes would take the blackboard over its 12 bytes`},
		{tool.Entry{TypeName: "Pdf", Data: []byte("1"), MediaType: "pdf"}, `blackboard object of type "Pdf": the media type "pdf" is not of the form type/subtype`},
		{tool.Entry{TypeName: "Pdf", Data: []byte("1")}, `blackboard object of type "Pdf": a blob needs a media type`},
		{tool.Entry{TypeName: "Pdf", JSON: []byte(`1`), Data: []byte("1"), MediaType: "application/pdf"}, `blackboard object of type "Pdf": it holds both JSON and a blob's data`},
	} {
		if _, err := b.Add("", c.e); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Add(%+v) = %v, want %q", c.e, err, c.want)
		}
	}
	if len(b.Entries) != 1 || b.Bytes != 10 {
		t.Errorf("%d entries, %d bytes after the refusals", len(b.Entries), b.Bytes)
	}
}

// A blob asset counts its bytes against the assets' bound.
func TestBlobAssets(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{MaxBytes: 12}, nil)
	blob := tool.Entry{TypeName: "report.Pdf", Data: []byte("%PDF-1.7"), MediaType: "application/pdf"}
	if err := p.AddAsset(process.Asset{Entry: blob, Tool: "render"}, "loop"); err != nil {
		t.Fatal(err)
	}
	if err := p.AddAsset(process.Asset{Entry: blob, Tool: "render"}, "loop"); err == nil || err.Error() != "the run keeps at most 12 bytes of assets" {
		t.Errorf("a second 8-byte blob: %v", err)
	}
	bad := tool.Entry{TypeName: "report.Pdf", Data: []byte("x"), MediaType: "application/pdf/x"}
	if err := p.AddAsset(process.Asset{Entry: bad}, "loop"); err == nil || !strings.HasPrefix(err.Error(), `asset of type "report.Pdf": the media type "application/pdf/x" is not one`) {
		t.Errorf("a bad media type: %v", err)
	}
	if st := p.Snapshot(); len(st.Assets) != 1 || st.AssetBytes != 8 || string(st.Assets[0].Entry.Data) != "%PDF-1.7" {
		t.Errorf("assets %+v, %d bytes", st.Assets, st.AssetBytes)
	}
}
