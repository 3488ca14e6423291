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
	"time"

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

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
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
	{APIVersion: "apps/v1", Kind: "Deployment"}:                     newObject[appsv1.Deployment],
	{APIVersion: "v1", Kind: "Service"}:                             newObject[corev1.Service],
	{APIVersion: "v1", Kind: "ConfigMap"}:                           newObject[corev1.ConfigMap],
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}:          newObject[policyv1.PodDisruptionBudget],
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}:     newObject[networkingv1.NetworkPolicy],
	{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"}: newObject[autoscalingv2.HorizontalPodAutoscaler],
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

// manifests is the base as written on disk, before kustomize adds labels and hash suffixes.
type manifests struct {
	dir           string
	kustomization kustomization
	deployments   []*appsv1.Deployment
	services      []*corev1.Service
	pdbs          []*policyv1.PodDisruptionBudget
	netpols       []*networkingv1.NetworkPolicy
}

func loadBase(t testing.TB) *manifests {
	t.Helper()
	m := &manifests{dir: baseDir}
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
			switch o := obj.(type) {
			case *appsv1.Deployment:
				m.deployments = append(m.deployments, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *networkingv1.NetworkPolicy:
				m.netpols = append(m.netpols, o)
			}
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
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
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
func orchestratorConfigFile(t testing.TB) []byte {
	t.Helper()
	m := loadBase(t)
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

// serviceFor returns the one Service that selects d's pods.
func (m *manifests) serviceFor(t testing.TB, d *appsv1.Deployment) *corev1.Service {
	t.Helper()
	var found []*corev1.Service
	for _, s := range m.services {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Deployment %s: want 1 Service selecting its pods, got %d", d.Name, len(found))
	}
	return found[0]
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

func TestManifestsDecodeStrictly(t *testing.T) {
	m := loadBase(t) // fails on the first document that does not decode
	if len(m.byComponent(componentWorker)) == 0 {
		t.Error("no toolworker Deployment")
	}
	m.orchestrator(t)
	type key struct{ kind, name string }
	seen := map[key]bool{}
	add := func(kind string, meta metav1.ObjectMeta) {
		k := key{kind, meta.Name}
		if seen[k] {
			t.Errorf("two %s objects named %s", kind, meta.Name)
		}
		seen[k] = true
		if meta.Namespace != "" {
			t.Errorf("%s %s sets a namespace; overlays choose it", kind, meta.Name)
		}
	}
	for _, o := range m.deployments {
		add("Deployment", o.ObjectMeta)
	}
	for _, o := range m.services {
		add("Service", o.ObjectMeta)
	}
	for _, o := range m.pdbs {
		add("PodDisruptionBudget", o.ObjectMeta)
	}
	for _, o := range m.netpols {
		add("NetworkPolicy", o.ObjectMeta)
	}
}

// TestServicesAndProbes checks that each Deployment's Service reaches the container's gRPC port
// and that the kubelet probes grpc.health.v1 on that same port.
func TestServicesAndProbes(t *testing.T) {
	m := loadBase(t)
	for _, d := range m.deployments {
		t.Run(d.Name, func(t *testing.T) {
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("selector %v does not match pod labels %v (err %v)", d.Spec.Selector, d.Spec.Template.Labels, err)
			}
			c := grpcContainer(t, d)
			svc := m.serviceFor(t, d)
			if len(svc.Spec.Ports) != 1 {
				t.Errorf("Service %s: want 1 port, got %d", svc.Name, len(svc.Spec.Ports))
			}
			sp := grpcServicePort(t, svc)
			if sp.AppProtocol == nil || *sp.AppProtocol != "grpc" {
				t.Errorf("Service %s port: want appProtocol grpc, got %+v", svc.Name, sp)
			}
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			port, ok := containerPort(c, target)
			if !ok {
				t.Fatalf("Service %s targets %s, which container %s does not expose", svc.Name, target.String(), c.Name)
			}
			probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
			for kind, p := range probes {
				switch {
				case p == nil:
					t.Errorf("no %s probe", kind)
				case p.GRPC == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.Exec != nil:
					t.Errorf("%s probe is not a gRPC probe: %+v", kind, p.ProbeHandler)
				case p.GRPC.Port != port:
					t.Errorf("%s probe checks port %d, the Service targets %d", kind, p.GRPC.Port, port)
				case d.Spec.Template.Labels[labelComponent] == componentOrchestrator && kind != "readiness":
					// A restarted orchestrator is alive but not ready while it waits for its
					// workers (registry.readiness_grace); the registry service, which they
					// register through, is SERVING from its start to its shutdown.
					if p.GRPC.Service == nil || *p.GRPC.Service != "toolmesh.v1.ToolRegistryService" {
						t.Errorf("orchestrator %s probe asks for the health of %v; want toolmesh.v1.ToolRegistryService (\"\" is NOT_SERVING while it warms up)", kind, p.GRPC.Service)
					}
				case p.GRPC.Service != nil && *p.GRPC.Service != "":
					t.Errorf("%s probe asks for health of service %q; the servers report overall health under \"\"", kind, *p.GRPC.Service)
				}
			}
		})
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func TestPodSpecs(t *testing.T) {
	m := loadBase(t)
	for _, d := range m.deployments {
		t.Run(d.Name, func(t *testing.T) {
			pod := d.Spec.Template
			for _, l := range []string{labelName, labelComponent} {
				if pod.Labels[l] == "" {
					t.Errorf("pod template lacks label %s", l)
				}
				if d.Labels[l] != pod.Labels[l] {
					t.Errorf("label %s: Deployment has %q, pods %q", l, d.Labels[l], pod.Labels[l])
				}
			}
			psc := pod.Spec.SecurityContext
			if psc == nil {
				psc = &corev1.PodSecurityContext{}
			}
			if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken should be false: toolmesh does not call the API server")
			}
			if len(pod.Spec.Containers) == 0 {
				t.Fatal("no containers")
			}
			for _, c := range pod.Spec.Containers {
				checkContainer(t, psc, &c)
			}
		})
	}
}

func checkContainer(t *testing.T, psc *corev1.PodSecurityContext, c *corev1.Container) {
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

func TestWorkers(t *testing.T) {
	m := loadBase(t)
	orch := m.serviceFor(t, m.orchestrator(t))
	for _, d := range m.byComponent(componentWorker) {
		t.Run(d.Name, func(t *testing.T) {
			c := grpcContainer(t, d)
			port, _ := containerPort(c, intstr.FromString("grpc"))
			flags := parseFlags(t, c.Args)
			want := map[string]string{
				"orchestrator": hostPort(orch.Name, grpcServicePort(t, orch).Port),
				"listen":       hostPort("0.0.0.0", port),
				"advertise":    hostPort("$(POD_IP)", port),
				"id":           "$(POD_NAME)",
			}
			for name, v := range want {
				if flags[name] != v {
					t.Errorf("--%s=%q, want %q", name, flags[name], v)
				}
			}
			if flags["groups"] == "" {
				t.Error("--groups is empty")
			}
			if n, err := strconv.Atoi(flags["capacity"]); err != nil || n <= 0 {
				t.Errorf("--capacity=%q is not a positive number", flags["capacity"])
			}
			drain, err := time.ParseDuration(flags["drain-timeout"])
			if err != nil {
				t.Fatalf("--drain-timeout: %v", err)
			}
			grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
			if grace == nil || time.Duration(*grace)*time.Second <= drain {
				t.Errorf("terminationGracePeriodSeconds %v must exceed --drain-timeout=%v, or the kubelet kills calls in flight", ptrString(grace), drain)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
				t.Errorf("want at least 2 replicas, got %v", ptrString(d.Spec.Replicas))
			}
		})
	}
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
	"registry": {"heartbeat_interval", "lease_ttl", "grace_period"},
	"router":   {"default_tool_timeout", "eject_after_failures", "eject_duration"},
	"loop":     {"max_iterations", "max_parallel_tool_calls", "run_timeout"},
	"provider": {"name", "script"},
	"log":      {"level", "format"},
	"context":  {"max_bytes", "default"},
	"groups":   {"math"},
	"tls":      {"plaintext"},
}

func TestOrchestratorConfig(t *testing.T) {
	js, err := yaml.YAMLToJSONStrict(orchestratorConfigFile(t))
	if err != nil {
		t.Fatalf("orchestrator.yaml: %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatalf("orchestrator.yaml is not a mapping: %v", err)
	}
	for section := range cfg {
		if _, ok := orchestratorConfigKeys[section]; !ok {
			t.Errorf("unknown section %q", section)
		}
	}
	for section, keys := range orchestratorConfigKeys {
		v, ok := cfg[section]
		if !ok {
			t.Errorf("missing %q", section)
			continue
		}
		if keys == nil {
			continue
		}
		sub, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s is not a mapping", section)
			continue
		}
		got := make([]string, 0, len(sub))
		for k := range sub {
			got = append(got, k)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("%s has keys %v, want %v", section, got, want)
		}
	}

	duration := func(section, key string) time.Duration {
		s, _ := cfg[section].(map[string]any)[key].(string)
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Errorf("%s.%s = %q is not a positive duration", section, key, s)
		}
		return d
	}
	if hb, ttl := duration("registry", "heartbeat_interval"), duration("registry", "lease_ttl"); hb >= ttl {
		t.Errorf("registry.heartbeat_interval %v must be shorter than lease_ttl %v", hb, ttl)
	}
	duration("registry", "grace_period")
	duration("router", "default_tool_timeout")
	duration("router", "eject_duration")
	duration("loop", "run_timeout")

	// The orchestrator listens where its container port, probes and Service point.
	m := loadBase(t)
	port, _ := containerPort(grpcContainer(t, m.orchestrator(t)), intstr.FromString("grpc"))
	listen, _ := cfg["listen"].(string)
	if want := hostPort("0.0.0.0", port); listen != want {
		t.Errorf("listen = %q, want %q", listen, want)
	}
}

func TestNetworkPolicies(t *testing.T) {
	m := loadBase(t)
	orch := m.orchestrator(t)
	policiesFor := func(d *appsv1.Deployment) []*networkingv1.NetworkPolicy {
		var ps []*networkingv1.NetworkPolicy
		for _, p := range m.netpols {
			if slices.Contains(m.selectedDeployments(t, &p.Spec.PodSelector), d) {
				if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
					t.Errorf("NetworkPolicy %s: policyTypes %v should name Ingress", p.Name, p.Spec.PolicyTypes)
				}
				ps = append(ps, p)
			}
		}
		return ps
	}
	onlyPort := func(p *networkingv1.NetworkPolicy, r networkingv1.NetworkPolicyIngressRule, port int32) {
		if len(r.Ports) != 1 || r.Ports[0].Port == nil || r.Ports[0].Port.IntValue() != int(port) ||
			(r.Ports[0].Protocol != nil && *r.Ports[0].Protocol != corev1.ProtocolTCP) || r.Ports[0].EndPort != nil {
			t.Errorf("NetworkPolicy %s: rule opens %s, want TCP %d only", p.Name, describePorts(r.Ports), port)
		}
	}

	orchPort, _ := containerPort(grpcContainer(t, orch), intstr.FromString("grpc"))
	orchPolicies := policiesFor(orch)
	if len(orchPolicies) == 0 {
		t.Error("no NetworkPolicy selects the orchestrator")
	}
	for _, p := range orchPolicies {
		for _, r := range p.Spec.Ingress {
			onlyPort(p, r, orchPort)
			if len(r.From) != 0 {
				t.Errorf("NetworkPolicy %s limits who reaches the orchestrator: %+v", p.Name, r.From)
			}
		}
	}

	for _, w := range m.byComponent(componentWorker) {
		port, _ := containerPort(grpcContainer(t, w), intstr.FromString("grpc"))
		ps := policiesFor(w)
		if len(ps) == 0 {
			t.Errorf("no NetworkPolicy selects worker %s", w.Name)
		}
		for _, p := range ps {
			for _, r := range p.Spec.Ingress {
				onlyPort(p, r, port)
				if len(r.From) == 0 {
					t.Errorf("NetworkPolicy %s lets anyone reach worker %s", p.Name, w.Name)
				}
				for _, peer := range r.From {
					if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil ||
						!slices.Equal(m.selectedDeployments(t, peer.PodSelector), []*appsv1.Deployment{orch}) {
						t.Errorf("NetworkPolicy %s: peer %+v is not exactly the orchestrator's pods", p.Name, peer)
					}
				}
			}
		}
	}
}

func describePorts(ports []networkingv1.NetworkPolicyPort) string {
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprintf("%s %s-%s", ptrString(p.Protocol), ptrString(p.Port), ptrString(p.EndPort)))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func TestPodDisruptionBudgets(t *testing.T) {
	m := loadBase(t)
	for _, p := range m.pdbs {
		ds := m.selectedDeployments(t, p.Spec.Selector)
		if len(ds) != 1 {
			t.Errorf("PodDisruptionBudget %s selects %d Deployments, want 1", p.Name, len(ds))
			continue
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: set exactly one of minAvailable and maxUnavailable", p.Name)
		}
		// A budget that allows no eviction of a one-replica Deployment blocks node drains.
		if r := ds[0].Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("PodDisruptionBudget %s covers %s, which has fewer than 2 replicas", p.Name, ds[0].Name)
		}
	}
	for _, w := range m.byComponent(componentWorker) {
		var covered bool
		for _, p := range m.pdbs {
			covered = covered || slices.Contains(m.selectedDeployments(t, p.Spec.Selector), w)
		}
		if !covered {
			t.Errorf("worker %s has no PodDisruptionBudget", w.Name)
		}
	}
}

// TestOrchestratorConfigLoads: the config the orchestrator pod reads passes the
// orchestrator's own strict loader, so a deployed orchestrator does not refuse to start.
func TestOrchestratorConfigLoads(t *testing.T) {
	cfg, err := config.Parse(orchestratorConfigFile(t))
	if err != nil {
		t.Fatalf("the ConfigMap's orchestrator.yaml does not load: %v", err)
	}
	if cfg.Provider.Name == "" || cfg.Listen == "" {
		t.Errorf("loaded config is missing provider or listen: %+v", cfg)
	}
	// In production nothing crosses to a group's workers unless it is listed.
	if cfg.Context.Default.Kind != "allow-keys" {
		t.Errorf("context.default is %q, want allow-keys", cfg.Context.Default.Kind)
	}
	for role, g := range cfg.Groups {
		if g.Context == nil || g.Context.Kind != "allow-keys" {
			t.Errorf("groups.%s.context is %+v, want allow-keys", role, g.Context)
		}
	}
	conv, err := server.Converters(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := toolctx.MustOf("tenantId", "acme", "Authorization", "Bearer x", "api_key", "k", "debug", "1")
	for _, role := range []string{"math", "some-other-group"} {
		if got := conv(role).Convert(in); !got.Equal(toolctx.MustOf("tenantId", "acme")) {
			t.Errorf("group %s receives %v, want tenantId only", role, got)
		}
	}
}
