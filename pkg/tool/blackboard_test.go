package tool_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A blob entry holds a copy of its bytes and a media type of the form type/subtype; an
// entry holds JSON or a blob, never both, and says which.
func TestBlobEntries(t *testing.T) {
	data := []byte{0x89, 'P', 'N', 'G'}
	e, err := tool.EntryFromBlob("chart.Png", "image/png", data)
	if err != nil {
		t.Fatal(err)
	}
	data[0] = 0
	if diff := cmp.Diff(tool.Entry{TypeName: "chart.Png", Data: []byte{0x89, 'P', 'N', 'G'}, MediaType: "image/png"}, e); diff != "" {
		t.Errorf("EntryFromBlob (-want +got):\n%s", diff)
	}
	if !e.IsBlob() || e.Size() != 4 || !tool.SatisfiesType(e, "Png") {
		t.Errorf("blob: IsBlob %v, Size %d, SatisfiesType(Png) %v", e.IsBlob(), e.Size(), tool.SatisfiesType(e, "Png"))
	}
	if j := (tool.Entry{TypeName: "N", JSON: []byte(`12`)}); j.IsBlob() || j.Size() != 2 {
		t.Errorf("JSON entry: IsBlob %v, Size %d", j.IsBlob(), j.Size())
	}
	empty, err := tool.EntryFromBlob("Empty", "text/plain", nil)
	if err != nil || !empty.IsBlob() || empty.Size() != 0 {
		t.Errorf("an empty blob: %+v, %v", empty, err)
	}

	for _, tt := range []struct {
		name string
		e    tool.Entry
		want string // "" for none
	}{
		{"a JSON value", tool.Entry{TypeName: "N", JSON: []byte(`{"a":1}`)}, ""},
		{"a blob", tool.Entry{TypeName: "Pdf", Data: []byte("%PDF"), MediaType: "application/pdf"}, ""},
		{"parameters", tool.Entry{TypeName: "Csv", Data: []byte("a,b"), MediaType: "text/csv; charset=utf-8"}, ""},
		{"both", tool.Entry{TypeName: "X", JSON: []byte(`1`), Data: []byte{1}, MediaType: "image/png"}, `blackboard object of type "X": it holds both JSON and a blob's data; it may hold one`},
		{"data without a media type", tool.Entry{TypeName: "X", Data: []byte{1}}, `blackboard object of type "X": a blob needs a media type, such as "application/octet-stream"`},
		{"no subtype", tool.Entry{TypeName: "X", Data: []byte{1}, MediaType: "png"}, `blackboard object of type "X": the media type "png" is not of the form type/subtype`},
		{"not a media type", tool.Entry{TypeName: "X", Data: []byte{1}, MediaType: "image/png/x"}, `blackboard object of type "X": the media type "image/png/x" is not one`},
		{"a control byte", tool.Entry{TypeName: "X", Data: []byte{1}, MediaType: "image/png\r\nX: y"}, `blackboard object of type "X": the media type "image/png\r\nX: y" holds a byte that is not printable ASCII`},
		{"too long", tool.Entry{TypeName: "X", Data: []byte{1}, MediaType: "image/" + strings.Repeat("p", 251)}, `blackboard object of type "X": the media type is 257 bytes; the limit is 256`},
		{"a blank type name", tool.Entry{TypeName: " ", Data: []byte{1}, MediaType: "image/png"}, "blackboard object: empty type name"},
		{"invalid JSON", tool.Entry{TypeName: "X", JSON: []byte(`{`)}, `blackboard object of type "X": the value is not valid JSON`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tool.CheckEntry(tt.e)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckEntry: %v", err)
				}
				if diff := cmp.Diff(tt.e, got); diff != "" {
					t.Errorf("CheckEntry changed the entry (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("CheckEntry = %v, want %q", err, tt.want)
			}
		})
	}
}
