package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := decodeJSON([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func same(t *testing.T, got any, want string) {
	t.Helper()
	var w any
	if err := decodeJSON([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

func TestSchemaFileName(t *testing.T) {
	for _, c := range []struct{ kind, apiVersion, want string }{
		{"Deployment", "apps/v1", "deployment-apps-v1.json"},
		{"Service", "v1", "service-v1.json"},
		{"HorizontalPodAutoscaler", "autoscaling/v2", "horizontalpodautoscaler-autoscaling-v2.json"},
		{"NetworkPolicy", "networking.k8s.io/v1", "networkpolicy-networking-v1.json"},
		{"ServiceMonitor", "monitoring.coreos.com/v1", "servicemonitor-monitoring-v1.json"},
		{"ScaledObject", "keda.sh/v1alpha1", "scaledobject-keda-v1alpha1.json"},
	} {
		if got := schemaFileName(c.kind, c.apiVersion); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.apiVersion, c.kind, got, c.want)
		}
	}
}

func TestAdditionalProperties(t *testing.T) {
	in := mustJSON(t, `{"properties": {"a": {"properties": {}}, "b": {"type": "string"},
		"c": {"properties": {"x": {}}, "additionalProperties": true},
		"d": {"properties": {"x": {}}, "x-kubernetes-preserve-unknown-fields": true}}}`)
	same(t, additionalProperties(in, false), `{"properties": {"a": {"properties": {}, "additionalProperties": false},
		"b": {"type": "string"}, "c": {"properties": {"x": {}}, "additionalProperties": true},
		"d": {"properties": {"x": {}}, "x-kubernetes-preserve-unknown-fields": true}}}`)
	same(t, additionalProperties(mustJSON(t, `{"properties": {}}`), true), `{"properties": {}, "additionalProperties": false}`)
	if _, ok := in["additionalProperties"]; ok {
		t.Error("the input was changed")
	}
}

func TestReplaceIntOrString(t *testing.T) {
	same(t, replaceIntOrString(mustJSON(t, `{"p": {"a": {"format": "int-or-string", "type": "string"}, "b": {"format": "int32"}}}`)),
		`{"p": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "b": {"format": "int32"}}}`)
}

func TestAllowNullOptionalFields(t *testing.T) {
	props := mustJSON(t, `{"spec": {"type": "object", "required": ["name"], "properties": {
		"name": {"type": "string"}, "image": {"type": "string"}, "n": {"type": "null"},
		"ports": {"type": "array", "items": {"type": "integer"}}}}}`)
	same(t, allowNullOptionalFields(props, nil, nil, ""), `{"spec": {"type": ["object", "null"], "required": ["name"], "properties": {
		"name": {"type": "string"}, "image": {"type": ["string", "null"]}, "n": {"type": "null"},
		"ports": {"type": ["array", "null"], "items": {"type": ["integer", "null"]}}}}}`)
}

// A miniature swagger document through the whole Kubernetes path.
func TestKubernetesSchema(t *testing.T) {
	swagger := mustJSON(t, `{
	  "io.k8s.api.demo.v1.Thing": {"type": "object", "required": ["spec"],
	    "x-kubernetes-group-version-kind": [{"group": "demo.example.com", "version": "v1", "kind": "Thing"}],
	    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
	      "spec": {"$ref": "#/definitions/io.k8s.api.demo.v1.ThingSpec", "description": "dropped"}}},
	  "io.k8s.api.demo.v1.ThingSpec": {"type": "object", "required": ["port"], "properties": {
	    "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
	    "size": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"}}},
	  "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
	  "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"}}`)
	defs, err := prepareDefinitions(swagger)
	if err != nil {
		t.Fatal(err)
	}
	name, err := findDefinition(swagger, "demo.example.com", "v1", "Thing")
	if err != nil || name != "io.k8s.api.demo.v1.Thing" {
		t.Fatalf("findDefinition: %q, %v", name, err)
	}
	s, err := kubernetesSchema(defs, name)
	if err != nil {
		t.Fatal(err)
	}
	same(t, s, `{"$schema": "http://json-schema.org/schema#", "type": "object", "required": ["spec"],
	  "additionalProperties": false,
	  "x-kubernetes-group-version-kind": [{"group": "demo.example.com", "version": "v1", "kind": "Thing"}],
	  "properties": {
	    "apiVersion": {"type": ["string", "null"], "enum": ["demo.example.com/v1"]},
	    "kind": {"type": ["string", "null"], "enum": ["Thing"]},
	    "spec": {"type": ["object", "null"], "required": ["port"], "additionalProperties": false, "properties": {
	      "port": {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]},
	      "size": {"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]}}}}}`)
	if _, ok := swagger["io.k8s.api.demo.v1.Thing"].(map[string]any)["properties"].(map[string]any)["kind"].(map[string]any)["enum"]; ok {
		t.Error("prepareDefinitions changed its input")
	}
}

func TestInlineRefsCycle(t *testing.T) {
	defs := mustJSON(t, `{"A": {"properties": {"b": {"$ref": "#/definitions/B"}}}, "B": {"items": {"$ref": "#/definitions/A"}}}`)
	if _, err := inlineRefs(defs["A"], defs, []string{"A"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("got %v, want a cycle error", err)
	}
}

func TestCRDVersionSchema(t *testing.T) {
	crd := `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.demo.example.com}
spec:
  group: demo.example.com
  names: {kind: Thing}
  versions:
  - name: v1beta1
    schema: {openAPIV3Schema: {type: object, properties: {old: {type: string}}}}
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              port: {format: int-or-string, x-kubernetes-int-or-string: true}
`
	k := kind{"demo.example.com/v1", "Thing"}
	s, err := crdVersionSchema([]byte(crd), k)
	if err != nil {
		t.Fatal(err)
	}
	same(t, crdSchema(s, true), `{"type": "object", "additionalProperties": false, "properties": {
	  "spec": {"type": "object", "additionalProperties": false, "properties": {
	    "port": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}}}`)
	same(t, crdSchema(s, false)["additionalProperties"], `null`)
	if _, err := crdVersionSchema([]byte(crd), kind{"demo.example.com/v2", "Thing"}); err == nil {
		t.Error("no error for a missing version")
	}
}

func TestEncodeDeterministic(t *testing.T) {
	v := mustJSON(t, `{"b": 1, "a": {"d": [3, 2], "c": "<&>"}, "n": 1.50}`)
	b, err := encode(v)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": {\n    \"c\": \"<&>\",\n    \"d\": [\n      3,\n      2\n    ]\n  },\n  \"b\": 1,\n  \"n\": 1.50\n}\n"
	if string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
}

// TestVendoredSchemasUpToDate regenerates the schemas from the module cache only
// (GOPROXY=off) and compares them with deploy/k8s/schemas; it skips where the source
// modules are not in the cache (`go run ./cmd/schemagen -check` downloads them).
func TestVendoredSchemasUpToDate(t *testing.T) {
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "")
	for _, s := range []source{kubernetesSource, prometheusOperatorSource, kedaSource} {
		if _, err := moduleDir(s); err != nil {
			t.Skipf("%s@%s is not in the module cache: %v", s.Module, s.Version, err)
		}
	}
	files, err := generate(true, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := compare(filepath.Join("..", "..", "..", "schemas"), files)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("deploy/k8s/schemas is out of date: %v; run `go run ./cmd/schemagen -out ../schemas` in deploy/k8s/tools", stale)
	}
}
