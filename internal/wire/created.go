package wire

import (
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// MaxCreatedTools bounds the tools one selection may create (Selection.created).
const MaxCreatedTools = 64

// ParseDefinition checks the bounds of a tool's or facade's definition (description,
// schema, metadata, blackboard types, receiver type, once-per-loop advice) and decodes
// it. It does not check the name.
func ParseDefinition(p *toolpb.ToolDefinition) (tool.Definition, tool.Metadata, error) {
	if msg := CheckText(p.GetDescription(), MaxDescriptionBytes); msg != "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("description %s", msg)
	}
	if n := len(p.GetInputSchemaJson()); n > MaxSchemaBytes {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("input schema is %d bytes; the limit is %d", n, MaxSchemaBytes)
	}
	if n := len(p.GetMetadata()); n > MaxMetadataEntries {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("metadata has %d entries; the limit is %d", n, MaxMetadataEntries)
	}
	for k, v := range p.GetMetadata() {
		if msg := CheckText(k, MaxMetadataKeyBytes); msg != "" {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("a metadata key %s", msg)
		}
		if msg := CheckText(v, MaxMetadataValueBytes); msg != "" {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("metadata %q %s", Truncate(k, 64), msg)
		}
	}
	if n := len(p.GetBlackboardTypes()); n > MaxBlackboardTypes {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("blackboard_types has %d entries; the limit is %d", n, MaxBlackboardTypes)
	}
	for i, t := range p.GetBlackboardTypes() {
		if t == "" {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("blackboard_types[%d] is empty", i)
		}
		if msg := CheckText(t, MaxTypeNameBytes); msg != "" {
			return tool.Definition{}, tool.Metadata{}, fmt.Errorf("blackboard_types[%d] %s", i, msg)
		}
	}
	if msg := CheckText(p.GetReceiverType(), MaxTypeNameBytes); msg != "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("receiver_type %s", msg)
	}
	if p.GetReceiverType() != "" && strings.TrimSpace(p.GetReceiverType()) == "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("receiver_type is blank")
	}
	if msg := CheckText(p.GetOncePerLoop().GetAdvice(), MaxOnceAdviceBytes); msg != "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("once_per_loop.advice %s", msg)
	}
	return DefinitionFromProto(p)
}

// ParseCreated checks a tool a selector created as a registered tool's definition is
// checked, and decodes it. The error names the created tool and the problem.
func ParseCreated(c *toolpb.CreatedTool) (tool.Definition, tool.Metadata, error) {
	p := c.GetDefinition()
	if p == nil {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("a created tool of template '%s' has no definition", Truncate(c.GetTemplate(), 64))
	}
	name := p.GetName()
	if msg := CheckID(name, ToolNameRE, 64); msg != "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("created tool '%s': name %s", Truncate(name, 64), msg)
	}
	if msg := CheckID(c.GetTemplate(), ToolNameRE, 64); msg != "" {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("created tool '%s': template %s", name, msg)
	}
	def, meta, err := ParseDefinition(p)
	if err != nil {
		return tool.Definition{}, tool.Metadata{}, fmt.Errorf("created tool '%s': %w", name, err)
	}
	return def, meta, nil
}
