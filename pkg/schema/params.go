package schema

import (
	"bytes"
	"slices"

	"github.com/toolmesh/toolmesh/internal/jsontree"
)

// ParameterType is the JSON type of a parameter.
type ParameterType string

// The parameter types a simple schema can express.
const (
	TypeString  ParameterType = "string"
	TypeInteger ParameterType = "integer"
	TypeNumber  ParameterType = "number"
	TypeBoolean ParameterType = "boolean"
	TypeArray   ParameterType = "array"
	TypeObject  ParameterType = "object"
)

var parameterTypes = []ParameterType{TypeString, TypeInteger, TypeNumber, TypeBoolean, TypeArray, TypeObject}

// Parameter describes one named argument of a tool built programmatically.
//
// The zero value of every field is the common case: a parameter is required unless
// Optional is set, and an empty Description shows the model the parameter's name.
type Parameter struct {
	Name string
	// Type is the JSON type; an empty or unknown type renders as string, the most
	// forgiving choice for a model.
	Type        ParameterType
	Description string
	Optional    bool
	// Enum lists the allowed values; it is rendered only when not empty.
	Enum []string
	// Items is the type of the elements of an array parameter; empty means any.
	Items ParameterType
	// Properties are the nested parameters of an object parameter.
	Properties []Parameter
}

// String returns a required string parameter.
func String(name, description string) Parameter {
	return Parameter{Name: name, Type: TypeString, Description: description}
}

// Integer returns a required integer parameter.
func Integer(name, description string) Parameter {
	return Parameter{Name: name, Type: TypeInteger, Description: description}
}

// Number returns a required number parameter.
func Number(name, description string) Parameter {
	return Parameter{Name: name, Type: TypeNumber, Description: description}
}

// Boolean returns a required boolean parameter.
func Boolean(name, description string) Parameter {
	return Parameter{Name: name, Type: TypeBoolean, Description: description}
}

// Array returns a required array parameter whose elements have type items (empty
// means any).
func Array(name, description string, items ParameterType) Parameter {
	return Parameter{Name: name, Type: TypeArray, Description: description, Items: items}
}

// Object returns a required object parameter with nested properties. (It is not
// called Object because Object is the tool-object type.)
func Object(name, description string, props ...Parameter) Parameter {
	return Parameter{Name: name, Type: TypeObject, Description: description, Properties: slices.Clone(props)}
}

// AsOptional returns a copy of p that the model may leave out.
func (p Parameter) AsOptional() Parameter {
	p.Optional = true
	return p
}

// WithEnum returns a copy of p restricted to the given values.
func (p Parameter) WithEnum(values ...string) Parameter {
	p.Enum = slices.Clone(values)
	return p
}

// Params returns the simple schema of a parameter list, rendered in one fixed form, so
// that models see the same schema for the same tool:
//
//	{"type":"object","properties":{<name>:{"type":..,"description":..,"enum":[..],"items":{"type":..}|"properties":{..},"required":[..]}},"required":[..]}
//
// "required" appears only when at least one parameter is required, "enum" only when
// there are values, "items" only for an array with Items set, nested "properties" only
// for an object with properties. Two parameters with the same name make one property:
// the later definition replaces the earlier one in the earlier one's place.
func Params(ps ...Parameter) Schema {
	ps = dedupeParameters(ps)
	var b bytes.Buffer
	writeObjectSchema(&b, ps, true)
	s, err := resolveSchema(b.Bytes(), nil)
	if err != nil {
		// The rendering above only ever produces valid schemas.
		panic("schema: rendered parameter schema does not resolve: " + err.Error())
	}
	s.params = ps
	s.simple = true
	return s
}

func dedupeParameters(ps []Parameter) []Parameter {
	out := make([]Parameter, 0, len(ps))
	for _, p := range ps {
		if i := slices.IndexFunc(out, func(q Parameter) bool { return q.Name == p.Name }); i >= 0 {
			out[i] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// writeObjectSchema writes the "properties" and "required" members; the root also
// gets "type" first.
func writeObjectSchema(b *bytes.Buffer, ps []Parameter, root bool) {
	if root {
		b.WriteString(`{"type":"object",`)
	}
	b.WriteString(`"properties":{`)
	var required []string
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsontree.Quote(p.Name))
		b.WriteByte(':')
		b.Write(renderParameter(p))
		if !p.Optional {
			required = append(required, p.Name)
		}
	}
	b.WriteByte('}')
	if len(required) > 0 {
		b.WriteString(`,"required":[`)
		for i, r := range required {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsontree.Quote(r))
		}
		b.WriteByte(']')
	}
	if root {
		b.WriteByte('}')
	}
}

// renderParameter writes the schema of one property.
func renderParameter(p Parameter) []byte {
	var b bytes.Buffer
	typ := normalType(p.Type)
	desc := p.Description
	if desc == "" {
		desc = p.Name
	}
	b.WriteString(`{"type":`)
	b.WriteString(jsontree.Quote(string(typ)))
	b.WriteString(`,"description":`)
	b.WriteString(jsontree.Quote(desc))
	if len(p.Enum) > 0 {
		b.WriteString(`,"enum":[`)
		for i, e := range p.Enum {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsontree.Quote(e))
		}
		b.WriteByte(']')
	}
	if typ == TypeArray && p.Items != "" {
		b.WriteString(`,"items":{"type":`)
		b.WriteString(jsontree.Quote(string(normalType(p.Items))))
		b.WriteByte('}')
	}
	if typ == TypeObject && len(p.Properties) > 0 {
		b.WriteByte(',')
		writeObjectSchema(&b, dedupeParameters(p.Properties), false)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func normalType(t ParameterType) ParameterType {
	if slices.Contains(parameterTypes, t) {
		return t
	}
	return TypeString
}

func cloneParameters(ps []Parameter) []Parameter {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Parameter, len(ps))
	for i, p := range ps {
		p.Enum = slices.Clone(p.Enum)
		p.Properties = cloneParameters(p.Properties)
		out[i] = p
	}
	return out
}

// deriveParameters reads a parameter list back from an object schema, when every
// property is simple enough to be one.
func deriveParameters(obj *jsontree.Object) ([]Parameter, bool) {
	if obj == nil {
		return nil, false
	}
	var props *jsontree.Object
	switch p := obj.Vals["properties"].(type) {
	case nil:
		return nil, true
	case *jsontree.Object:
		props = p
	default:
		return nil, false
	}
	required := map[string]bool{}
	if r, ok := obj.Vals["required"].([]any); ok {
		for _, name := range r {
			if s, ok := name.(string); ok {
				required[s] = true
			}
		}
	}
	var ps []Parameter
	for _, name := range props.Keys {
		prop, ok := props.Vals[name].(*jsontree.Object)
		if !ok {
			return nil, false
		}
		typ, ok := singleType(prop.Vals["type"])
		if !ok {
			return nil, false
		}
		p := Parameter{Name: name, Type: typ, Optional: !required[name]}
		if d, ok := prop.Vals["description"].(string); ok {
			p.Description = d
		}
		if e, ok := prop.Vals["enum"]; ok {
			values, ok := e.([]any)
			if !ok {
				return nil, false
			}
			for _, v := range values {
				s, ok := v.(string)
				if !ok {
					return nil, false
				}
				p.Enum = append(p.Enum, s)
			}
		}
		if items, ok := prop.Vals["items"].(*jsontree.Object); ok && typ == TypeArray {
			if it, ok := singleType(items.Vals["type"]); ok {
				p.Items = it
			}
		}
		if typ == TypeObject {
			nested, ok := deriveParameters(prop)
			if !ok {
				return nil, false
			}
			p.Properties = nested
		}
		ps = append(ps, p)
	}
	return ps, true
}

// singleType reads "type" when it names one parameter type, alone or with "null".
func singleType(v any) (ParameterType, bool) {
	switch t := v.(type) {
	case string:
		pt := ParameterType(t)
		return pt, slices.Contains(parameterTypes, pt)
	case []any:
		var found []ParameterType
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return "", false
			}
			if s != "null" {
				found = append(found, ParameterType(s))
			}
		}
		if len(found) == 1 && slices.Contains(parameterTypes, found[0]) {
			return found[0], true
		}
	}
	return "", false
}
