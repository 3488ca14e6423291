package main

// The conversions below follow the two scripts that produce the schemas kubeconform
// uses by default:
//
//   - Kubernetes' own kinds: openapi2jsonschema (yannh's fork of instrumenta's) as
//     run for yannh/kubernetes-json-schema with
//     `--expanded --kubernetes --stand-alone --strict` on the swagger 2.0 document
//     (api/openapi-spec/swagger.json): IntOrString → oneOf string|integer, Quantity →
//     oneOf string|number, kind/apiVersion enums from x-kubernetes-group-version-kind,
//     additionalProperties: false on every object that lists properties, every $ref
//     inlined, and optional fields made nullable.
//   - CRDs: kubeconform's scripts/openapi2jsonschema.py on the CRD's
//     openAPIV3Schema: additionalProperties: false on every object that lists
//     properties, format int-or-string → oneOf string|integer.
//
// Values are the generic JSON tree of encoding/json (map[string]any, []any, string,
// json.Number, bool, nil). Every function returns a new tree and leaves its input alone.

import (
	"encoding/json"
	"fmt"
	"strings"
)

const (
	intOrStringDef = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
	quantityDef    = "io.k8s.apimachinery.pkg.api.resource.Quantity"
	jsonSchemaURI  = "http://json-schema.org/schema#"
	definitionsRef = "#/definitions/"
)

// deepCopy copies a JSON tree.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = deepCopy(e)
		}
		return l
	default:
		return v
	}
}

// additionalProperties sets additionalProperties: false on every object below v (v
// itself only when root is true) that has "properties" and no additionalProperties —
// what kubectl's client-side validation did, and what both scripts do in strict mode.
// One addition to the scripts: an object marked x-kubernetes-preserve-unknown-fields:
// true stays open, as the API server keeps its unknown fields (none of the kinds
// written today has one).
func additionalProperties(v any, root bool) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t)+1)
		for k, e := range t {
			m[k] = additionalProperties(e, true)
		}
		if root && t["x-kubernetes-preserve-unknown-fields"] != true {
			if _, ok := t["properties"]; ok {
				if _, ok := t["additionalProperties"]; !ok {
					m["additionalProperties"] = false
				}
			}
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = additionalProperties(e, true)
		}
		return l
	default:
		return v
	}
}

// replaceIntOrString replaces every schema below v whose format is int-or-string by
// oneOf string|integer.
func replaceIntOrString(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			if em, ok := e.(map[string]any); ok && em["format"] == "int-or-string" {
				m[k] = intOrString()
				continue
			}
			m[k] = replaceIntOrString(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = replaceIntOrString(e)
		}
		return l
	default:
		return v
	}
}

func intOrString() map[string]any {
	return map[string]any{"oneOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "integer"},
	}}
}

func quantity() map[string]any {
	return map[string]any{"oneOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "number"},
	}}
}

// allowNullOptionalFields turns `type: T` into `type: [T, "null"]` for every field that
// its object does not list as required (openapi2jsonschema's
// allow_null_optional_fields, walked the same way: data's parent and grandparent,
// and the key data sits under).
func allowNullOptionalFields(data, parent, grandParent any, key string) any {
	switch t := data.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, v := range t {
			switch tv := v.(type) {
			case map[string]any:
				m[k] = allowNullOptionalFields(tv, t, parent, k)
			case []any:
				l := make([]any, len(tv))
				for i, x := range tv {
					l[i] = allowNullOptionalFields(x, tv, parent, k)
				}
				m[k] = l
			case string:
				if k == "type" && tv != "null" && !isRequiredField(grandParent, key) {
					m[k] = []any{tv, "null"}
				} else {
					m[k] = tv
				}
			default:
				m[k] = v
			}
		}
		return m
	default:
		// Python's version returns anything that has no .items() unchanged, lists
		// included.
		return data
	}
}

// isRequiredField is Python's `grand_parent and "required" in grand_parent and key in
// grand_parent["required"]` for the JSON values that can occur.
func isRequiredField(grandParent any, key string) bool {
	gp, ok := grandParent.(map[string]any)
	if !ok || len(gp) == 0 {
		// a list grandparent: "required" in list is a membership test on its
		// elements, which here are schemas, never the string "required".
		return false
	}
	req, ok := gp["required"]
	if !ok {
		return false
	}
	switch r := req.(type) {
	case []any:
		for _, e := range r {
			if s, ok := e.(string); ok && s == key {
				return true
			}
		}
	case map[string]any:
		_, ok := r[key]
		return ok
	case string:
		return strings.Contains(r, key)
	}
	return false
}

// appendNoDuplicates appends value to the list obj[key], creating it, unless present.
func appendNoDuplicates(obj map[string]any, key string, value any) {
	l, _ := obj[key].([]any)
	for _, e := range l {
		if e == value {
			return
		}
	}
	obj[key] = append(l, value)
}

// prepareDefinitions is what openapi2jsonschema does to the swagger definitions before
// it writes _definitions.json in --kubernetes --expanded --strict mode.
func prepareDefinitions(swaggerDefs map[string]any) (map[string]any, error) {
	defs := deepCopy(swaggerDefs).(map[string]any)
	defs[intOrStringDef] = intOrString()
	defs[quantityDef] = quantity()
	for name, d := range defs {
		def, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("definition %s is not an object", name)
		}
		gvks, ok := def["x-kubernetes-group-version-kind"].([]any)
		if !ok {
			continue
		}
		props, _ := def["properties"].(map[string]any)
		for _, g := range gvks {
			gvk, ok := g.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("definition %s: bad x-kubernetes-group-version-kind", name)
			}
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if av, ok := props["apiVersion"].(map[string]any); ok {
				apiVersion := version
				if group != "" {
					apiVersion = group + "/" + version
				}
				appendNoDuplicates(av, "enum", apiVersion)
			}
			if k, ok := props["kind"].(map[string]any); ok {
				appendNoDuplicates(k, "enum", kind)
			}
		}
	}
	return additionalProperties(defs, false).(map[string]any), nil
}

// inlineRefs replaces every {"$ref": "#/definitions/X", ...} below v by (a copy of)
// definition X with its own references inlined, as jsonref does: the referent replaces
// the whole object, its siblings (a description) are dropped. A reference cycle is an
// error: a standalone schema cannot hold one.
func inlineRefs(v any, defs map[string]any, stack []string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, definitionsRef)
			if !ok {
				return nil, fmt.Errorf("unsupported $ref %q", ref)
			}
			for _, s := range stack {
				if s == name {
					return nil, fmt.Errorf("reference cycle: %s → %s", strings.Join(stack, " → "), name)
				}
			}
			def, ok := defs[name]
			if !ok {
				return nil, fmt.Errorf("$ref %q: no such definition", ref)
			}
			return inlineRefs(def, defs, append(stack, name))
		}
		m := make(map[string]any, len(t))
		for k, e := range t {
			r, err := inlineRefs(e, defs, stack)
			if err != nil {
				return nil, err
			}
			m[k] = r
		}
		return m, nil
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			r, err := inlineRefs(e, defs, stack)
			if err != nil {
				return nil, err
			}
			l[i] = r
		}
		return l, nil
	default:
		return v, nil
	}
}

// kubernetesSchema builds the standalone strict schema of definition name, from the
// definitions prepareDefinitions returned.
func kubernetesSchema(defs map[string]any, name string) (map[string]any, error) {
	d, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no definition %s", name)
	}
	spec := deepCopy(d).(map[string]any)
	spec["$schema"] = jsonSchemaURI
	if _, ok := spec["type"]; !ok {
		spec["type"] = "object"
	}
	spec["additionalProperties"] = false
	r, err := inlineRefs(spec, defs, []string{name})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	spec = r.(map[string]any)
	if props, ok := spec["properties"]; ok {
		props = additionalProperties(props, false)
		props = replaceIntOrString(props)
		props = allowNullOptionalFields(props, nil, nil, "")
		spec["properties"] = props
	}
	return spec, nil
}

// crdSchema builds the strict schema of a CRD version's openAPIV3Schema, as
// kubeconform's openapi2jsonschema.py does; denyRootAdditional is its
// DENY_ROOT_ADDITIONAL_PROPERTIES (unknown top-level fields are errors too).
func crdSchema(openAPIV3Schema map[string]any, denyRootAdditional bool) map[string]any {
	s := additionalProperties(openAPIV3Schema, denyRootAdditional)
	return replaceIntOrString(s).(map[string]any)
}

// findDefinition returns the name of the one swagger definition whose
// x-kubernetes-group-version-kind is exactly group/version/kind.
func findDefinition(defs map[string]any, group, version, kind string) (string, error) {
	var found []string
	for name, d := range defs {
		def, _ := d.(map[string]any)
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		if len(gvks) != 1 {
			continue // the shared kinds (DeleteOptions, WatchEvent) list many
		}
		gvk, _ := gvks[0].(map[string]any)
		if gvk["group"] == group && gvk["version"] == version && gvk["kind"] == kind {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no definition for %s/%s %s", group, version, kind)
	default:
		return "", fmt.Errorf("several definitions for %s/%s %s: %v", group, version, kind, found)
	}
}

// schemaFileName is the file name kubeconform's
// `{{ .ResourceKind }}{{ .KindSuffix }}.json` template gives a kind and apiVersion
// (pkg/registry/registry.go schemaPath): deployment-apps-v1.json, service-v1.json,
// servicemonitor-monitoring-v1.json.
func schemaFileName(kind, apiVersion string) string {
	groupParts := strings.Split(apiVersion, "/")
	versionParts := strings.Split(groupParts[0], ".")
	suffix := "-" + strings.ToLower(versionParts[0])
	if len(groupParts) > 1 {
		suffix += "-" + strings.ToLower(groupParts[1])
	}
	return strings.ToLower(kind) + suffix + ".json"
}

// encode writes a JSON tree deterministically: keys sorted (encoding/json sorts map
// keys), two-space indent, no HTML escaping, a final newline.
func encode(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}
