package router

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// FuzzRegistration feeds validate registration messages decoded from arbitrary bytes, as
// a hostile worker can send them: it never panics, it decides the same way twice, and
// what it accepts is within the bounds the routing table relies on.
func FuzzRegistration(f *testing.F) {
	for _, reg := range []*toolpb.Registration{
		{WorkerId: "w-1", Address: "127.0.0.1:1", Groups: []*toolpb.GroupRegistration{{
			Group: &toolpb.ToolGroupInfo{Role: "math", Description: "Math"},
			Tools: []*toolpb.RegisteredTool{{Definition: &toolpb.ToolDefinition{Name: "add", Description: "Add", InputSchemaJson: `{"type":"object","properties":{"a":{"type":"number"}}}`}}},
		}}},
		{WorkerId: "w-2", Address: "[::1]:2", Groups: []*toolpb.GroupRegistration{{
			Group:   &toolpb.ToolGroupInfo{Role: "x"},
			Tools:   []*toolpb.RegisteredTool{{Definition: &toolpb.ToolDefinition{Name: "t", InputSchemaJson: `{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`}}},
			Facades: []*toolpb.FacadeNode{{Definition: &toolpb.ToolDefinition{Name: "f"}}},
		}}},
		{WorkerId: "", Address: "not an address"},
	} {
		b, err := proto.Marshal(reg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reg := &toolpb.Registration{}
		if proto.Unmarshal(data, reg) != nil {
			return
		}
		rej, parsed := validate(reg)
		rej2, parsed2 := validate(reg)
		if len(rej) != len(rej2) || len(parsed) != len(parsed2) {
			t.Fatalf("validate decided twice differently: %d/%d rejections, %d/%d tools", len(rej), len(rej2), len(parsed), len(parsed2))
		}
		for _, r := range rej {
			if len(r.GetReason()) > maxReasonBytes || len(r.GetGroup()) > 256 || len(r.GetTool()) > 256 {
				t.Fatalf("a rejection over its bounds: %d, %d, %d bytes", len(r.GetReason()), len(r.GetGroup()), len(r.GetTool()))
			}
		}
		if len(rej) > 0 {
			return
		}
		for name, p := range parsed {
			if name == "" || p.def.Name != name {
				t.Fatalf("accepted tool %q parsed as %q", name, p.def.Name)
			}
			if p.hash == "" || p.size <= 0 {
				t.Fatalf("accepted tool %q without a hash or size", name)
			}
			// A schema may require properties: validating must only not panic.
			_, _ = p.def.InputSchema.Validate("{}")
		}
	})
}
