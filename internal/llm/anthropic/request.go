package anthropic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func badRequest(format string, args ...any) error { return llm.BadRequest(Name, format, args...) }

// params translates req into the parameters of a streamed message.
func (p *Provider) params(req *llm.Request) (anthropic.MessageNewParams, error) {
	var params anthropic.MessageNewParams
	model, err := llm.RequestModel(Name, req, p.defaultModel)
	if err != nil {
		return params, err
	}
	params.Model = anthropic.Model(model)
	params.MaxTokens = int64(p.maxTokens)
	if req.MaxOutputTokens > 0 {
		params.MaxTokens = int64(req.MaxOutputTokens)
	}
	if req.System != "" {
		params.System = append(params.System, anthropic.TextBlockParam{Text: req.System})
	}

	var b builder
	for i, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			if m.Text != "" {
				params.System = append(params.System, anthropic.TextBlockParam{Text: m.Text})
			}
		case llm.RoleUser:
			if m.Text != "" {
				b.add(true, anthropic.NewTextBlock(m.Text))
			}
		case llm.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, toolInput(tc.Arguments), tc.Name))
			}
			b.add(false, blocks...)
		case llm.RoleTool:
			tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Text != "" {
				tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Text}}}
			}
			tr.Content = append(tr.Content, imageBlocks(m.Images)...)
			if m.IsError {
				tr.IsError = anthropic.Bool(true)
			}
			b.addResult(anthropic.ContentBlockParamUnion{OfToolResult: &tr})
		default:
			return params, badRequest("message %d: unknown role %q", i, m.Role)
		}
	}
	params.Messages = b.msgs

	for _, t := range req.Tools {
		schema, err := inputSchema(t.Parameters)
		if err != nil {
			return params, badRequest("tool %q: %v", t.Name, err)
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	if len(bytes.TrimSpace(req.OutputSchema)) > 0 {
		schema, err := outputSchema(req.OutputSchema)
		if err != nil {
			return params, badRequest("the output schema: %v", err)
		}
		params.OutputConfig = anthropic.OutputConfigParam{Format: anthropic.JSONOutputFormatParam{Schema: schema}}
	}
	return params, nil
}

// builder gathers the messages of a conversation, grouping consecutive messages of one
// role into one message.
type builder struct {
	msgs []anthropic.MessageParam
}

// last returns the content of the last message if it has the role, else nil.
func (b *builder) last(user bool) *[]anthropic.ContentBlockParamUnion {
	if n := len(b.msgs); n > 0 {
		m := &b.msgs[n-1]
		if user && m.OfUser != nil {
			return &m.OfUser.Content
		}
		if !user && m.OfAssistant != nil {
			return &m.OfAssistant.Content
		}
	}
	return nil
}

func (b *builder) add(user bool, blocks ...anthropic.ContentBlockParamUnion) {
	if len(blocks) == 0 {
		return
	}
	if c := b.last(user); c != nil {
		*c = append(*c, blocks...)
		return
	}
	if user {
		b.msgs = append(b.msgs, anthropic.NewUserMessage(blocks...))
	} else {
		b.msgs = append(b.msgs, anthropic.NewAssistantMessage(blocks...))
	}
}

// addResult adds a tool_result block to the user turn, after its other tool results and
// before its text: the API wants the results first.
func (b *builder) addResult(block anthropic.ContentBlockParamUnion) {
	c := b.last(true)
	if c == nil {
		b.msgs = append(b.msgs, anthropic.NewUserMessage(block))
		return
	}
	i := 0
	for i < len(*c) && (*c)[i].OfToolResult != nil {
		i++
	}
	*c = slices.Insert(*c, i, block)
}

// toolInput is the input of a tool_use block: the call's arguments when they are a JSON
// object, else an empty object (the model's invalid arguments cannot be sent back as
// input; the tool result says what was wrong).
func toolInput(args string) json.RawMessage {
	args = strings.TrimSpace(args)
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

// inputSchema is a tool's JSON Schema as the SDK takes it. The values stay raw JSON, so
// that the order of the properties is kept.
func inputSchema(schema json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var s anthropic.ToolInputSchemaParam
	if len(bytes.TrimSpace(schema)) == 0 {
		s.Properties = map[string]any{}
		return s, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil || fields == nil {
		return s, fmt.Errorf("parameters are not a JSON Schema object")
	}
	for k, v := range fields {
		switch k {
		case "type": // always "object"
		case "properties":
			s.Properties = v
		case "required":
			if json.Unmarshal(v, &s.Required) != nil {
				return s, fmt.Errorf("required is not a list of names")
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	return s, nil
}

// outputSchema is the schema of output_config.format: the schema as written when the API
// supports it as it is, else the SDK's adaptation of it.
func outputSchema(schema json.RawMessage) (map[string]any, error) {
	var decoded any
	if err := json.Unmarshal(schema, &decoded); err != nil {
		return nil, fmt.Errorf("not JSON")
	}
	root, ok := decoded.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON Schema object")
	}
	if NativeCompatible(schema) {
		// Keep the raw text of each value, so that the order of the properties is kept.
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(schema, &fields)
		out := make(map[string]any, len(fields))
		for k, v := range fields {
			out[k] = v
		}
		return out, nil
	}
	if adapted, ok := anthropic.BetaJSONSchemaOutputFormat(root).Schema.(map[string]any); ok && adapted != nil {
		return adapted, nil
	}
	return root, nil
}

var nativeKeywords = map[string]bool{
	"$ref": true, "$defs": true, "type": true, "anyOf": true, "allOf": true, "description": true,
	"title": true, "enum": true, "const": true, "properties": true, "additionalProperties": true,
	"required": true, "items": true, "minItems": true, "format": true, "pattern": true,
}

var nativeFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true,
	"hostname": true, "uri": true, "ipv4": true, "ipv6": true, "uuid": true,
}

// NativeCompatible reports whether schema can go to output_config.format as it is: it uses
// only the keywords the API supports (those the SDK keeps: $ref, $defs, type, anyOf,
// allOf, description, title, enum, const, properties, additionalProperties, required,
// items, minItems of 0 or 1, the supported formats, pattern), and each object with
// properties is closed with additionalProperties: false. Other schemas are adapted by the
// SDK before they are sent.
func NativeCompatible(schema json.RawMessage) bool {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil || root == nil {
		return false
	}
	return nativeNode(root)
}

func nativeNode(n map[string]any) bool {
	for k := range n {
		if !nativeKeywords[k] {
			return false
		}
	}
	if f, ok := n["format"]; ok {
		if s, _ := f.(string); !nativeFormats[s] {
			return false
		}
	}
	if mi, ok := n["minItems"]; ok && mi != 0.0 && mi != 1.0 {
		return false
	}
	props, hasProps := n["properties"]
	addl, hasAddl := n["additionalProperties"]
	if n["type"] == "object" {
		switch {
		case hasProps && addl != false:
			return false
		case !hasProps && !hasAddl:
			return false
		}
	}
	if hasProps {
		pm, ok := props.(map[string]any)
		if !ok {
			return false
		}
		for _, sub := range pm {
			if !nativeSub(sub) {
				return false
			}
		}
	}
	if am, ok := addl.(map[string]any); ok && !nativeNode(am) {
		return false
	}
	if items, ok := n["items"]; ok && !nativeSub(items) {
		return false
	}
	for _, key := range []string{"anyOf", "allOf"} {
		if v, ok := n[key]; ok {
			list, ok := v.([]any)
			if !ok {
				return false
			}
			for _, e := range list {
				if !nativeSub(e) {
					return false
				}
			}
		}
	}
	if defs, ok := n["$defs"]; ok {
		dm, ok := defs.(map[string]any)
		if !ok {
			return false
		}
		for _, d := range dm {
			if !nativeSub(d) {
				return false
			}
		}
	}
	return true
}

func nativeSub(v any) bool {
	m, ok := v.(map[string]any)
	return ok && nativeNode(m)
}

// imageBlocks are a tool result's images as the API takes them in a tool_result: base64
// sources of the four media types it reads. An image of another type is not sent; the
// result's text holds its placeholder.
func imageBlocks(images []llm.Image) []anthropic.ToolResultBlockParamContentUnion {
	var out []anthropic.ToolResultBlockParamContentUnion
	for _, img := range images {
		mt := anthropic.Base64ImageSourceMediaType(strings.ToLower(strings.TrimSpace(img.MediaType)))
		switch mt {
		case anthropic.Base64ImageSourceMediaTypeImageJPEG, anthropic.Base64ImageSourceMediaTypeImagePNG,
			anthropic.Base64ImageSourceMediaTypeImageGIF, anthropic.Base64ImageSourceMediaTypeImageWebP:
		default:
			continue
		}
		src := &anthropic.Base64ImageSourceParam{Data: base64.StdEncoding.EncodeToString(img.Data), MediaType: mt}
		out = append(out, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{Source: anthropic.ImageBlockParamSourceUnion{OfBase64: src}}})
	}
	return out
}
