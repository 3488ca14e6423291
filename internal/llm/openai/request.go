package openai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func badRequest(format string, args ...any) error { return llm.BadRequest(Name, format, args...) }

// params translates req into the parameters of a streamed chat completion.
func (p *Provider) params(req *llm.Request) (openai.ChatCompletionNewParams, error) {
	var params openai.ChatCompletionNewParams
	model, err := llm.RequestModel(Name, req, p.defaultModel)
	if err != nil {
		return params, err
	}
	params.Model = model
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)}

	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		msg, err := message(m)
		if err != nil {
			return params, badRequest("message %d: %v", i, err)
		}
		params.Messages = append(params.Messages, msg)
	}
	for _, t := range req.Tools {
		fp, err := functionParameters(t.Parameters)
		if err != nil {
			return params, badRequest("tool %q: %v", t.Name, err)
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: fp}
		if t.Description != "" {
			fd.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if len(bytes.TrimSpace(req.OutputSchema)) > 0 {
		schema := req.OutputSchema
		if !json.Valid(schema) {
			return params, badRequest("the output schema is not JSON")
		}
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name:   schemaName(schema),
				Schema: json.RawMessage(schema),
				Strict: param.NewOpt(StrictCompatible(schema)),
			}},
		}
	}
	if req.Temperature != nil {
		params.Temperature = param.NewOpt(*req.Temperature)
	}
	if n := cmp.Or(req.MaxOutputTokens, p.maxTokens); n > 0 {
		if p.official {
			params.MaxCompletionTokens = param.NewOpt(int64(n))
		} else {
			params.MaxTokens = param.NewOpt(int64(n))
		}
	}
	return params, nil
}

// message translates one message of the conversation.
func message(m llm.Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case llm.RoleSystem:
		return openai.SystemMessage(m.Text), nil
	case llm.RoleUser:
		return openai.UserMessage(m.Text), nil
	case llm.RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		if m.Text != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Text)
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case llm.RoleTool:
		return openai.ToolMessage(m.Text, m.ToolCallID), nil
	}
	return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
}

// functionParameters is a tool's JSON Schema as the SDK takes it. The values stay raw JSON,
// so that the order of the properties is kept.
func functionParameters(schema json.RawMessage) (shared.FunctionParameters, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("parameters are not a JSON Schema object")
	}
	fp := make(shared.FunctionParameters, len(fields))
	for k, v := range fields {
		fp[k] = v
	}
	return fp, nil
}

var schemaNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// schemaName names the response format: the schema's title when it is a valid name, else
// "output".
func schemaName(schema json.RawMessage) string {
	var s struct {
		Title string `json:"title"`
	}
	if json.Unmarshal(schema, &s) == nil && schemaNameRE.MatchString(s.Title) {
		return s.Title
	}
	return "output"
}

// StrictCompatible reports whether schema meets the rules of OpenAI's strict structured
// outputs, so that it can be sent with strict: true: the root is an object; every object
// has additionalProperties: false and lists all its properties as required; only the
// supported keywords appear (type, properties, required, additionalProperties, items,
// enum, const, anyOf, $ref, $defs, definitions, description, title, pattern, the
// supported formats, the numeric bounds, minItems and maxItems); every subschema has a
// type, anyOf, $ref, enum or const; nesting is at most 10 deep.
func StrictCompatible(schema json.RawMessage) bool {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil || root == nil {
		return false
	}
	if root["type"] != "object" {
		return false
	}
	return strictNode(root, 0)
}

var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "$ref": true, "$defs": true,
	"definitions": true, "description": true, "title": true, "pattern": true, "format": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "minItems": true, "maxItems": true,
}

var strictFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true,
	"hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

var strictTypes = map[string]bool{
	"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true,
}

func strictNode(n map[string]any, depth int) bool {
	if depth > 10 {
		return false
	}
	for k := range n {
		if !strictKeywords[k] {
			return false
		}
	}
	_, hasType := n["type"]
	_, hasAnyOf := n["anyOf"]
	_, hasRef := n["$ref"]
	_, hasEnum := n["enum"]
	_, hasConst := n["const"]
	if !hasType && !hasAnyOf && !hasRef && !hasEnum && !hasConst {
		return false
	}
	isObject, ok := strictType(n["type"])
	if !ok {
		return false
	}
	if f, ok := n["format"]; ok {
		if s, _ := f.(string); !strictFormats[s] {
			return false
		}
	}
	props, hasProps := n["properties"]
	if isObject || hasProps {
		if !strictObject(n, props, hasProps, depth) {
			return false
		}
	} else if _, ok := n["additionalProperties"]; ok {
		return false
	}
	if items, ok := n["items"]; ok {
		im, ok := items.(map[string]any)
		if !ok || !strictNode(im, depth+1) {
			return false
		}
	}
	if anyOf, ok := n["anyOf"]; ok {
		list, ok := anyOf.([]any)
		if !ok || len(list) == 0 {
			return false
		}
		for _, e := range list {
			em, ok := e.(map[string]any)
			if !ok || !strictNode(em, depth+1) {
				return false
			}
		}
	}
	for _, key := range []string{"$defs", "definitions"} {
		defs, ok := n[key]
		if !ok {
			continue
		}
		dm, ok := defs.(map[string]any)
		if !ok {
			return false
		}
		for _, d := range dm {
			sm, ok := d.(map[string]any)
			if !ok || !strictNode(sm, depth+1) {
				return false
			}
		}
	}
	return true
}

// strictType checks a node's "type" (absent, a name or a list of names, each one strict
// mode takes) and says whether it admits an object.
func strictType(t any) (isObject, ok bool) {
	switch t := t.(type) {
	case nil:
	case string:
		if !strictTypes[t] {
			return false, false
		}
		isObject = t == "object"
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok || !strictTypes[s] {
				return false, false
			}
			isObject = isObject || s == "object"
		}
	default:
		return false, false
	}
	return isObject, true
}

// strictObject checks an object node: no additional properties, and every property
// required and strict itself.
func strictObject(n map[string]any, props any, hasProps bool, depth int) bool {
	if n["additionalProperties"] != false {
		return false
	}
	pm, ok := props.(map[string]any)
	if hasProps && !ok {
		return false
	}
	required := map[string]bool{}
	if r, ok := n["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			s, _ := e.(string)
			required[s] = true
		}
	}
	for name, sub := range pm {
		sm, ok := sub.(map[string]any)
		if !ok || !required[name] || !strictNode(sm, depth+1) {
			return false
		}
	}
	return true
}
