// Command schemagen writes the JSON schemas that kubeconform validates toolmesh's
// rendered manifests against, so that validation needs no network: the "standalone
// strict" flavour (every $ref inlined, additionalProperties: false on every object that
// lists properties) of the Kubernetes kinds toolmesh deploys, from the OpenAPI document
// in the k8s.io/kubernetes module, and of the ServiceMonitor and ScaledObject CRDs, from
// the prometheus-operator and KEDA modules. The modules come from the Go module proxy
// (`go mod download`, checked against go.sum's database and the sums pinned below), or
// from the module cache when they are there already.
//
// Files are named as kubeconform's `{{ .ResourceKind }}{{ .KindSuffix }}.json`
// template names them, in one flat directory:
//
//	kubeconform -strict -summary \
//	  -schema-location 'deploy/k8s/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json' FILE...
//
// Usage (from deploy/k8s/tools):
//
//	go run ./cmd/schemagen -out ../schemas          # regenerate
//	go run ./cmd/schemagen -out ../schemas -check   # fail if the directory is stale
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// A source is one module version on the Go module proxy and the file in it.
type source struct {
	Module, Version, Sum, File string
	pinnedVersion              string // the version Sum is for: Version before flags
}

func (s source) String() string { return s.Module + "@" + s.Version + "/" + s.File }

// The pinned sources. Sum is the module zip's h1: hash (go.sum's); it is checked only
// when the version is the pinned one.
var (
	kubernetesSource = source{
		Module:  "k8s.io/kubernetes",
		Version: "v1.37.2", // the release of k8s.io/api v0.37.2, which /go.mod uses
		Sum:     "h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE=",
		File:    "api/openapi-spec/swagger.json",
	}
	prometheusOperatorSource = source{
		Module:  "github.com/prometheus-operator/prometheus-operator",
		Version: "v0.85.0", // the newest version of the root module the proxy serves
		Sum:     "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=",
		File:    "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
	}
	kedaSource = source{
		Module:  "github.com/kedacore/keda/v2",
		Version: "v2.21.0",
		Sum:     "h1:R6z2HZvstK4RLUMxroNACzBj74xGxt3kG59b5Xc+Xps=",
		File:    "config/crd/bases/keda.sh_scaledobjects.yaml",
	}
)

func init() {
	for _, s := range []*source{&kubernetesSource, &prometheusOperatorSource, &kedaSource} {
		s.pinnedVersion = s.Version
	}
}

// A kind toolmesh's manifests use.
type kind struct {
	APIVersion, Kind string
}

func (k kind) group() string {
	if g, _, ok := strings.Cut(k.APIVersion, "/"); ok {
		return g
	}
	return ""
}

func (k kind) version() string {
	_, v, ok := strings.Cut(k.APIVersion, "/")
	if !ok {
		return k.APIVersion
	}
	return v
}

func (k kind) fileName() string { return schemaFileName(k.Kind, k.APIVersion) }

var kubernetesKinds = []kind{
	{"apps/v1", "Deployment"},
	{"v1", "Service"},
	{"v1", "ServiceAccount"},
	{"v1", "ConfigMap"},
	{"v1", "Secret"},
	{"v1", "Namespace"},
	{"autoscaling/v2", "HorizontalPodAutoscaler"},
	{"policy/v1", "PodDisruptionBudget"},
	{"networking.k8s.io/v1", "NetworkPolicy"},
}

// A CRD kind: the kind and version to take from the CRD in src.
type crdKind struct {
	kind
	src *source
}

var crdKinds = []crdKind{
	{kind{"monitoring.coreos.com/v1", "ServiceMonitor"}, &prometheusOperatorSource},
	{kind{"keda.sh/v1alpha1", "ScaledObject"}, &kedaSource},
}

func main() {
	out := flag.String("out", "../schemas", "directory to write the schemas to (its other *.json files are removed)")
	check := flag.Bool("check", false, "write nothing; exit 1 if -out differs from what would be written")
	denyRoot := flag.Bool("crd-deny-root-additional-properties", true,
		"also reject unknown top-level fields of custom resources (kubeconform's script: DENY_ROOT_ADDITIONAL_PROPERTIES)")
	flag.StringVar(&kubernetesSource.Version, "kubernetes-version", kubernetesSource.Version, "k8s.io/kubernetes version")
	flag.StringVar(&prometheusOperatorSource.Version, "prometheus-operator-version", prometheusOperatorSource.Version,
		"github.com/prometheus-operator/prometheus-operator version")
	flag.StringVar(&kedaSource.Version, "keda-version", kedaSource.Version, "github.com/kedacore/keda/v2 version")
	swaggerFile := flag.String("swagger", "", "read the Kubernetes swagger.json from this file instead of the module")
	serviceMonitorFile := flag.String("servicemonitor-crd", "", "read the ServiceMonitor CRD from this file instead of the module")
	scaledObjectFile := flag.String("scaledobject-crd", "", "read the ScaledObject CRD from this file instead of the module")
	flag.Parse()
	log := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "schemagen: "+format+"\n", args...) }

	if !pinned(kubernetesSource) || !pinned(prometheusOperatorSource) || !pinned(kedaSource) {
		log("note: a version differs from the pinned one; its module sum is checked by the go command only")
	}
	files, err := generate(*denyRoot, map[*source]string{
		&kubernetesSource:         *swaggerFile,
		&prometheusOperatorSource: *serviceMonitorFile,
		&kedaSource:               *scaledObjectFile,
	})
	if err != nil {
		log("%v", err)
		os.Exit(1)
	}
	if *check {
		stale, err := compare(*out, files)
		if err != nil {
			log("%v", err)
			os.Exit(1)
		}
		if len(stale) > 0 {
			log("%s is out of date (%s): run `go run ./cmd/schemagen -out %s` in deploy/k8s/tools",
				*out, strings.Join(stale, ", "), *out)
			os.Exit(1)
		}
		log("%s is up to date (%d files)", *out, len(files))
		return
	}
	if err := write(*out, files); err != nil {
		log("%v", err)
		os.Exit(1)
	}
	var total int
	for _, b := range files {
		total += len(b)
	}
	log("wrote %d files, %d bytes, to %s", len(files), total, *out)
}

// pinned says whether s is at the version whose sum is pinned.
func pinned(s source) bool { return s.Version == s.pinnedVersion }

// generate returns the schema files by name, and README.md. overrides maps a source to
// a local file to read instead ("" for none).
func generate(denyRoot bool, overrides map[*source]string) (map[string][]byte, error) {
	files := map[string][]byte{}
	var readme bytes.Buffer
	readme.WriteString(readmeHead)

	// Kubernetes' kinds.
	raw, origin, err := read(&kubernetesSource, overrides[&kubernetesSource])
	if err != nil {
		return nil, err
	}
	var swagger struct {
		Swagger     string         `json:"swagger"`
		Definitions map[string]any `json:"definitions"`
	}
	if err := decodeJSON(raw, &swagger); err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	if !strings.HasPrefix(swagger.Swagger, "2.") || len(swagger.Definitions) == 0 {
		return nil, fmt.Errorf("%s: not a swagger 2.0 document with definitions", origin)
	}
	defs, err := prepareDefinitions(swagger.Definitions)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	fmt.Fprintf(&readme, "* %s (sha256 %s):\n", origin, sha(raw))
	for _, k := range kubernetesKinds {
		name, err := findDefinition(swagger.Definitions, k.group(), k.version(), k.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
		s, err := kubernetesSchema(defs, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
		if err := add(files, k.fileName(), s); err != nil {
			return nil, err
		}
		fmt.Fprintf(&readme, "  * `%s` — %s %s (`%s`)\n", k.fileName(), k.APIVersion, k.Kind, name)
	}

	// The CRDs.
	for _, c := range crdKinds {
		raw, origin, err := read(c.src, overrides[c.src])
		if err != nil {
			return nil, err
		}
		s, err := crdVersionSchema(raw, c.kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
		if err := add(files, c.fileName(), crdSchema(s, denyRoot)); err != nil {
			return nil, err
		}
		fmt.Fprintf(&readme, "* %s (sha256 %s):\n  * `%s` — %s %s\n", origin, sha(raw), c.fileName(), c.APIVersion, c.Kind)
	}
	if denyRoot {
		readme.WriteString(readmeDenyRoot)
	}
	files["README.md"] = readme.Bytes()
	return files, nil
}

const readmeHead = "# deploy/k8s/schemas\n\n" +
	"Generated by `deploy/k8s/tools/cmd/schemagen`; do not edit. Regenerate with\n" +
	"`cd deploy/k8s/tools && go run ./cmd/schemagen -out ../schemas` (`-check` tells whether this\n" +
	"directory is up to date). Kubeconform's \"standalone strict\" JSON schemas (every `$ref`\n" +
	"inlined, `additionalProperties: false` on every object that lists properties), named as\n" +
	"its `{{ .ResourceKind }}{{ .KindSuffix }}.json` template names them, for offline validation:\n\n" +
	"    kubeconform -strict -summary \\\n" +
	"      -schema-location 'deploy/k8s/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json' FILE...\n\n" +
	"A kind without a file here fails as \"could not find schema\" (no network location is\n" +
	"tried unless another -schema-location is given).\n\n" +
	"Sources (Go modules from the module proxy):\n\n"

const readmeDenyRoot = "\nThe CRD schemas also reject unknown top-level fields (kubeconform's\n" +
	"`openapi2jsonschema.py` with `DENY_ROOT_ADDITIONAL_PROPERTIES`); their `metadata` is only\n" +
	"checked to be an object, as the CRDs declare it.\n"

func add(files map[string][]byte, name string, schema any) error {
	if _, dup := files[name]; dup {
		return fmt.Errorf("two schemas named %s", name)
	}
	b, err := encode(schema)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	files[name] = b
	return nil
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// decodeJSON decodes with numbers kept as written.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// read returns the source's file, from override when set, and a name for messages.
func read(s *source, override string) ([]byte, string, error) {
	if override != "" {
		b, err := os.ReadFile(override)
		return b, override, err
	}
	dir, err := moduleDir(*s)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(s.File)))
	return b, s.String(), err
}

// moduleDir downloads the module version into the module cache (a no-op when it is
// there) and returns its directory. It runs outside any module so that no go.mod or
// go.sum is touched.
func moduleDir(s source) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", s.Module+"@"+s.Version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOWORK=off", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	var info struct {
		Dir, Sum, Error string
	}
	if jerr := json.Unmarshal(outb, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", s.Module, s.Version, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v: %s", s.Module, s.Version, err, strings.TrimSpace(stderr.String()))
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no directory in %q", s.Module, s.Version, outb)
	}
	if pinned(s) && info.Sum != s.Sum {
		return "", fmt.Errorf("%s@%s: module sum %s, want the pinned %s", s.Module, s.Version, info.Sum, s.Sum)
	}
	return info.Dir, nil
}

var yamlDocSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// crdVersionSchema returns the openAPIV3Schema of k's version in the
// CustomResourceDefinition in raw (a YAML stream).
func crdVersionSchema(raw []byte, k kind) (map[string]any, error) {
	for _, doc := range yamlDocSep.Split(string(raw), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, err
		}
		var crd struct {
			Kind string `json:"kind"`
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
		if err := decodeJSON(j, &crd); err != nil {
			return nil, err
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != k.group() || crd.Spec.Names.Kind != k.Kind {
			continue
		}
		var have []string
		for _, v := range crd.Spec.Versions {
			if v.Name == k.version() {
				if v.Schema.OpenAPIV3Schema == nil {
					return nil, fmt.Errorf("%s %s has no openAPIV3Schema", k.APIVersion, k.Kind)
				}
				return v.Schema.OpenAPIV3Schema, nil
			}
			have = append(have, v.Name)
		}
		return nil, fmt.Errorf("CRD %s has no version %s (it has %v)", k.Kind, k.version(), have)
	}
	return nil, fmt.Errorf("no CustomResourceDefinition for %s %s", k.APIVersion, k.Kind)
}

// write replaces dir's *.json files and README.md by files.
func write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// compare returns the names of the files that differ between dir and files, missing
// ones and extra *.json ones included.
func compare(dir string, files map[string][]byte) ([]string, error) {
	var stale []string
	for name, b := range files {
		have, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			stale = append(stale, name+" missing")
			continue
		}
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(have, b) {
			stale = append(stale, name+" differs")
		}
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	for _, f := range old {
		if _, ok := files[filepath.Base(f)]; !ok {
			stale = append(stale, filepath.Base(f)+" extra")
		}
	}
	slices.Sort(stale)
	return stale, nil
}
