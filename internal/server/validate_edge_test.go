package server

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestRequirementsValidation(t *testing.T) {
	rq := func(role string, tools ...string) *toolpb.ToolGroupRequirement {
		return &toolpb.ToolGroupRequirement{Role: role, Tools: tools}
	}
	for _, tc := range []struct {
		name string
		req  *toolpb.RunRequest
	}{
		{"twice", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a"), rq("a")}}},
		{"also in tool_groups", &toolpb.RunRequest{Prompt: "x", ToolGroups: []string{"a"}, RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a")}}},
		{"bad tool", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a", "bad name")}}},
		{"tool twice", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a", "t", "t")}}},
		{"empty role", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("")}}},
		{"bad role", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a b")}}},
		{"long tool", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{rq("a", string(make([]byte, 65)))}}},
		{"nil entry", &toolpb.RunRequest{Prompt: "x", RequiredToolGroups: []*toolpb.ToolGroupRequirement{nil}}},
	} {
		fe := validateRun(tc.req)
		if fe == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		t.Logf("%s: %s: %s", tc.name, fe.field, fe.desc)
	}
}
