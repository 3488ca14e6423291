// Package k8s_test checks the kustomize base in base/ without a cluster or kubectl: every
// manifest must decode strictly into the Kubernetes API types, and the pieces must fit
// together (Service → Deployment → container port → probes, worker flags → orchestrator
// Service, config file → ConfigMap → volume mount → --config flag).
package k8s_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	baseDir = "base"

	labelName      = "app.kubernetes.io/name"
	labelComponent = "app.kubernetes.io/component"
	labelPartOf    = "app.kubernetes.io/part-of"

	componentOrchestrator = "orchestrator"
	componentWorker       = "toolworker"
)

// apiTypes lists the kinds the manifests may use. Anything else is a typo or needs adding here.
var apiTypes = map[metav1.TypeMeta]func() metav1.Object{
	{APIVersion: "apps/v1", Kind: "Deployment"}:                      newObject[appsv1.Deployment],
	{APIVersion: "v1", Kind: "Service"}:                              newObject[corev1.Service],
	{APIVersion: "v1", Kind: "ConfigMap"}:                            newObject[corev1.ConfigMap],
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}:           newObject[policyv1.PodDisruptionBudget],
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}:      newObject[networkingv1.NetworkPolicy],
	{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"}:  newObject[autoscalingv2.HorizontalPodAutoscaler],
	{APIVersion: "v1", Kind: "ServiceAccount"}:                       newObject[corev1.ServiceAccount],
	{APIVersion: "v1", Kind: "Secret"}:                               newObject[corev1.Secret],
	{APIVersion: "v1", Kind: "Namespace"}:                            newObject[corev1.Namespace],
	{APIVersion: "monitoring.coreos.com/v1", Kind: "ServiceMonitor"}: newObject[serviceMonitor],
	{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject"}:           newObject[scaledObject],
}

func newObject[T any, P interface {
	*T
	metav1.Object
}]() metav1.Object {
	return P(new(T))
}

// kustomization is the part of kustomize's Kustomization type this base uses. It is decoded
// strictly too, so a misspelt or deprecated field (commonLabels) fails; a new field needs adding.
type kustomization struct {
	APIVersion         string               `json:"apiVersion"`
	Kind               string               `json:"kind"`
	Labels             []kustomizeLabel     `json:"labels"`
	Resources          []string             `json:"resources"`
	ConfigMapGenerator []configMapGenerator `json:"configMapGenerator"`
}

type kustomizeLabel struct {
	Pairs            map[string]string `json:"pairs"`
	IncludeSelectors bool              `json:"includeSelectors"`
	IncludeTemplates bool              `json:"includeTemplates"`
}

type configMapGenerator struct {
	Name  string   `json:"name"`
	Files []string `json:"files"`
}

// file returns the path, relative to the kustomization, of the generator's entry for key.
// An entry is "path" (key = base name) or "key=path".
func (g configMapGenerator) file(key string) (string, bool) {
	for _, f := range g.Files {
		k, p, found := strings.Cut(f, "=")
		if !found {
			k, p = path.Base(f), f
		}
		if k == key {
			return p, true
		}
	}
	return "", false
}

// manifests is a tree of objects: the base as written on disk (before kustomize adds
// labels and hash suffixes), or an overlay as kustomize renders it (rendered is set).
type manifests struct {
	name          string
	dir           string
	rendered      bool
	kustomization kustomization
	deployments   []*appsv1.Deployment
	services      []*corev1.Service
	pdbs          []*policyv1.PodDisruptionBudget
	netpols       []*networkingv1.NetworkPolicy
	hpas          []*autoscalingv2.HorizontalPodAutoscaler
	configMaps    []*corev1.ConfigMap
	secrets       []*corev1.Secret
	accounts      []*corev1.ServiceAccount
	namespaces    []*corev1.Namespace
	monitors      []*serviceMonitor
	scaled        []*scaledObject
}

// add files a decoded object under its kind.
func (m *manifests) add(obj metav1.Object) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		m.deployments = append(m.deployments, o)
	case *corev1.Service:
		m.services = append(m.services, o)
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	case *networkingv1.NetworkPolicy:
		m.netpols = append(m.netpols, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		m.hpas = append(m.hpas, o)
	case *corev1.ConfigMap:
		m.configMaps = append(m.configMaps, o)
	case *corev1.Secret:
		m.secrets = append(m.secrets, o)
	case *corev1.ServiceAccount:
		m.accounts = append(m.accounts, o)
	case *corev1.Namespace:
		m.namespaces = append(m.namespaces, o)
	case *serviceMonitor:
		m.monitors = append(m.monitors, o)
	case *scaledObject:
		m.scaled = append(m.scaled, o)
	}
}

func loadBase(t testing.TB) *manifests {
	t.Helper()
	m := &manifests{name: baseDir, dir: baseDir}
	raw, err := os.ReadFile(filepath.Join(m.dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err == nil {
		err = decodeStrict(js, &m.kustomization)
	}
	if err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	for _, res := range m.kustomization.Resources {
		docs, err := readDocuments(filepath.Join(m.dir, res))
		if err != nil {
			t.Fatalf("resource %s: %v", res, err)
		}
		for i, doc := range docs {
			obj, err := decodeObject(doc)
			if err != nil {
				t.Fatalf("%s, document %d: %v", res, i+1, err)
			}
			m.add(obj)
		}
	}
	return m
}

// readDocuments splits a YAML file into its documents and converts each to JSON, rejecting
// duplicate keys. Documents holding only comments are dropped.
func readDocuments(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return splitDocuments(f)
}

// splitDocuments is readDocuments of a stream.
func splitDocuments(in io.Reader) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, err
		}
		if string(js) != "null" {
			docs = append(docs, js)
		}
	}
}

// decodeObject picks the API type from apiVersion/kind and decodes the JSON document into it
// strictly.
func decodeObject(js []byte) (metav1.Object, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	newObj, ok := apiTypes[tm]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q in apiVersion %q", tm.Kind, tm.APIVersion)
	}
	obj := newObj()
	if err := decodeStrict(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return obj, nil
}

// decodeStrict decodes one JSON value into obj, failing on fields obj does not have. JSON
// input is expected: run YAML through yaml.YAMLToJSONStrict first, which rejects duplicate keys.
func decodeStrict(js []byte, obj any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	// encoding/json matches field names ignoring case; the API server does not. A second,
	// case-sensitive decode that disagrees means a field is spelt with the wrong case.
	exact := reflect.New(reflect.TypeOf(obj).Elem()).Interface()
	if err := utiljson.Unmarshal(js, exact); err != nil {
		return err
	}
	if !reflect.DeepEqual(obj, exact) {
		return errors.New("a field name differs in case from the API's")
	}
	return nil
}

// orchestratorConfigFile returns the bytes of the config file the orchestrator Deployment
// reads: its --config flag, resolved through the volume mount to the configMapGenerator file.
func orchestratorConfigFile(t testing.TB, m *manifests) []byte {
	t.Helper()
	d := m.orchestrator(t)
	c := grpcContainer(t, d)
	flags := parseFlags(t, c.Args)
	configPath, ok := flags["config"]
	if !ok {
		t.Fatalf("orchestrator container %q has no --config flag", c.Name)
	}
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if strings.HasPrefix(configPath, strings.TrimSuffix(vm.MountPath, "/")+"/") &&
			(mount == nil || len(vm.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--config=%s is on no volume mount", configPath)
	}
	if mount.SubPath != "" {
		t.Fatalf("volume mount %q uses subPath, which does not see ConfigMap updates", mount.Name)
	}
	vol := podVolume(d, mount.Name)
	if vol == nil || vol.ConfigMap == nil {
		t.Fatalf("volume %q is not a ConfigMap volume", mount.Name)
	}
	if len(vol.ConfigMap.Items) != 0 {
		t.Fatalf("volume %q maps items; key lookup here assumes it does not", mount.Name)
	}
	key := strings.TrimPrefix(configPath, strings.TrimSuffix(mount.MountPath, "/")+"/")
	if m.rendered {
		for _, cm := range m.configMaps {
			if cm.Name == vol.ConfigMap.Name {
				data, ok := cm.Data[key]
				if !ok {
					t.Fatalf("ConfigMap %s has no key %q", cm.Name, key)
				}
				return []byte(data)
			}
		}
		t.Fatalf("volume %q names ConfigMap %q, which the overlay does not render", mount.Name, vol.ConfigMap.Name)
	}
	for _, g := range m.kustomization.ConfigMapGenerator {
		if g.Name != vol.ConfigMap.Name {
			continue
		}
		file, ok := g.file(key)
		if !ok {
			t.Fatalf("configMapGenerator %q has no key %q", g.Name, key)
		}
		b, err := os.ReadFile(filepath.Join(m.dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("volume %q names ConfigMap %q, which no configMapGenerator makes", mount.Name, vol.ConfigMap.Name)
	return nil
}

func (m *manifests) byComponent(component string) []*appsv1.Deployment {
	var ds []*appsv1.Deployment
	for _, d := range m.deployments {
		if d.Spec.Template.Labels[labelComponent] == component {
			ds = append(ds, d)
		}
	}
	return ds
}

func (m *manifests) orchestrator(t testing.TB) *appsv1.Deployment {
	t.Helper()
	ds := m.byComponent(componentOrchestrator)
	if len(ds) != 1 {
		t.Fatalf("want 1 orchestrator Deployment, got %d", len(ds))
	}
	return ds[0]
}

// servicesFor returns the Services that select d's pods.
func (m *manifests) servicesFor(d *appsv1.Deployment) []*corev1.Service {
	var found []*corev1.Service
	for _, s := range m.services {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, s)
		}
	}
	return found
}

// selectedDeployments returns the Deployments whose pods sel matches. As in the API, an empty
// selector matches every pod and a nil one none.
func (m *manifests) selectedDeployments(t testing.TB, sel *metav1.LabelSelector) []*appsv1.Deployment {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	var ds []*appsv1.Deployment
	for _, d := range m.deployments {
		if s.Matches(labels.Set(d.Spec.Template.Labels)) {
			ds = append(ds, d)
		}
	}
	return ds
}

// grpcContainer returns the container that serves the pod's gRPC port (the port named "grpc").
func grpcContainer(t testing.TB, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i, c := range d.Spec.Template.Spec.Containers {
		if _, ok := containerPort(&c, intstr.FromString("grpc")); ok {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("Deployment %s has no container port named grpc", d.Name)
	return nil
}

// containerPort resolves a Service targetPort (a number or a port name) against c's ports.
func containerPort(c *corev1.Container, target intstr.IntOrString) (int32, bool) {
	for _, p := range c.Ports {
		if (target.Type == intstr.String && p.Name == target.StrVal) ||
			(target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// grpcServicePort returns the Service's port named grpc.
func grpcServicePort(t testing.TB, svc *corev1.Service) corev1.ServicePort {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			return p
		}
	}
	t.Fatalf("Service %s has no port named grpc", svc.Name)
	return corev1.ServicePort{}
}

func podVolume(d *appsv1.Deployment, name string) *corev1.Volume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// parseFlags reads Go-style flags ("--name=value" or "--name value"), all of which take a value.
func parseFlags(t testing.TB, args []string) map[string]string {
	t.Helper()
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			t.Fatalf("argument %q is not a flag", args[i])
		}
		name = strings.TrimPrefix(name, "-")
		name, value, hasValue := strings.Cut(name, "=")
		if !hasValue {
			if i+1 == len(args) {
				t.Fatalf("flag --%s has no value", name)
			}
			i++
			value = args[i]
		}
		if _, dup := flags[name]; dup {
			t.Fatalf("flag --%s given twice", name)
		}
		flags[name] = value
	}
	return flags
}

func TestKustomizationListsExistingFiles(t *testing.T) {
	m := loadBase(t)
	k := m.kustomization
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	var files []string
	files = append(files, k.Resources...)
	for _, g := range k.ConfigMapGenerator {
		if g.Name == "" || len(g.Files) == 0 {
			t.Errorf("configMapGenerator %+v needs a name and files", g)
		}
		for _, f := range g.Files {
			_, p, found := strings.Cut(f, "=")
			if !found {
				p = f
			}
			files = append(files, p)
		}
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			t.Errorf("%s is listed twice", f)
		}
		seen[f] = true
		info, err := os.Stat(filepath.Join(m.dir, f))
		if err != nil {
			t.Errorf("listed file: %v", err)
			continue
		}
		if !info.Mode().IsRegular() {
			t.Errorf("%s is not a regular file", f)
		}
	}
	// Every manifest in the directory should be used, or it is dead.
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); (ext == ".yaml" || ext == ".yml") && e.Name() != "kustomization.yaml" && !seen[e.Name()] {
			t.Errorf("%s is in %s but not in kustomization.yaml", e.Name(), m.dir)
		}
	}
}

func TestKustomizationLabels(t *testing.T) {
	k := loadBase(t).kustomization
	var partOf bool
	for _, l := range k.Labels {
		if !l.IncludeSelectors {
			t.Errorf("labels %v: includeSelectors must be true so selectors and pods get the same labels", l.Pairs)
		}
		partOf = partOf || l.Pairs[labelPartOf] == "toolmesh"
	}
	if !partOf {
		t.Errorf("kustomization labels do not set %s: toolmesh", labelPartOf)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{
			name:    "unknown field",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selektor: {a: b}}\n",
			wantErr: `unknown field "selektor"`,
		},
		{
			name:    "duplicate key",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: ClusterIP, type: NodePort}\n",
			wantErr: `key "type" already set`,
		},
		{
			name:    "field in the wrong case",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {Selector: {a: b}}\n",
			wantErr: "case",
		},
		{
			name:    "unknown kind",
			doc:     "apiVersion: v1\nkind: Servise\nmetadata: {name: s}\n",
			wantErr: `unknown kind "Servise"`,
		},
		{
			name:    "old apiVersion",
			doc:     "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n",
			wantErr: "unknown kind",
		},
		{
			name:    "no name",
			doc:     "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n",
			wantErr: "without metadata.name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, err := yaml.YAMLToJSONStrict([]byte(tt.doc))
			if err == nil {
				_, err = decodeObject(js)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkContainer checks c's image, resources and security; a toolmesh container (not, say,
// the dev overlay's PostgreSQL) also takes its identity from the downward API.
func checkContainer(t *testing.T, psc *corev1.PodSecurityContext, c *corev1.Container, toolmesh bool) {
	t.Helper()
	if c.Image == "" || !strings.ContainsAny(path.Base(c.Image), ":@") {
		t.Errorf("container %s: image %q needs a tag or digest", c.Name, c.Image)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[res]
		lim, hasLim := c.Resources.Limits[res]
		if !hasReq || !hasLim {
			t.Errorf("container %s: %s needs a request and a limit", c.Name, res)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("container %s: %s request %s is above its limit %s", c.Name, res, req.String(), lim.String())
		}
	}

	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	runAsNonRoot := effective(sc.RunAsNonRoot, psc.RunAsNonRoot)
	if runAsNonRoot == nil || !*runAsNonRoot {
		t.Errorf("container %s: runAsNonRoot is not true", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("container %s is privileged", c.Name)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container %s: capabilities must drop ALL and add none, got %+v", c.Name, sc.Capabilities)
	}
	seccomp := effective(sc.SeccompProfile, psc.SeccompProfile)
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container %s: seccomp profile is not RuntimeDefault", c.Name)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, field := range map[string]string{"POD_IP": "status.podIP", "POD_NAME": "metadata.name"} {
		if !toolmesh {
			break
		}
		e := env[name]
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("container %s: env %s should come from the downward API field %s", c.Name, name, field)
		}
	}
	// The kubelet expands $(VAR) in args only for variables the container defines.
	for _, a := range c.Args {
		for _, ref := range envRef.FindAllStringSubmatch(a, -1) {
			if _, ok := env[ref[1]]; !ok {
				t.Errorf("container %s: argument %q uses $(%s), which its env does not define", c.Name, a, ref[1])
			}
		}
	}
}

// effective returns the container-level setting if set, else the pod-level one.
func effective[T any](container, pod *T) *T {
	if container != nil {
		return container
	}
	return pod
}

func hostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// orchestratorConfigKeys is the orchestrator config file's shape: section → keys (nil for a
// scalar at the top level).
var orchestratorConfigKeys = map[string][]string{
	"listen":   nil,
	"journal":  {"driver", "lease_ttl"},
	"registry": {"heartbeat_interval", "lease_ttl", "grace_period"},
	"router":   {"default_tool_timeout", "eject_after_failures", "eject_duration"},
	"loop":     {"max_iterations", "max_parallel_tool_calls", "run_timeout"},
	"provider": {"name", "script"},
	"log":      {"level", "format"},
	"context":  {"max_bytes", "default"},
	"groups":   {"math", "text"},
	"tls":      {"plaintext"},
}

func describePorts(ports []networkingv1.NetworkPolicyPort) string {
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprintf("%s %s-%s", ptrString(p.Protocol), ptrString(p.Port), ptrString(p.EndPort)))
	}
	return "[" + strings.Join(s, ", ") + "]"
}
