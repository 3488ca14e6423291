package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// Entry is a value on a run's blackboard: the name of its type and the value, either as
// JSON or, for a blob (a PNG chart, a PDF), as bytes with their media type; never both.
// The type name is what lookups match (see SatisfiesType): a simple name such as
// "Customer" or a qualified one such as "crm.Customer".
type Entry struct {
	TypeName string
	// JSON is the value as one JSON value; empty for a blob.
	JSON json.RawMessage
	// Data is a blob's bytes and MediaType their media type ("image/png"); both empty for
	// a JSON value. An entry with a media type is a blob, even of no bytes.
	Data      []byte
	MediaType string
}

// MaxMediaTypeBytes bounds a blob's media type.
const MaxMediaTypeBytes = 256

// IsBlob reports whether e is a blob rather than a JSON value.
func (e Entry) IsBlob() bool { return e.MediaType != "" || e.Data != nil }

// Size is the bytes of e's value, its JSON or its blob's data: what the bounds of a
// blackboard count.
func (e Entry) Size() int { return len(e.JSON) + len(e.Data) }

// EntryFromBlob returns an Entry holding a copy of data, a blob of the given media type
// ("image/png", "text/csv; charset=utf-8"; see CheckMediaType).
func EntryFromBlob(typeName, mediaType string, data []byte) (Entry, error) {
	if strings.TrimSpace(typeName) == "" {
		return Entry{}, errors.New("blackboard object: empty type name")
	}
	if err := CheckMediaType(mediaType); err != nil {
		return Entry{}, fmt.Errorf("blackboard object of type %q: %w", typeName, err)
	}
	return Entry{TypeName: typeName, Data: append([]byte{}, data...), MediaType: mediaType}, nil
}

// CheckEntry returns a copy of e once it holds one value: one valid JSON value
// (EntryFromJSON), or a blob with a valid media type and no JSON (EntryFromBlob).
func CheckEntry(e Entry) (Entry, error) {
	if !e.IsBlob() {
		return EntryFromJSON(e.TypeName, e.JSON)
	}
	if len(e.JSON) > 0 {
		return Entry{}, fmt.Errorf("blackboard object of type %q: it holds both JSON and a blob's data; it may hold one", e.TypeName)
	}
	return EntryFromBlob(e.TypeName, e.MediaType, e.Data)
}

// CheckMediaType checks a blob's media type: type/subtype, optionally followed by
// parameters ("text/csv; charset=utf-8"), printable ASCII, at most MaxMediaTypeBytes.
func CheckMediaType(mediaType string) error {
	switch {
	case mediaType == "":
		return errors.New("a blob needs a media type, such as \"application/octet-stream\"")
	case len(mediaType) > MaxMediaTypeBytes:
		return fmt.Errorf("the media type is %d bytes; the limit is %d", len(mediaType), MaxMediaTypeBytes)
	}
	for i := 0; i < len(mediaType); i++ {
		if c := mediaType[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("the media type %q holds a byte that is not printable ASCII", mediaType)
		}
	}
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return fmt.Errorf("the media type %q is not one: %v", mediaType, err)
	}
	if typ, sub, ok := strings.Cut(mt, "/"); !ok || typ == "" || sub == "" || strings.Contains(sub, "/") {
		return fmt.Errorf("the media type %q is not of the form type/subtype", mediaType)
	}
	return nil
}

// NewEntry returns v as an Entry of the given type, encoding it as JSON. A nil v, or
// one that JSON cannot encode, is an error.
func NewEntry(typeName string, v any) (Entry, error) {
	if strings.TrimSpace(typeName) == "" {
		return Entry{}, errors.New("blackboard object: empty type name")
	}
	if raw, ok := v.(json.RawMessage); ok {
		return EntryFromJSON(typeName, raw)
	}
	if v == nil {
		return Entry{}, fmt.Errorf("blackboard object of type %q: nil value", typeName)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Entry{}, fmt.Errorf("blackboard object of type %q: %w", typeName, err)
	}
	return Entry{TypeName: typeName, JSON: b}, nil
}

// EntryFromJSON returns an Entry holding raw, which must be one valid JSON value.
func EntryFromJSON(typeName string, raw []byte) (Entry, error) {
	if strings.TrimSpace(typeName) == "" {
		return Entry{}, errors.New("blackboard object: empty type name")
	}
	if !json.Valid(raw) {
		return Entry{}, fmt.Errorf("blackboard object of type %q: the value is not valid JSON", typeName)
	}
	if !utf8.Valid(raw) {
		// JSON is UTF-8 text (json.Valid passes other bytes in strings): an entry that is
		// not could not be sent to a worker or a client, and would fail their calls.
		return Entry{}, fmt.Errorf("blackboard object of type %q: the value is not UTF-8 text", typeName)
	}
	return Entry{TypeName: typeName, JSON: json.RawMessage(append([]byte(nil), raw...))}, nil
}

// SimpleTypeName is the last segment of a qualified type name: "Customer" for
// "crm.v1.Customer" (and for "crm/Customer" or "crm::Customer").
func SimpleTypeName(typeName string) string {
	if i := strings.LastIndexAny(typeName, "./:$"); i >= 0 {
		return typeName[i+1:]
	}
	return typeName
}

// SatisfiesType reports whether o is of the type named name: its type name equals name,
// or its simple name does (so "Customer" matches "crm.Customer"); or, for a JSON object,
// its "_typeName" entry or one of the names in its "_typeLabels" entry matches the same
// way. Names are compared exactly; an empty name matches nothing.
func SatisfiesType(o Entry, name string) bool {
	if name == "" {
		return false
	}
	match := func(typeName string) bool {
		return typeName != "" && (typeName == name || SimpleTypeName(typeName) == name)
	}
	if match(o.TypeName) {
		return true
	}
	if len(o.JSON) == 0 || o.JSON[0] != '{' {
		return false
	}
	var labels struct {
		TypeName   string   `json:"_typeName"`
		TypeLabels []string `json:"_typeLabels"`
	}
	if json.Unmarshal(o.JSON, &labels) != nil {
		return false
	}
	if match(labels.TypeName) {
		return true
	}
	for _, l := range labels.TypeLabels {
		if match(l) {
			return true
		}
	}
	return false
}

// Blackboard is a run's shared state as a tool sees it: the objects earlier steps put
// there, in the order they were added, and names bound to some of them. In the
// orchestrator it is the run's own blackboard. In a worker it holds what the orchestrator
// sent with the call (the newest object of each type the tool declared it needs, see
// NeedsBlackboard) and records what the tool adds, which travels back with the result and
// joins the run's blackboard, whichever replica ran the call.
type Blackboard interface {
	// Entries returns the visible entries, oldest first.
	Entries() []Entry
	// Last returns the newest object that satisfies the type name (see SatisfiesType).
	Last(typeName string) (Entry, bool)
	// Get returns the object bound to name.
	Get(name string) (Entry, bool)
	// Add puts o on the blackboard.
	Add(o Entry) error
	// Bind puts o on the blackboard and binds name to it.
	Bind(name string, o Entry) error
}

// BlackboardFrom returns the blackboard of the run the call belongs to, or nil when the
// call belongs to none (a tool called outside a run).
func BlackboardFrom(ctx context.Context) Blackboard {
	b, _ := ctx.Value(toolinternal.BlackboardKey{}).(Blackboard)
	return b
}

// Binding is an object bound to a name, as it travels with a call.
type Binding struct {
	// Name is the binding's name; empty for an object added without one.
	Name  string
	Entry Entry
}

// Progress reports what a tool is doing while it runs, such as "fetched 3 of 10 pages".
// The report reaches the run's client as a progress event. A tool on a worker must
// declare that it reports progress (see ReportsProgress), or its reports are dropped;
// outside a run they are dropped too. It never fails the call.
func Progress(ctx context.Context, status string) {
	if r, ok := ctx.Value(toolinternal.ProgressKey{}).(func(string)); ok && r != nil && status != "" {
		r(status)
	}
}
