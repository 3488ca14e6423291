package k8s_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// What the processes take on SIGTERM beyond their own timeouts: a worker, after
// --drain-timeout, up to 1 s to tell the orchestrators it leaves, 2 s to stop its
// servers and 5 s to flush telemetry (cmd/toolworker, pkg/worker); an orchestrator, after
// --shutdown-timeout, 5 s to stop its servers and 5 s to flush (cmd/orchestrator).
const (
	workerAfterDrain          = 8 * time.Second
	orchestratorAfterShutdown = 10 * time.Second
)

// The overlays kustomize renders; every test of a tree runs on the base and on each.
var overlays = []string{"overlays/dev", "overlays/prod", "overlays/prod-keda"}

// The Secrets an overlay expects to exist, created outside the repository (by the
// platform team, cert-manager, SPIRE): their keys are documented in deploy/k8s/README.md.
var externalSecrets = map[string]bool{
	"toolmesh-journal": true, "toolmesh-provider": true,
	"toolmesh-orchestrator-tls": true, "toolmesh-worker-math-tls": true, "toolmesh-worker-text-tls": true,
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the overlays use
// (decoded strictly: a new field needs adding here; kubeconform checks the full schema).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// scaledObject is the part of keda.sh/v1alpha1 ScaledObject the overlays use.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef  autoscalingv2.CrossVersionObjectReference `json:"scaleTargetRef"`
		MinReplicaCount *int32                                    `json:"minReplicaCount"`
		MaxReplicaCount *int32                                    `json:"maxReplicaCount"`
		PollingInterval *int32                                    `json:"pollingInterval"`
		CooldownPeriod  *int32                                    `json:"cooldownPeriod"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type       string            `json:"type"`
			MetricType string            `json:"metricType"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kustomize is the kustomize binary: $TOOLMESH_KUSTOMIZE, else .tmp/bin/kustomize of the
// checkout (make k8s installs it there), else one on PATH.
func kustomize(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TOOLMESH_KUSTOMIZE"); p != "" {
		return p
	}
	if p, err := filepath.Abs(filepath.Join("..", "..", ".tmp", "bin", "kustomize")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("kustomize"); err == nil {
		return p
	}
	t.Fatal("no kustomize: make k8s installs the pinned one into .tmp/bin (or set TOOLMESH_KUSTOMIZE)")
	return ""
}

var renderedTrees = map[string]*manifests{}

// render runs kustomize build on dir and decodes every object strictly.
func render(t testing.TB, dir string) *manifests {
	t.Helper()
	if m, ok := renderedTrees[dir]; ok {
		return m
	}
	cmd := exec.Command(kustomize(t), "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	docs, err := splitDocuments(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{name: dir, dir: dir, rendered: true}
	for i, doc := range docs {
		obj, err := decodeObject(doc)
		if err != nil {
			t.Fatalf("%s, object %d: %v", dir, i+1, err)
		}
		m.add(obj)
	}
	renderedTrees[dir] = m
	return m
}

// eachTree runs f on the base and on every overlay, as kustomize renders them.
func eachTree(t *testing.T, f func(t *testing.T, m *manifests)) {
	for _, o := range append([]string{baseDir}, overlays...) {
		t.Run(o, func(t *testing.T) { f(t, render(t, o)) })
	}
}

// isToolmesh reports whether d is one of toolmesh's processes.
func isToolmesh(d *appsv1.Deployment) bool {
	c := d.Spec.Template.Labels[labelComponent]
	return c == componentOrchestrator || c == componentWorker
}

// probePort is the port a toolmesh container's probes use: its plaintext health port when
// it has one (mutual TLS on), else its gRPC port.
func probePort(t testing.TB, c *corev1.Container) int32 {
	if p, ok := containerPort(c, intstr.FromString("health")); ok {
		return p
	}
	p, ok := containerPort(c, intstr.FromString("grpc"))
	if !ok {
		t.Fatalf("container %s has no port named grpc", c.Name)
	}
	return p
}

func TestManifestsDecodeStrictly(t *testing.T) {
	// The files as written (the base's objects set no namespace), then every tree rendered.
	t.Run("files", func(t *testing.T) {
		m := loadBase(t)
		for _, d := range m.deployments {
			if d.Namespace != "" {
				t.Errorf("Deployment %s sets a namespace; overlays choose it", d.Name)
			}
		}
	})
	eachTree(t, func(t *testing.T, m *manifests) {
		if len(m.byComponent(componentWorker)) < 2 {
			t.Error("fewer than two tool groups")
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
			if m.name == baseDir && meta.Namespace != "" {
				t.Errorf("%s %s sets a namespace; overlays choose it", kind, meta.Name)
			}
			if m.name != baseDir && meta.Namespace == "" {
				t.Errorf("%s %s has no namespace in %s", kind, meta.Name, m.name)
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
		for _, o := range m.hpas {
			add("HorizontalPodAutoscaler", o.ObjectMeta)
		}
	})
}

// TestOverlaysMakeTheirNamespace: kubectl apply -k of an overlay on a fresh cluster works
// (the base makes none: whoever uses it chooses the namespace).
func TestOverlaysMakeTheirNamespace(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		var made []string
		for _, n := range m.namespaces {
			made = append(made, n.Name)
		}
		if m.name == baseDir {
			if len(made) > 0 {
				t.Errorf("the base makes namespaces %v", made)
			}
			return
		}
		used := map[string]bool{}
		for _, d := range m.deployments {
			used[d.Namespace] = true
		}
		for ns := range used {
			if !slices.Contains(made, ns) {
				t.Errorf("objects live in namespace %q, which the tree does not make (it makes %v)", ns, made)
			}
		}
		if len(made) != len(used) {
			t.Errorf("the tree makes namespaces %v, its Deployments live in %v", made, slices.Sorted(maps.Keys(used)))
		}
	})
}

// TestServicesAndProbes: each toolmesh Deployment's Services reach its container's ports,
// and the kubelet probes grpc.health.v1 on the gRPC port, or on the plaintext health port
// where mutual TLS is on.
func TestServicesAndProbes(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		for _, d := range m.deployments {
			t.Run(d.Name, func(t *testing.T) {
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || sel.Empty() || !sel.Matches(labelsOf(d)) {
					t.Errorf("selector %v does not match pod labels %v (err %v)", d.Spec.Selector, d.Spec.Template.Labels, err)
				}
				svcs := m.servicesFor(d)
				if len(svcs) == 0 {
					t.Fatal("no Service selects its pods")
				}
				for _, svc := range svcs {
					for _, sp := range svc.Spec.Ports {
						target := sp.TargetPort
						if target.Type == intstr.Int && target.IntVal == 0 {
							target = intstr.FromInt32(sp.Port)
						}
						var found bool
						for i := range d.Spec.Template.Spec.Containers {
							_, ok := containerPort(&d.Spec.Template.Spec.Containers[i], target)
							found = found || ok
						}
						if !found {
							t.Errorf("Service %s port %s targets %s, which no container exposes", svc.Name, sp.Name, target.String())
						}
						if sp.Name == "grpc" && (sp.AppProtocol == nil || *sp.AppProtocol != "grpc") {
							t.Errorf("Service %s port grpc: want appProtocol grpc", svc.Name)
						}
					}
				}
				if !isToolmesh(d) {
					return
				}
				c := grpcContainer(t, d)
				port := probePort(t, c)
				probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
				for kind, p := range probes {
					switch {
					case p == nil:
						t.Errorf("no %s probe", kind)
					case p.GRPC == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.Exec != nil:
						t.Errorf("%s probe is not a gRPC probe: %+v", kind, p.ProbeHandler)
					case p.GRPC.Port != port:
						t.Errorf("%s probe checks port %d, want %d", kind, p.GRPC.Port, port)
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
	})
}

func TestPodSpecs(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		for _, d := range m.deployments {
			t.Run(d.Name, func(t *testing.T) {
				pod := d.Spec.Template
				for _, l := range []string{labelName, labelComponent, labelPartOf} {
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
				if isToolmesh(d) {
					sa := pod.Spec.ServiceAccountName
					if sa == "" || !slices.ContainsFunc(m.accounts, func(a *corev1.ServiceAccount) bool { return a.Name == sa }) {
						t.Errorf("serviceAccountName %q is not one of the tree's ServiceAccounts", sa)
					}
					if n := len(pod.Spec.TopologySpreadConstraints); n == 0 {
						t.Error("no topologySpreadConstraints: its replicas may share a node")
					}
					for _, c := range pod.Spec.TopologySpreadConstraints {
						if s, err := metav1.LabelSelectorAsSelector(c.LabelSelector); err != nil || !s.Matches(labelsOf(d)) {
							t.Errorf("topology spread over %s does not select the Deployment's own pods", c.TopologyKey)
						}
					}
				}
				if len(pod.Spec.Containers) == 0 {
					t.Fatal("no containers")
				}
				for _, c := range pod.Spec.Containers {
					checkContainer(t, psc, &c, isToolmesh(d))
					if m.name == "overlays/prod" && isToolmesh(d) && !strings.Contains(c.Image, ":v") {
						t.Errorf("container %s: prod runs a released image, not %q", c.Name, c.Image)
					}
				}
			})
		}
	})
}

// replicasOf is the least number of replicas d runs: its autoscaler's minimum, or its
// replicas field.
func (m *manifests) replicasOf(d *appsv1.Deployment) int32 {
	for _, h := range m.hpas {
		if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name && h.Spec.MinReplicas != nil {
			return *h.Spec.MinReplicas
		}
	}
	for _, s := range m.scaled {
		if s.Spec.ScaleTargetRef.Name == d.Name && s.Spec.MinReplicaCount != nil {
			return *s.Spec.MinReplicaCount
		}
	}
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func TestWorkers(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		orch := m.orchestrator(t)
		// Workers register with every replica through the headless Service.
		var headless *corev1.Service
		for _, s := range m.servicesFor(orch) {
			if s.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = s
			}
		}
		if headless == nil {
			t.Fatal("no headless Service selects the orchestrator's pods")
		}
		if !headless.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s does not publish not-ready addresses: a restarted replica waits for its workers before it is ready", headless.Name)
		}
		if r := m.replicasOf(orch); r < 2 {
			t.Errorf("the orchestrator runs %d replicas, want at least 2", r)
		}
		for _, d := range m.byComponent(componentWorker) {
			t.Run(d.Name, func(t *testing.T) {
				c := grpcContainer(t, d)
				port, _ := containerPort(c, intstr.FromString("grpc"))
				flags := parseFlags(t, c.Args)
				want := map[string]string{
					"orchestrator": "dns:///" + hostPort(headless.Name, grpcServicePort(t, headless).Port),
					"listen":       hostPort("0.0.0.0", port),
					"advertise":    hostPort("$(POD_IP)", port),
					"id":           "$(POD_NAME)",
				}
				if mp, ok := containerPort(c, intstr.FromString("metrics")); ok {
					want["metrics-listen"] = hostPort("0.0.0.0", mp)
				} else {
					t.Error("no metrics port: the autoscaler reads calls in flight from it")
				}
				if hp, ok := containerPort(c, intstr.FromString("health")); ok {
					want["health-listen"] = hostPort("0.0.0.0", hp)
				}
				for name, v := range want {
					if flags[name] != v {
						t.Errorf("--%s=%q, want %q", name, flags[name], v)
					}
				}
				// Without mutual TLS a worker on a pod address must say it serves plaintext
				// (it refuses to start otherwise); with it, it must not.
				if _, tls := flags["tls-ca"]; tls == (flags["plaintext"] == "true") {
					t.Errorf("--tls-ca given: %v, --plaintext=%q: a worker serves either mutual TLS or, said so, plaintext", tls, flags["plaintext"])
				}
				if flags["groups"] == "" || strings.Contains(flags["groups"], ",") {
					t.Errorf("--groups=%q: one Deployment per tool group", flags["groups"])
				}
				if !strings.HasSuffix(d.Name, "-"+flags["groups"]) {
					t.Errorf("Deployment %s serves --groups=%s; name it after its group", d.Name, flags["groups"])
				}
				if n, err := strconv.Atoi(flags["capacity"]); err != nil || n <= 0 {
					t.Errorf("--capacity=%q is not a positive number", flags["capacity"])
				}
				drain, err := time.ParseDuration(flags["drain-timeout"])
				if err != nil {
					t.Fatalf("--drain-timeout: %v", err)
				}
				grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
				if grace == nil || time.Duration(*grace)*time.Second <= drain+workerAfterDrain {
					t.Errorf("terminationGracePeriodSeconds %v must exceed --drain-timeout=%v + %v, or the kubelet kills calls in flight", ptrString(grace), drain, workerAfterDrain)
				}
				if toolTimeout := orchestratorConfig(t, m).Router.DefaultToolTimeout.D(); drain < toolTimeout {
					t.Errorf("--drain-timeout=%v is shorter than the orchestrator's router.default_tool_timeout %v: a call that began just before SIGTERM is cut", drain, toolTimeout)
				}
				if d.Spec.Replicas != nil {
					t.Errorf("replicas is set (%d): the autoscaler owns it, and every apply would reset it", *d.Spec.Replicas)
				}
				if r := m.replicasOf(d); r < 2 {
					t.Errorf("runs at least %d replicas, want 2", r)
				}
				checkWorkerTLS(t, m, d, c, flags)
			})
		}
		// The orchestrator: its grace covers its shutdown timeout.
		c := grpcContainer(t, orch)
		flags := parseFlags(t, c.Args)
		shutdown, err := time.ParseDuration(flags["shutdown-timeout"])
		if err != nil {
			t.Fatalf("orchestrator --shutdown-timeout: %v", err)
		}
		if g := orch.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown+orchestratorAfterShutdown {
			t.Errorf("orchestrator terminationGracePeriodSeconds %v must exceed --shutdown-timeout=%v + %v", ptrString(g), shutdown, orchestratorAfterShutdown)
		}
		if flags["owner"] != "$(POD_NAME)" {
			t.Errorf("orchestrator --owner=%q: replicas need different names in run leases, want $(POD_NAME)", flags["owner"])
		}
	})
}

// checkWorkerTLS: a worker's TLS flags are all set or none, and with them it has a
// plaintext health port and its key material on Secret volumes.
func checkWorkerTLS(t *testing.T, m *manifests, d *appsv1.Deployment, c *corev1.Container, flags map[string]string) {
	t.Helper()
	tlsFlags := []string{"tls-ca", "tls-cert", "tls-key", "orchestrator-id"}
	var tls int
	for _, f := range tlsFlags {
		if flags[f] != "" {
			tls++
		}
	}
	if tls != 0 && tls != len(tlsFlags) {
		t.Errorf("some of --%s are set, not all", strings.Join(tlsFlags, ", --"))
	}
	if tls > 0 {
		if flags["health-listen"] == "" {
			t.Error("mutual TLS without --health-listen: the kubelet's probes speak no TLS")
		}
		for _, f := range tlsFlags[:3] {
			checkSecretFile(t, m, d, c, flags[f])
		}
	}
}

// checkSecretFile checks that file is on a read-only mount of a Secret volume of d.
func checkSecretFile(t *testing.T, m *manifests, d *appsv1.Deployment, c *corev1.Container, file string) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		v := podVolume(d, vm.Name)
		if v == nil || v.Secret == nil {
			t.Errorf("%s is on volume %q, which is not a Secret", file, vm.Name)
		} else if !vm.ReadOnly {
			t.Errorf("%s: volume %q is mounted writable", file, vm.Name)
		} else if !m.hasSecret(v.Secret.SecretName) {
			t.Errorf("%s: Secret %q is neither rendered nor one the README documents", file, v.Secret.SecretName)
		}
		return
	}
	t.Errorf("%s is on no volume mount", file)
}

func (m *manifests) hasSecret(name string) bool {
	return externalSecrets[name] || slices.ContainsFunc(m.secrets, func(s *corev1.Secret) bool { return s.Name == name })
}

// TestSecretReferences: every Secret a pod reads is rendered by the overlay or is one the
// README tells the platform team to create; a required one is never left to chance.
func TestSecretReferences(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		for _, d := range m.deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, e := range c.Env {
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						continue
					}
					ref := e.ValueFrom.SecretKeyRef
					if !m.hasSecret(ref.Name) && (ref.Optional == nil || !*ref.Optional) {
						t.Errorf("%s: env %s reads Secret %q, which nothing creates", d.Name, e.Name, ref.Name)
					}
					for _, s := range m.secrets {
						if s.Name == ref.Name {
							if _, ok := s.Data[ref.Key]; !ok {
								if _, ok := s.StringData[ref.Key]; !ok {
									t.Errorf("%s: env %s reads key %q, which Secret %s lacks", d.Name, e.Name, ref.Key, s.Name)
								}
							}
						}
					}
				}
			}
		}
	})
}

func TestOrchestratorConfig(t *testing.T) {
	js, err := yaml.YAMLToJSONStrict(orchestratorConfigFile(t, render(t, baseDir)))
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
}

// orchestratorConfig is the config m's orchestrator pod reads, loaded by the
// orchestrator's own strict loader with the environment the pod gives it: a Secret's
// value when the Secret is required, nothing when it is optional. A provider key that
// is optional in the pod is absent here, so a config that needs it must make it
// required, and a missing Secret keeps the pod from starting rather than letting it fail
// its config.
func orchestratorConfig(t testing.TB, m *manifests) config.Config {
	t.Helper()
	c := grpcContainer(t, m.orchestrator(t))
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil && (e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional):
			env[e.Name] = "from-secret-" + e.Name
		}
	}
	if env["TOOLMESH_JOURNAL_DSN"] != "" {
		env["TOOLMESH_JOURNAL_DSN"] = "postgres://toolmesh@db:5432/toolmesh"
	}
	cfg, err := config.ParseEnv(orchestratorConfigFile(t, m), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the ConfigMap's orchestrator.yaml does not load: %v", err)
	}
	return cfg
}

// TestOrchestratorConfigLoads: the config each tree's orchestrator pod reads passes the
// orchestrator's own strict loader with the environment the pod gives it, listens where
// its ports and probes point, and grants each tool group's identity its group.
func TestOrchestratorConfigLoads(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		d := m.orchestrator(t)
		c := grpcContainer(t, d)
		cfg := orchestratorConfig(t, m)
		if cfg.Journal.Driver != "postgres" {
			t.Errorf("journal.driver %q: replicas share a PostgreSQL journal", cfg.Journal.Driver)
		}
		port, _ := containerPort(c, intstr.FromString("grpc"))
		if want := hostPort("0.0.0.0", port); cfg.Listen != want {
			t.Errorf("listen = %q, want %q", cfg.Listen, want)
		}
		if hp, ok := containerPort(c, intstr.FromString("health")); ok != (cfg.HealthListen != "") || (ok && cfg.HealthListen != hostPort("0.0.0.0", hp)) {
			t.Errorf("health_listen = %q, the container's health port %d", cfg.HealthListen, hp)
		}
		if mp, ok := containerPort(c, intstr.FromString("metrics")); !ok || parseFlags(t, c.Args)["metrics-listen"] != hostPort("0.0.0.0", mp) {
			t.Errorf("--metrics-listen does not serve the metrics port")
		}
		if cfg.TLS.Enabled() {
			if cfg.HealthListen == "" {
				t.Error("tls without health_listen: the kubelet's probes speak no TLS")
			}
			for _, f := range []string{cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile} {
				checkSecretFile(t, m, d, c, f)
			}
			ns := m.orchestrator(t).Namespace
			for _, w := range m.byComponent(componentWorker) {
				id := "spiffe://cluster.local/ns/" + ns + "/sa/" + w.Spec.Template.Spec.ServiceAccountName
				group := parseFlags(t, grpcContainer(t, w).Args)["groups"]
				if !slices.ContainsFunc(cfg.Trust.Workers, func(g config.WorkerGrant) bool { return g.ID == id && slices.Contains(g.Groups, group) }) {
					t.Errorf("trust.workers does not grant %s (worker %s) the %s group", id, w.Name, group)
				}
				want := "spiffe://cluster.local/ns/" + ns + "/sa/" + d.Spec.Template.Spec.ServiceAccountName
				if got := parseFlags(t, grpcContainer(t, w).Args)["orchestrator-id"]; got != want {
					t.Errorf("worker %s --orchestrator-id=%q, want the orchestrator's %q", w.Name, got, want)
				}
			}
		}
		// In production nothing crosses to a group's workers unless it is listed.
		if cfg.Context.Default.Kind != "allow-keys" {
			t.Errorf("context.default is %q, want allow-keys", cfg.Context.Default.Kind)
		}
		for _, w := range m.byComponent(componentWorker) {
			group := parseFlags(t, grpcContainer(t, w).Args)["groups"]
			if g, ok := cfg.Groups[group]; !ok || g.Context == nil || g.Context.Kind != "allow-keys" {
				t.Errorf("groups.%s.context is not allow-keys", group)
			}
		}
		conv, err := compose.Converters(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		in := toolctx.MustOf("tenantId", "acme", "Authorization", "Bearer x", "api_key", "k", "debug", "1")
		for _, role := range []string{"math", "some-other-group"} {
			if got := conv(role).Convert(in); !got.Equal(toolctx.MustOf("tenantId", "acme")) {
				t.Errorf("group %s receives %v, want tenantId only", role, got)
			}
		}
	})
}

// TestAutoscalers: every tool group's Deployment has exactly one autoscaler (an HPA, or a
// KEDA ScaledObject), on its calls in flight per replica and on CPU, aimed at it.
func TestAutoscalers(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		for _, h := range m.hpas {
			ref := h.Spec.ScaleTargetRef
			if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || !slices.ContainsFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == ref.Name }) {
				t.Errorf("HPA %s scales %+v, which is not a Deployment of the tree", h.Name, ref)
			}
		}
		for _, s := range m.scaled {
			ref := s.Spec.ScaleTargetRef
			if (ref.APIVersion != "" && ref.APIVersion != "apps/v1") || (ref.Kind != "" && ref.Kind != "Deployment") || !slices.ContainsFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == ref.Name }) {
				t.Errorf("ScaledObject %s scales %+v, which is not a Deployment of the tree", s.Name, ref)
			}
		}
		for _, d := range m.byComponent(componentWorker) {
			flags := parseFlags(t, grpcContainer(t, d).Args)
			capacity, _ := strconv.Atoi(flags["capacity"])
			var hpas []*autoscalingv2.HorizontalPodAutoscaler
			for _, h := range m.hpas {
				if h.Spec.ScaleTargetRef.Name == d.Name {
					hpas = append(hpas, h)
				}
			}
			var sos []*scaledObject
			for _, s := range m.scaled {
				if s.Spec.ScaleTargetRef.Name == d.Name {
					sos = append(sos, s)
				}
			}
			if len(hpas)+len(sos) != 1 {
				t.Errorf("%s has %d HPAs and %d ScaledObjects, want one autoscaler", d.Name, len(hpas), len(sos))
				continue
			}
			var inFlight, cpu bool
			for _, h := range hpas {
				for _, mt := range h.Spec.Metrics {
					switch {
					case mt.Type == autoscalingv2.PodsMetricSourceType && mt.Pods.Metric.Name == "toolmesh_worker_calls_in_flight":
						v := mt.Pods.Target.AverageValue
						inFlight = v != nil && v.Value() > 0 && v.Value() <= int64(capacity)
						if !inFlight {
							t.Errorf("HPA %s: in-flight target %v is not within the worker's --capacity=%d", h.Name, v, capacity)
						}
					case mt.Type == autoscalingv2.ResourceMetricSourceType && mt.Resource.Name == corev1.ResourceCPU:
						cpu = true
					}
				}
				if h.Spec.MaxReplicas < 4 {
					t.Errorf("HPA %s: maxReplicas %d", h.Name, h.Spec.MaxReplicas)
				}
			}
			for _, s := range sos {
				for _, tr := range s.Spec.Triggers {
					switch tr.Type {
					case "prometheus":
						q := tr.Metadata["query"]
						th, err := strconv.Atoi(tr.Metadata["threshold"])
						inFlight = strings.Contains(q, "toolmesh_worker_calls_in_flight") && strings.Contains(q, `toolmesh_group="`+flags["groups"]+`"`) &&
							strings.Contains(q, `namespace="`+d.Namespace+`"`) && err == nil && th > 0 && th <= capacity && tr.Metadata["serverAddress"] != ""
						if !inFlight {
							t.Errorf("ScaledObject %s: prometheus trigger %v does not count the %s group's calls in flight in namespace %q against --capacity=%d", s.Name, tr.Metadata, flags["groups"], d.Namespace, capacity)
						}
					case "cpu":
						cpu = true
					}
				}
			}
			if !inFlight || !cpu {
				t.Errorf("%s scales on calls in flight: %v, on CPU: %v; want both", d.Name, inFlight, cpu)
			}
		}
	})
}

// TestServiceMonitors: each ServiceMonitor scrapes a port its Services have, and every
// toolmesh Service with a metrics port is scraped where monitoring is on.
func TestServiceMonitors(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		scraped := map[string]bool{}
		for _, sm := range m.monitors {
			sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			for _, s := range m.services {
				if !sel.Matches(labelsSet(s.Labels)) {
					continue
				}
				for _, ep := range sm.Spec.Endpoints {
					if slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						n++
						scraped[s.Name] = true
					}
				}
			}
			if n == 0 {
				t.Errorf("ServiceMonitor %s scrapes no Service port", sm.Name)
			}
		}
		if len(m.monitors) == 0 {
			return
		}
		for _, s := range m.services {
			if slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) && !scraped[s.Name] {
				t.Errorf("Service %s has a metrics port no ServiceMonitor scrapes", s.Name)
			}
		}
	})
}

func TestNetworkPolicies(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
		orch := m.orchestrator(t)
		orchPort, _ := containerPort(grpcContainer(t, orch), intstr.FromString("grpc"))
		checkDefaultDeny(t, m)
		checkPolicyPorts(t, m)
		checkWhoReaches(t, m, orch, orchPort)
		checkMeshReachable(t, m, orch, orchPort)
	})
}

// checkDefaultDeny: every pod of the tree is under a policy for both directions.
func checkDefaultDeny(t *testing.T, m *manifests) {
	t.Helper()
	for _, d := range m.deployments {
		var in, out bool
		for _, p := range m.netpols {
			if slices.Contains(m.selectedDeployments(t, &p.Spec.PodSelector), d) {
				in = in || slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
				out = out || slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
			}
		}
		if !in || !out {
			t.Errorf("%s: ingress isolated %v, egress isolated %v; want both", d.Name, in, out)
		}
	}
}

// checkPolicyPorts: every policy selects pods, and opens only ports its pods, and the
// peers it lets them reach, listen on.
func checkPolicyPorts(t *testing.T, m *manifests) {
	t.Helper()
	peerDeployments := func(p *networkingv1.NetworkPolicy, peer networkingv1.NetworkPolicyPeer) []*appsv1.Deployment {
		if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
			return nil
		}
		ds := m.selectedDeployments(t, peer.PodSelector)
		if len(ds) == 0 {
			t.Errorf("NetworkPolicy %s: peer %v selects no pod of the tree", p.Name, peer.PodSelector.MatchLabels)
		}
		return ds
	}
	for _, p := range m.netpols {
		targets := m.selectedDeployments(t, &p.Spec.PodSelector)
		if len(targets) == 0 {
			t.Errorf("NetworkPolicy %s selects no pod", p.Name)
		}
		for _, r := range p.Spec.Ingress {
			for _, port := range r.Ports {
				for _, d := range targets {
					if !exposes(d, port) {
						t.Errorf("NetworkPolicy %s opens %s on %s, which does not listen there", p.Name, describePorts([]networkingv1.NetworkPolicyPort{port}), d.Name)
					}
				}
			}
			for _, peer := range r.From {
				peerDeployments(p, peer)
			}
		}
		for _, r := range p.Spec.Egress {
			for _, peer := range r.To {
				for _, d := range peerDeployments(p, peer) {
					for _, port := range r.Ports {
						if !exposes(d, port) {
							t.Errorf("NetworkPolicy %s lets pods reach %s on %s, which does not listen there", p.Name, d.Name, describePorts([]networkingv1.NetworkPolicyPort{port}))
						}
					}
				}
			}
		}
	}
}

// checkWhoReaches: a worker's gRPC port only the orchestrator reaches, its metrics only
// the monitoring namespace; the orchestrator's gRPC port anyone.
func checkWhoReaches(t *testing.T, m *manifests, orch *appsv1.Deployment, orchPort int32) {
	t.Helper()
	if peers := m.allowed(t, orch, orchPort); !slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool {
		return p.PodSelector == nil && p.NamespaceSelector == nil && p.IPBlock == nil
	}) {
		t.Errorf("clients cannot reach the orchestrator's gRPC port: %+v", peers)
	}
	for _, w := range m.byComponent(componentWorker) {
		c := grpcContainer(t, w)
		port, _ := containerPort(c, intstr.FromString("grpc"))
		peers := m.allowed(t, w, port)
		if len(peers) == 0 {
			t.Errorf("nothing reaches worker %s", w.Name)
		}
		for _, peer := range peers {
			if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil ||
				!slices.Equal(m.selectedDeployments(t, peer.PodSelector), []*appsv1.Deployment{orch}) {
				t.Errorf("worker %s's gRPC port is open to %+v, not exactly the orchestrator's pods", w.Name, peer)
			}
		}
		mp, _ := containerPort(c, intstr.FromString("metrics"))
		for _, peer := range m.allowed(t, w, mp) {
			if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || peer.PodSelector != nil {
				t.Errorf("worker %s's metrics port is open to %+v, not the monitoring namespace", w.Name, peer)
			}
		}
	}
}

// checkMeshReachable: what each process must reach, it may: default deny must not cut
// the mesh (DNS, the collector, registration and calls, HTTPS, the journal's database).
func checkMeshReachable(t *testing.T, m *manifests, orch *appsv1.Deployment, orchPort int32) {
	t.Helper()
	for _, d := range m.deployments {
		if !isToolmesh(d) {
			continue
		}
		for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
			if !m.reaches(t, d, proto, 53, nil) {
				t.Errorf("%s cannot reach DNS (%s 53)", d.Name, proto)
			}
		}
		for _, e := range grpcContainer(t, d).Env {
			if e.Name != "OTEL_EXPORTER_OTLP_ENDPOINT" {
				continue
			}
			u, err := url.Parse(e.Value)
			port, _ := strconv.Atoi(u.Port())
			if err != nil || port == 0 {
				t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q has no port", d.Name, e.Value)
			} else if !m.reaches(t, d, corev1.ProtocolTCP, int32(port), nil) {
				t.Errorf("%s cannot reach its OTLP collector at %s", d.Name, e.Value)
			}
		}
	}
	for _, w := range m.byComponent(componentWorker) {
		wp, _ := containerPort(grpcContainer(t, w), intstr.FromString("grpc"))
		if !m.reaches(t, w, corev1.ProtocolTCP, orchPort, orch) {
			t.Errorf("worker %s cannot reach the orchestrator's gRPC port %d to register", w.Name, orchPort)
		}
		if !m.reaches(t, orch, corev1.ProtocolTCP, wp, w) {
			t.Errorf("the orchestrator cannot reach worker %s's gRPC port %d", w.Name, wp)
		}
	}
	if !m.reaches(t, orch, corev1.ProtocolTCP, 443, nil) {
		t.Error("the orchestrator cannot reach HTTPS (443): model providers, MCP servers")
	}
	if dsn := orchestratorConfig(t, m).Journal.DSN; dsn != "" {
		port := 5432
		if u, err := url.Parse(dsn); err == nil && u.Port() != "" {
			port, _ = strconv.Atoi(u.Port())
		}
		var db *appsv1.Deployment // the tree's own database, where it has one
		for _, d := range m.deployments {
			if u, err := url.Parse(dsn); err == nil && d.Name == u.Hostname() {
				db = d
			}
		}
		if !m.reaches(t, orch, corev1.ProtocolTCP, int32(port), db) {
			t.Errorf("the orchestrator cannot reach its journal's database on port %d", port)
		}
	}
}

// allowed are the peers the tree's policies let reach port of d's pods.
func (m *manifests) allowed(t *testing.T, d *appsv1.Deployment, port int32) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for _, p := range m.netpols {
		if !slices.Contains(m.selectedDeployments(t, &p.Spec.PodSelector), d) {
			continue
		}
		for _, r := range p.Spec.Ingress {
			if len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(np networkingv1.NetworkPolicyPort) bool { return np.Port != nil && np.Port.IntValue() == int(port) }) {
				if len(r.From) == 0 {
					peers = append(peers, networkingv1.NetworkPolicyPeer{}) // anyone
				}
				peers = append(peers, r.From...)
			}
		}
	}
	return peers
}

// reaches reports whether the tree's policies let d's pods reach port (over proto) of
// to's pods, or of anything outside the tree when to is nil.
func (m *manifests) reaches(t *testing.T, d *appsv1.Deployment, proto corev1.Protocol, port int32, to *appsv1.Deployment) bool {
	for _, p := range m.netpols {
		if !slices.Contains(m.selectedDeployments(t, &p.Spec.PodSelector), d) {
			continue
		}
		for _, r := range p.Spec.Egress {
			portOK := len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(np networkingv1.NetworkPolicyPort) bool {
				pr := corev1.ProtocolTCP
				if np.Protocol != nil {
					pr = *np.Protocol
				}
				return pr == proto && (np.Port == nil || np.Port.IntValue() == int(port))
			})
			peerOK := len(r.To) == 0 || slices.ContainsFunc(r.To, func(peer networkingv1.NetworkPolicyPeer) bool {
				if to == nil || peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
					return to == nil // outside the tree: any peer may be it
				}
				return slices.Contains(m.selectedDeployments(t, peer.PodSelector), to)
			})
			if portOK && peerOK {
				return true
			}
		}
	}
	return false
}

func labelsOf(d *appsv1.Deployment) labels.Set { return labels.Set(d.Spec.Template.Labels) }

func labelsSet(m map[string]string) labels.Set { return labels.Set(m) }

// exposes reports whether one of d's containers listens on port.
func exposes(d *appsv1.Deployment, port networkingv1.NetworkPolicyPort) bool {
	if port.Port == nil {
		return true
	}
	for i := range d.Spec.Template.Spec.Containers {
		if _, ok := containerPort(&d.Spec.Template.Spec.Containers[i], *port.Port); ok {
			return true
		}
	}
	return false
}

func TestPodDisruptionBudgets(t *testing.T) {
	eachTree(t, func(t *testing.T, m *manifests) {
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
			if r := m.replicasOf(ds[0]); r < 2 {
				t.Errorf("PodDisruptionBudget %s covers %s, which runs %d replica", p.Name, ds[0].Name, r)
			}
		}
		for _, d := range m.deployments {
			if !isToolmesh(d) {
				continue
			}
			var covered bool
			for _, p := range m.pdbs {
				covered = covered || slices.Contains(m.selectedDeployments(t, p.Spec.Selector), d)
			}
			if !covered {
				t.Errorf("%s has no PodDisruptionBudget", d.Name)
			}
		}
	})
}
