// Command schemagen writes the JSON schemas kubeconform validates toolmesh's manifests
// against, so that the check needs no network: "standalone strict" schemas (every $ref
// inlined, additionalProperties false on every object that lists its properties, as
// kubectl validates) for the Kubernetes kinds the manifests use, from the OpenAPI
// document of a Kubernetes release, and for the custom resources they use
// (ServiceMonitor, ScaledObject), from their CustomResourceDefinitions. The sources come
// from the Go module proxy (go mod download), at the versions below.
//
//	cd deploy/k8s/tools && go run ./cmd/schemagen -out ../schemas
//
// The files are named as kubeconform's -schema-location template
// '{{.ResourceKind}}{{.KindSuffix}}.json' expects: deployment-apps-v1.json, service-v1.json,
// servicemonitor-monitoring-v1.json.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The sources: a Kubernetes release's swagger.json, and the CRDs of the operators.
const (
	kubernetesModule = "k8s.io/kubernetes@v1.34.3"
	prometheusModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	kedaModule       = "github.com/kedacore/keda/v2@v2.21.0"
)

// kinds are the Kubernetes definitions to write, by OpenAPI name.
var kinds = []string{
	"io.k8s.api.apps.v1.Deployment",
	"io.k8s.api.core.v1.Service",
	"io.k8s.api.core.v1.ServiceAccount",
	"io.k8s.api.core.v1.ConfigMap",
	"io.k8s.api.core.v1.Secret",
	"io.k8s.api.core.v1.Namespace",
	"io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
	"io.k8s.api.policy.v1.PodDisruptionBudget",
	"io.k8s.api.networking.v1.NetworkPolicy",
}

// crds are the CustomResourceDefinitions to write, by module and path in it.
var crds = []struct{ module, path string }{
	{prometheusModule, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"},
	{kedaModule, "config/crd/bases/keda.sh_scaledobjects.yaml"},
}

func main() {
	out := flag.String("out", "", "directory to write the schemas into (required)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if out == "" {
		return errors.New("-out is required")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	k8s, err := moduleDir(kubernetesModule)
	if err != nil {
		return err
	}
	var swagger struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	b, err := os.ReadFile(filepath.Join(k8s, "api", "openapi-spec", "swagger.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &swagger); err != nil {
		return err
	}
	for _, name := range kinds {
		def, ok := swagger.Definitions[name]
		if !ok {
			return fmt.Errorf("%s is not in %s", name, kubernetesModule)
		}
		s, err := inline(def, swagger.Definitions, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		group, version, kind := gvk(def)
		if err := write(out, kind, group, version, strict(s, true)); err != nil {
			return err
		}
	}
	for _, c := range crds {
		dir, err := moduleDir(c.module)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(dir, c.path))
		if err != nil {
			return err
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", c.path, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			if err := write(out, crd.Spec.Names.Kind, crd.Spec.Group, v.Name, strict(v.Schema.OpenAPIV3Schema, false)); err != nil {
				return err
			}
		}
	}
	return nil
}

// moduleDir downloads a module (from the proxy, or the module cache) and returns its
// directory.
func moduleDir(mod string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %v\n%s", mod, err, stderr.String())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(b, &info); err != nil {
		return "", err
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	return info.Dir, nil
}

// gvk reads a definition's x-kubernetes-group-version-kind.
func gvk(def map[string]any) (group, version, kind string) {
	list, _ := def["x-kubernetes-group-version-kind"].([]any)
	if len(list) > 0 {
		m, _ := list[0].(map[string]any)
		group, _ = m["group"].(string)
		version, _ = m["version"].(string)
		kind, _ = m["kind"].(string)
	}
	return
}

// inline replaces every $ref in v by the definition it names, recursively.
func inline(v any, defs map[string]map[string]any, path []string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			for _, p := range path {
				if p == name {
					return nil, fmt.Errorf("a cycle through %s", name)
				}
			}
			def, ok := defs[name]
			if !ok {
				return nil, fmt.Errorf("$ref %s names no definition", ref)
			}
			return inline(def, defs, append(path, name))
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "x-kubernetes-group-version-kind" {
				continue
			}
			ie, err := inline(e, defs, path)
			if err != nil {
				return nil, err
			}
			out[k] = ie
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ie, err := inline(e, defs, path)
			if err != nil {
				return nil, err
			}
			out[i] = ie
		}
		return out, nil
	}
	return v, nil
}

// strict adds additionalProperties: false to every object schema that lists properties
// (not to one that keeps unknown fields) and turns int-or-string into a oneOf, as
// kubeconform's schema generator does; root says whether the root object is closed too.
func strict(v any, root bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x)+1)
		for k, e := range x {
			if f, ok := e.(map[string]any); ok && f["format"] == "int-or-string" {
				out[k] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
				continue
			}
			out[k] = strict(e, true)
		}
		_, hasProps := x["properties"].(map[string]any)
		_, set := x["additionalProperties"]
		if hasProps && !set && root && x["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
		if f, ok := x["format"]; ok && f == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = strict(e, true)
		}
		return out
	}
	return v
}

// write writes s as <kind>[-<group's first label>]-<version>.json (kubeconform's
// KindSuffix).
func write(dir, kind, group, version string, s any) error {
	name := strings.ToLower(kind)
	if g := strings.Split(group, ".")[0]; g != "" {
		name += "-" + strings.ToLower(g)
	}
	name += "-" + strings.ToLower(version) + ".json"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	fmt.Println(name)
	return os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644)
}
