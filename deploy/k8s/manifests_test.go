package k8s

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// configPath is where the image's CMD and the manifests expect the config.
	configPath = "/etc/rocketdelay/config.yaml"
	// brokerMessageDelayLevel is the brokers' messageDelayLevel the manifests are written
	// for: RocketMQ's default (MessageStoreConfig.messageDelayLevel). If your brokers use
	// another string, change it here together with scheduler.levels in the ConfigMaps.
	brokerMessageDelayLevel = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	// shutdownMargin is how much longer than shutdownTimeout a pod's grace period must be.
	// Past shutdownTimeout the scheduler's Stop still waits up to 5 s for its loops, 5 s
	// for each of its two hand-backs and 5 s for the hand-offs in flight (20 s in all);
	// the rest is for the process to exit and for the kubelet, before SIGKILL.
	shutdownMargin = 25 * time.Second
	// secretPlaceholder must appear in every value of a secret.template.yaml.
	secretPlaceholder = "REPLACE_ME"
)

// migrateSections are the top-level config keys `rocketdelay migrate` loads and
// validates (app/migrate.go): the migration Job's environment sets what these read and
// nothing else.
var migrateSections = []string{"log", "postgres"}

// inMigrateSections reports whether the config key (a path such as postgres.url or
// targets.ops.robots.0.token) lies in a section `rocketdelay migrate` loads.
func inMigrateSections(key string) bool {
	section, _, _ := strings.Cut(key, ".")
	return slices.Contains(migrateSections, section)
}

// app is what the checks need from one rendering: the scheduler Deployment and the
// migration Job, their config, and the effective configuration the binary computes for
// each from the ConfigMap and its environment.
type app struct {
	r         *rendering
	deploy    *appsv1.Deployment
	container *corev1.Container // the Deployment's rocketdelay container
	job       *batchv1.Job
	migrate   *corev1.Container
	rawConfig map[string]any // the ConfigMap's config.yaml as written
	effective map[string]any // `config check` output with the Deployment's environment
}

func TestManifests(t *testing.T) {
	envVars := binaryEnvVars(t)
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			a := inspect(t, render(t, dir))
			t.Run("config", func(t *testing.T) { checkConfig(t, a) })
			t.Run("env", func(t *testing.T) { checkEnv(t, a, envVars) })
			t.Run("probes and ports", func(t *testing.T) { checkProbes(t, a) })
			t.Run("deployment", func(t *testing.T) { checkDeployment(t, a) })
			t.Run("service", func(t *testing.T) { checkService(t, a) })
			t.Run("network policy", func(t *testing.T) { checkNetworkPolicy(t, a) })
			t.Run("pdb", func(t *testing.T) { checkPDB(t, a) })
			t.Run("migration job", func(t *testing.T) { checkJob(t, a) })
			t.Run("pod security and resources", func(t *testing.T) { checkPods(t, a.r) })
			t.Run("no inline secrets", func(t *testing.T) { checkNoInlineSecrets(t, a) })
			t.Run("secret template", func(t *testing.T) { checkSecretTemplate(t, a.r) })
			t.Run("redis persistence", func(t *testing.T) { redisInCluster(t, a) })
		})
	}
}

// TestExampleProdOverlay checks what the example-prod overlay promises beyond the base.
func TestExampleProdOverlay(t *testing.T) {
	a := inspect(t, render(t, "overlays/example-prod"))
	require.Equal(t, int32(3), *a.deploy.Spec.Replicas)
	for _, ns := range stringsAt(t, a.effective, "rocketmq", "nameServers") {
		host, port, err := net.SplitHostPort(ns)
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(host, ".svc.cluster.local"), "name server %q: want the RocketMQ name server Service's DNS name", ns)
		require.Equal(t, "9876", port)
	}
	require.True(t, redisInCluster(t, a), "the example-prod Redis URL must point at the persistent Redis of redis.yaml")
	require.Equal(t, "rocketdelay", a.deploy.Namespace)
	require.Equal(t, "registry.example.com/rocketdelay:1.0.0", a.container.Image, "the overlay pins its registry and release")
	// Prometheus and Alertmanager run in the namespace "monitoring": they must reach the
	// internal port (/metrics, the Alertmanager receiver), not only this namespace's pods.
	peers := httpPeers(t, a)
	require.True(t, slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool {
		return p.PodSelector == nil && p.IPBlock == nil && p.NamespaceSelector != nil &&
			len(p.NamespaceSelector.MatchExpressions) == 0 &&
			maps.Equal(p.NamespaceSelector.MatchLabels, map[string]string{corev1.LabelMetadataName: "monitoring"})
	}), "the NetworkPolicy must let port http in from the namespace monitoring; peers: %+v", peers)
	require.True(t, slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool {
		return p.NamespaceSelector == nil && p.IPBlock == nil && p.PodSelector != nil &&
			len(p.PodSelector.MatchLabels) == 0 && len(p.PodSelector.MatchExpressions) == 0
	}), "the NetworkPolicy must still let port http in from this namespace's pods; peers: %+v", peers)
}

func inspect(t *testing.T, r *rendering) *app {
	t.Helper()
	a := &app{r: r}
	for _, d := range objectsOf[*appsv1.Deployment](r) {
		for i, c := range d.Spec.Template.Spec.Containers {
			if len(c.Args) > 0 && c.Args[0] == "serve" {
				require.Nil(t, a.deploy, "%s: two Deployments run `rocketdelay serve`", r.dir)
				a.deploy, a.container = d, &d.Spec.Template.Spec.Containers[i]
			}
		}
	}
	require.NotNil(t, a.deploy, "%s: no Deployment runs `rocketdelay serve`", r.dir)
	for _, j := range objectsOf[*batchv1.Job](r) {
		for i, c := range j.Spec.Template.Spec.Containers {
			if len(c.Args) > 0 && c.Args[0] == "migrate" {
				require.Nil(t, a.job, "%s: two Jobs run `rocketdelay migrate`", r.dir)
				a.job, a.migrate = j, &j.Spec.Template.Spec.Containers[i]
			}
		}
	}
	require.NotNil(t, a.job, "%s: no Job runs `rocketdelay migrate`", r.dir)

	data, _ := configFile(t, r, a.deploy.Namespace, &a.deploy.Spec.Template.Spec, a.container)
	require.NoError(t, yamlUnmarshal(data, &a.rawConfig), "the ConfigMap's config.yaml")
	a.effective = configCheck(t, data, containerEnv(t, r, a.deploy.Namespace, a.container))
	return a
}

// configFile returns the config file a rocketdelay container reads (-f), from the
// ConfigMap mounted there, and the ConfigMap's name.
func configFile(t *testing.T, r *rendering, ns string, pod *corev1.PodSpec, c *corev1.Container) (string, string) {
	t.Helper()
	i := slices.Index(c.Args, "-f")
	require.True(t, i >= 0 && i+1 < len(c.Args), "container %s: args %q have no -f FILE", c.Name, c.Args)
	file := c.Args[i+1]
	require.Equal(t, configPath, file, "container %s: the image's CMD and the docs use %s", c.Name, configPath)
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if m.SubPath != "" {
			require.Equal(t, m.MountPath, file, "subPath mount")
			rel = m.SubPath
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			require.NotNil(t, v.ConfigMap, "volume %s holding %s must be a ConfigMap", v.Name, file)
			key := rel
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			cm := r.configMap(ns, v.ConfigMap.Name)
			require.NotNil(t, cm, "ConfigMap %s/%s (volume %s) is not in the rendering", ns, v.ConfigMap.Name, v.Name)
			data, ok := cm.Data[key]
			require.True(t, ok, "ConfigMap %s has no key %q", cm.Name, key)
			return data, cm.Name
		}
		t.Fatalf("container %s mounts volume %s, which the pod does not declare", c.Name, m.Name)
	}
	t.Fatalf("container %s: nothing is mounted at %s", c.Name, file)
	return "", ""
}

// containerEnv is the environment c would get, with the Secret template's placeholders
// for secretKeyRefs.
func containerEnv(t *testing.T, r *rendering, ns string, c *corev1.Container) []string {
	t.Helper()
	require.Empty(t, c.EnvFrom, "container %s: envFrom hides which variables it sets; list them with secretKeyRef", c.Name)
	var env []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			v, ok := r.secretValue(e.ValueFrom.SecretKeyRef)
			if !ok && e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional {
				continue
			}
			require.True(t, ok, "container %s env %s: secretKeyRef %s/%s is not in %s/secret.template.yaml",
				c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, r.dir)
			env = append(env, e.Name+"="+v)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cm := r.configMap(ns, e.ValueFrom.ConfigMapKeyRef.Name)
			require.NotNil(t, cm, "container %s env %s: ConfigMap %s not rendered", c.Name, e.Name, e.ValueFrom.ConfigMapKeyRef.Name)
			v, ok := cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			require.True(t, ok, "container %s env %s: no key %s", c.Name, e.Name, e.ValueFrom.ConfigMapKeyRef.Key)
			env = append(env, e.Name+"="+v)
		default: // fieldRef, resourceFieldRef: known only at run time
			env = append(env, e.Name+"=placeholder")
		}
	}
	return env
}

func checkConfig(t *testing.T, a *app) {
	levels := lookup(a.rawConfig, []string{"scheduler", "levels"})
	require.NotNil(t, levels, "the ConfigMap must set scheduler.levels explicitly: it has to match the brokers")
	require.Equal(t, brokerMessageDelayLevel, levels, "scheduler.levels in the ConfigMap")
	require.Equal(t, brokerMessageDelayLevel, stringAt(t, a.effective, "scheduler", "levels"),
		"effective scheduler.levels must equal the brokers' messageDelayLevel")
	// The Job loads the same file with its own environment, only the sections `migrate`
	// uses: the real command must get as far as connecting to Postgres.
	data, name := configFile(t, a.r, a.job.Namespace, &a.job.Spec.Template.Spec, a.migrate)
	_, deployCM := configFile(t, a.r, a.deploy.Namespace, &a.deploy.Spec.Template.Spec, a.container)
	require.Equal(t, deployCM, name, "the Job must migrate with the Deployment's config")
	migrateCheck(t, data, containerEnv(t, a.r, a.job.Namespace, a.migrate))
}

// secretRefs returns the environment variables the config's secrets point at
// ("env:NAME"), found where the effective config prints "<secret>".
func secretRefs(a *app) map[string]string {
	refs := map[string]string{}
	walk(a.effective, nil, func(p []string, v any) {
		if v != "<secret>" {
			return
		}
		if raw, ok := lookup(a.rawConfig, p).(string); ok {
			if name, ok := strings.CutPrefix(raw, "env:"); ok {
				refs[name] = strings.Join(p, ".")
			}
		}
	})
	return refs
}

// checkEnv: the Deployment's container sets what `serve` reads, the Job's what `migrate`
// reads (the log and postgres sections), and neither sets anything else.
func checkEnv(t *testing.T, a *app, binary map[string]binaryEnvVar) {
	refs := secretRefs(a)
	for _, c := range []*corev1.Container{a.container, a.migrate} {
		// reads says whether the container's command reads the config key.
		reads := func(string) bool { return true }
		if c == a.migrate {
			reads = inMigrateSections
		}
		have := map[string]bool{}
		for _, e := range c.Env {
			bv, known := binary[e.Name]
			key, ref := refs[e.Name]
			require.True(t, known || ref, "container %s sets %s, which the binary does not read: not in config.EnvVars and not an env: reference of the config", c.Name, e.Name)
			if !ref {
				key = bv.key
			}
			require.True(t, reads(key), "container %s sets %s (%s), which `%s` does not read", c.Name, e.Name, key, c.Args[0])
			require.False(t, have[e.Name], "container %s sets %s twice", c.Name, e.Name)
			have[e.Name] = true
			if bv.secret || ref {
				require.True(t, e.Value == "" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil,
					"container %s: %s is a secret; it must come from a Secret (secretKeyRef)", c.Name, e.Name)
			}
		}
		for name, key := range refs {
			if reads(key) {
				require.True(t, have[name], "container %s: the config's %s reads env:%s, which the container does not set", c.Name, key, name)
			}
		}
	}
	for _, name := range []string{"ROCKETDELAY_REDIS_URL", "ROCKETDELAY_POSTGRES_URL", "ROCKETDELAY_ADMIN_TOKEN"} {
		require.True(t, slices.ContainsFunc(a.container.Env, func(e corev1.EnvVar) bool { return e.Name == name }),
			"the Deployment must set %s from the Secret", name)
	}
	require.True(t, slices.ContainsFunc(a.migrate.Env, func(e corev1.EnvVar) bool { return e.Name == "ROCKETDELAY_POSTGRES_URL" }),
		"the Job must set ROCKETDELAY_POSTGRES_URL from the Secret")
}

// httpPort is the port of the effective http.addr.
func httpPort(t *testing.T, a *app) int32 {
	addr := stringAt(t, a.effective, "http", "addr")
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return int32(n)
}

// resolvePort returns the container port a probe or Service targets.
func resolvePort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

func checkProbes(t *testing.T, a *app) {
	port := httpPort(t, a)
	c := a.container
	named := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" })
	require.GreaterOrEqual(t, named, 0, "the container needs a port named http")
	require.Equal(t, port, c.Ports[named].ContainerPort, "port http must be the port of http.addr")
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		paths []string
	}{
		{"readinessProbe", c.ReadinessProbe, []string{"/readyz"}},
		{"livenessProbe", c.LivenessProbe, []string{"/healthz"}},
		{"startupProbe", c.StartupProbe, []string{"/healthz", "/readyz"}},
	} {
		if p.probe == nil && p.name == "startupProbe" {
			continue
		}
		require.NotNil(t, p.probe, p.name)
		require.NotNil(t, p.probe.HTTPGet, "%s must be an httpGet", p.name)
		require.Contains(t, p.paths, p.probe.HTTPGet.Path, p.name)
		require.Equal(t, port, resolvePort(t, c, p.probe.HTTPGet.Port), "%s must hit http.addr's port", p.name)
		require.Contains(t, []corev1.URIScheme{"", corev1.URISchemeHTTP}, p.probe.HTTPGet.Scheme, p.name)
		// /readyz answers within its own 2s budget.
		if p.probe.TimeoutSeconds != 0 {
			require.GreaterOrEqual(t, p.probe.TimeoutSeconds, int32(3), "%s timeoutSeconds", p.name)
		}
	}
	ann := a.deploy.Spec.Template.Annotations
	require.Equal(t, "true", ann["prometheus.io/scrape"])
	require.Equal(t, strconv.Itoa(int(port)), ann["prometheus.io/port"])
	require.Equal(t, "/metrics", ann["prometheus.io/path"])
}

func checkDeployment(t *testing.T, a *app) {
	d := a.deploy
	require.NotNil(t, d.Spec.Replicas)
	require.GreaterOrEqual(t, *d.Spec.Replicas, int32(2), "at least 2 replicas: the sweeper of one takes over a dead one's alerts")
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)))

	shutdown := durationAt(t, a.effective, "shutdownTimeout")
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	require.NotNil(t, grace, "terminationGracePeriodSeconds must be set (the default 30s is not longer than shutdownTimeout)")
	require.GreaterOrEqual(t, time.Duration(*grace)*time.Second, shutdown+shutdownMargin,
		"terminationGracePeriodSeconds (%ds) must exceed shutdownTimeout (%s) by %s", *grace, shutdown, shutdownMargin)

	aff := d.Spec.Template.Spec.Affinity
	require.True(t, aff != nil && aff.PodAntiAffinity != nil, "pod anti-affinity by hostname")
	ok := false
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		s, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
		require.NoError(t, err)
		if w.PodAffinityTerm.TopologyKey == corev1.LabelHostname && s.Matches(labels.Set(d.Spec.Template.Labels)) {
			ok = true
		}
	}
	require.True(t, ok, "a preferred podAntiAffinity term with topologyKey %s selecting the Deployment's own pods", corev1.LabelHostname)

	require.Empty(t, a.container.Command, "the image's ENTRYPOINT (/rocketdelay) runs; only args are set")
	require.Equal(t, []string{"serve", "-f", configPath}, a.container.Args)
	require.Equal(t, a.container.Image, a.migrate.Image, "the Job must migrate with the image it deploys")
	require.Regexp(t, `^[^@]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$`, a.container.Image, "pin a tag or digest")
	require.NotContains(t, a.container.Image, ":latest")
}

// checkService: one Service targets the internal port http; with http.publicAddr
// another targets the public port and nothing else, and the internal one never does.
func checkService(t *testing.T, a *app) {
	var internal, public *corev1.Service
	for _, s := range objectsOf[*corev1.Service](a.r) {
		if s.Namespace != a.deploy.Namespace || len(s.Spec.Selector) == 0 ||
			!labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(a.deploy.Spec.Template.Labels)) {
			continue
		}
		require.False(t, labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(a.job.Spec.Template.Labels)),
			"Service %s must not select the migration Job's pod", s.Name)
		require.Contains(t, []corev1.ServiceType{"", corev1.ServiceTypeClusterIP}, s.Spec.Type, s.Name)
		targets := map[string]bool{}
		for _, p := range s.Spec.Ports {
			require.Equal(t, intstr.String, p.TargetPort.Type, "Service %s targets named ports", s.Name)
			targets[p.TargetPort.StrVal] = true
		}
		switch {
		case targets["public"]:
			require.Nil(t, public, "two public Services")
			require.Equal(t, map[string]bool{"public": true}, targets, "Service %s: the public port and nothing else", s.Name)
			public = s
		default:
			require.Nil(t, internal, "two Services select the scheduler pods")
			require.True(t, targets["http"], "the Service must target the named container port http")
			internal = s
		}
	}
	require.NotNil(t, internal, "a Service must select the Deployment's pods")
	port := httpPort(t, a)
	for _, p := range internal.Spec.Ports {
		if p.TargetPort.StrVal == "http" {
			require.Equal(t, port, resolvePort(t, a.container, p.TargetPort))
		}
	}
	if addr, ok := lookup(a.effective, []string{"http", "publicAddr"}).(string); ok && addr != "" {
		require.NotNil(t, public, "http.publicAddr is set: a Service targets the public port")
		_, p, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		require.Equal(t, p, strconv.Itoa(int(resolvePort(t, a.container, intstr.FromString("public")))), "the port named public is http.publicAddr's")
	}
}

// checkNetworkPolicy: a NetworkPolicy selects the scheduler pods for both directions; the
// internal port is reached only from the peers it names, the public one from anywhere;
// out, DNS is allowed.
func checkNetworkPolicy(t *testing.T, a *app) {
	np := schedulerPolicy(t, a)
	require.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			require.NotNil(t, p.Port)
			if p.Port.StrVal == "http" {
				require.NotEmpty(t, rule.From, "the internal port is reached only from named peers")
			}
		}
	}
	dns := false
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.IntValue() == 53 {
				dns = true
			}
		}
	}
	require.True(t, dns, "egress allows DNS")
}

// schedulerPolicy returns the one NetworkPolicy that selects the scheduler pods.
func schedulerPolicy(t *testing.T, a *app) *networkingv1.NetworkPolicy {
	t.Helper()
	var np *networkingv1.NetworkPolicy
	for _, p := range objectsOf[*networkingv1.NetworkPolicy](a.r) {
		s, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		require.NoError(t, err)
		if p.Namespace == a.deploy.Namespace && !s.Empty() && s.Matches(labels.Set(a.deploy.Spec.Template.Labels)) {
			if np != nil {
				t.Fatalf("two NetworkPolicies select the scheduler pods (%s, %s): keep one", np.Name, p.Name)
			}
			np = p
		}
	}
	require.NotNil(t, np, "a NetworkPolicy selects the scheduler pods")
	return np
}

// httpPeers returns the peers the scheduler pods' NetworkPolicy lets in to the internal
// port (http, by name or number).
func httpPeers(t *testing.T, a *app) []networkingv1.NetworkPolicyPeer {
	t.Helper()
	port := httpPort(t, a)
	var peers []networkingv1.NetworkPolicyPeer
	for _, rule := range schedulerPolicy(t, a).Spec.Ingress {
		if slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && (p.Port.StrVal == "http" || p.Port.Type == intstr.Int && p.Port.IntVal == port)
		}) {
			peers = append(peers, rule.From...)
		}
	}
	return peers
}

func checkPDB(t *testing.T, a *app) {
	var pdb *policyv1.PodDisruptionBudget
	for _, p := range objectsOf[*policyv1.PodDisruptionBudget](a.r) {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		require.NoError(t, err)
		if p.Namespace == a.deploy.Namespace && s.Matches(labels.Set(a.deploy.Spec.Template.Labels)) {
			require.False(t, s.Matches(labels.Set(a.job.Spec.Template.Labels)), "the PDB must not select the migration Job's pod")
			pdb = p
		}
	}
	require.NotNil(t, pdb, "a PodDisruptionBudget must select the Deployment's pods")
	require.NotNil(t, pdb.Spec.MinAvailable)
	require.Equal(t, intstr.Int, pdb.Spec.MinAvailable.Type)
	require.GreaterOrEqual(t, pdb.Spec.MinAvailable.IntVal, int32(1))
	require.Less(t, pdb.Spec.MinAvailable.IntVal, *a.deploy.Spec.Replicas, "minAvailable must leave room for a drain")
}

func checkJob(t *testing.T, a *app) {
	require.Empty(t, a.migrate.Command)
	require.Equal(t, []string{"migrate", "up", "-f", configPath}, a.migrate.Args)
	require.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure}, a.job.Spec.Template.Spec.RestartPolicy)
	require.NotNil(t, a.job.Spec.BackoffLimit)
	require.Equal(t, a.deploy.Namespace, a.job.Namespace)
}

// checkPods holds every pod template of the rendering to the restricted profile, and
// requires requests and limits.
func checkPods(t *testing.T, r *rendering) {
	type pod struct {
		what string
		spec *corev1.PodSpec
	}
	var pods []pod
	for _, d := range objectsOf[*appsv1.Deployment](r) {
		pods = append(pods, pod{"Deployment " + d.Name, &d.Spec.Template.Spec})
	}
	for _, s := range objectsOf[*appsv1.StatefulSet](r) {
		pods = append(pods, pod{"StatefulSet " + s.Name, &s.Spec.Template.Spec})
	}
	for _, j := range objectsOf[*batchv1.Job](r) {
		pods = append(pods, pod{"Job " + j.Name, &j.Spec.Template.Spec})
	}
	for _, p := range pods {
		psc := p.spec.SecurityContext
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		require.False(t, p.spec.HostNetwork || p.spec.HostPID || p.spec.HostIPC, p.what)
		for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			what := fmt.Sprintf("%s container %s", p.what, c.Name)
			sc := c.SecurityContext
			require.NotNil(t, sc, what)
			nonRoot := sc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = psc.RunAsNonRoot
			}
			require.True(t, nonRoot != nil && *nonRoot, "%s: runAsNonRoot", what)
			for _, uid := range []*int64{psc.RunAsUser, sc.RunAsUser} {
				require.True(t, uid == nil || *uid != 0, "%s: runAsUser 0", what)
			}
			require.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", what)
			require.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation false", what)
			require.True(t, sc.Privileged == nil || !*sc.Privileged, "%s: privileged", what)
			require.True(t, sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL"), "%s: capabilities drop ALL", what)
			require.Empty(t, sc.Capabilities.Add, "%s: capabilities add", what)
			seccomp := sc.SeccompProfile
			if seccomp == nil {
				seccomp = psc.SeccompProfile
			}
			require.True(t, seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault, "%s: seccompProfile RuntimeDefault", what)
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[res]
				lim, okLim := c.Resources.Limits[res]
				require.True(t, okReq && okLim, "%s: %s request and limit", what, res)
				require.LessOrEqual(t, req.Cmp(lim), 0, "%s: %s request above limit", what, res)
			}
		}
	}
}

var (
	// dsnWithPassword matches scheme://user:password@…
	dsnWithPassword = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@`)
	accessToken     = regexp.MustCompile(`access_token=[^&\s"']+`)
	signingSecret   = regexp.MustCompile(`\bSEC[0-9a-f]{32,}\b`)
	redisAuthLine   = regexp.MustCompile(`(?im)^\s*(requirepass|masterauth)\s+\S+`)
)

func looksSecret(s string) bool {
	return dsnWithPassword.MatchString(s) || accessToken.MatchString(s) || signingSecret.MatchString(s) || redisAuthLine.MatchString(s)
}

func checkNoInlineSecrets(t *testing.T, a *app) {
	require.Empty(t, objectsOf[*corev1.Secret](a.r),
		"no Secret in the rendering: applying it would overwrite the real one (secret.template.yaml is separate)")
	// The config's secrets are references (env:/file:) or absent, never values.
	walk(a.effective, nil, func(p []string, v any) {
		if v != "<secret>" {
			return
		}
		raw, _ := lookup(a.rawConfig, p).(string)
		require.True(t, raw == "" || strings.HasPrefix(raw, "env:") || strings.HasPrefix(raw, "file:"),
			"the ConfigMap holds the secret %s inline; use env:NAME and a secretKeyRef", strings.Join(p, "."))
	})
	for _, cm := range objectsOf[*corev1.ConfigMap](a.r) {
		for k, v := range cm.Data {
			require.False(t, looksSecret(v), "ConfigMap %s key %s holds what looks like a secret", cm.Name, k)
		}
	}
	each := func(what string, meta metav1.ObjectMeta, tmpl metav1.ObjectMeta, spec *corev1.PodSpec) {
		for _, m := range []map[string]string{meta.Annotations, tmpl.Annotations} {
			for k, v := range m {
				require.False(t, looksSecret(v), "%s annotation %s", what, k)
			}
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			for _, e := range c.Env {
				require.False(t, looksSecret(e.Value), "%s container %s env %s holds what looks like a secret", what, c.Name, e.Name)
			}
			args := append(slices.Clone(c.Command), c.Args...)
			for i, arg := range args {
				require.False(t, looksSecret(arg), "%s container %s arg %d", what, c.Name, i)
				if (arg == "--requirepass" || arg == "--masterauth") && i+1 < len(args) {
					require.Regexp(t, `^\$\([A-Z_][A-Z0-9_]*\)$`, args[i+1], "%s container %s: %s takes a $(VAR) from a secretKeyRef", what, c.Name, arg)
				}
			}
		}
	}
	for _, d := range objectsOf[*appsv1.Deployment](a.r) {
		each("Deployment "+d.Name, d.ObjectMeta, d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec)
	}
	for _, s := range objectsOf[*appsv1.StatefulSet](a.r) {
		each("StatefulSet "+s.Name, s.ObjectMeta, s.Spec.Template.ObjectMeta, &s.Spec.Template.Spec)
	}
	for _, j := range objectsOf[*batchv1.Job](a.r) {
		each("Job "+j.Name, j.ObjectMeta, j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec)
	}
}

// checkSecretTemplate: placeholders only, and exactly the keys the manifests reference.
func checkSecretTemplate(t *testing.T, r *rendering) {
	s := r.secret
	keys := map[string]string{}
	for k, v := range s.StringData {
		keys[k] = v
	}
	for k, v := range s.Data {
		keys[k] = string(v)
	}
	require.NotEmpty(t, keys)
	for k, v := range keys {
		require.Contains(t, v, secretPlaceholder, "%s/secret.template.yaml key %s: a template holds placeholders only", r.dir, k)
	}
	used := map[string]bool{}
	var specs []*corev1.PodSpec
	for _, d := range objectsOf[*appsv1.Deployment](r) {
		specs = append(specs, &d.Spec.Template.Spec)
	}
	for _, st := range objectsOf[*appsv1.StatefulSet](r) {
		specs = append(specs, &st.Spec.Template.Spec)
	}
	for _, j := range objectsOf[*batchv1.Job](r) {
		specs = append(specs, &j.Spec.Template.Spec)
	}
	for _, spec := range specs {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					require.Equal(t, s.Name, ref.Name, "container %s env %s: the manifests use one Secret, %s", c.Name, e.Name, s.Name)
					_, ok := keys[ref.Key]
					require.True(t, ok, "container %s env %s: key %s is missing from %s/secret.template.yaml", c.Name, e.Name, ref.Key, r.dir)
					used[ref.Key] = true
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				require.Equal(t, s.Name, v.Secret.SecretName)
				for _, it := range v.Secret.Items {
					used[it.Key] = true
				}
			}
		}
	}
	for k := range keys {
		require.True(t, used[k], "%s/secret.template.yaml key %s is referenced by no container", r.dir, k)
	}
}

// redisInCluster checks the Redis the Secret template's ROCKETDELAY_REDIS_URL points at,
// when it is a Service of the rendering: a StatefulSet with a persistent volume at its
// data directory and AOF fsynced every second or every write (every write when
// redis.durability is fsync), never evicting. It reports whether
// the Redis is in the rendering at all.
func redisInCluster(t *testing.T, a *app) bool {
	raw, ok := a.r.secretValue(&corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: a.r.secret.Name}, Key: "ROCKETDELAY_REDIS_URL"})
	require.True(t, ok)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	var svc *corev1.Service
	for _, s := range objectsOf[*corev1.Service](a.r) {
		ns := s.Namespace
		for _, name := range []string{s.Name, s.Name + "." + ns, s.Name + "." + ns + ".svc", s.Name + "." + ns + ".svc.cluster.local"} {
			if u.Hostname() == name {
				svc = s
			}
		}
	}
	if svc == nil {
		t.Logf("%s: Redis %s is outside this rendering; it must run with appendonly yes, appendfsync everysec (always for redis.durability fsync), maxmemory-policy noeviction", a.r.dir, u.Hostname())
		return false
	}
	var sts *appsv1.StatefulSet
	for _, s := range objectsOf[*appsv1.StatefulSet](a.r) {
		if s.Namespace == svc.Namespace && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
			sts = s
		}
	}
	require.NotNil(t, sts, "Service %s (the Redis URL's host) must select a StatefulSet's pods", svc.Name)
	require.NotEmpty(t, sts.Spec.VolumeClaimTemplates, "the Redis StatefulSet needs a PersistentVolumeClaim")
	require.Equal(t, int32(1), *sts.Spec.Replicas, "one Redis primary: replicas of a StatefulSet are not replicas of Redis")
	var c *corev1.Container
	for i := range sts.Spec.Template.Spec.Containers {
		if cc := &sts.Spec.Template.Spec.Containers[i]; len(cc.Args) > 0 && cc.Args[0] == "redis-server" {
			c = cc
		}
	}
	require.NotNil(t, c, "no container runs redis-server")
	conf := map[string]string{}
	args := c.Args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
		data := mountedFile(t, a.r, sts.Namespace, &sts.Spec.Template.Spec, c, args[0])
		for _, line := range strings.Split(data, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
				conf[strings.ToLower(f[0])] = strings.Join(f[1:], " ")
			}
		}
		args = args[1:]
	}
	for i := 0; i+1 < len(args); i += 2 {
		conf[strings.ToLower(strings.TrimPrefix(args[i], "--"))] = args[i+1]
	}
	require.Equal(t, "yes", conf["appendonly"], "Redis must persist with AOF")
	require.Contains(t, []string{"everysec", "always"}, conf["appendfsync"], "Redis AOF must fsync every second or every write")
	if redisCfg, _ := a.effective["redis"].(map[string]any); redisCfg["durability"] == "fsync" {
		require.Equal(t, "always", conf["appendfsync"], "redis.durability fsync needs appendfsync always")
	}
	require.Equal(t, "noeviction", conf["maxmemory-policy"], "Redis must never evict alerts")
	dir := conf["dir"]
	require.NotEmpty(t, dir, "set Redis's dir to the persistent volume")
	onPVC := false
	for _, m := range c.VolumeMounts {
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			if m.Name == vct.Name && path.Clean(m.MountPath) == path.Clean(dir) {
				onPVC = true
			}
		}
	}
	require.True(t, onPVC, "Redis's dir %s must be the PersistentVolumeClaim's mount", dir)
	return true
}

// mountedFile returns the content of file as mounted into c from a ConfigMap.
func mountedFile(t *testing.T, r *rendering, ns string, spec *corev1.PodSpec, c *corev1.Container, file string) string {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm := r.configMap(ns, v.ConfigMap.Name)
				require.NotNil(t, cm, "ConfigMap %s", v.ConfigMap.Name)
				data, ok := cm.Data[rel]
				require.True(t, ok, "ConfigMap %s has no %s", cm.Name, rel)
				return data
			}
		}
	}
	t.Fatalf("%s is not mounted from a ConfigMap in container %s", file, c.Name)
	return ""
}

// Helpers for the generic YAML trees.

func walk(v any, p []string, fn func([]string, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			walk(x, append(slices.Clone(p), k), fn)
		}
	case []any:
		for i, x := range v {
			walk(x, append(slices.Clone(p), strconv.Itoa(i)), fn)
		}
	default:
		fn(p, v)
	}
}

func lookup(v any, p []string) any {
	for _, k := range p {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func stringAt(t *testing.T, tree map[string]any, p ...string) string {
	s, ok := lookup(tree, p).(string)
	require.True(t, ok, "%s is not a string in the effective config", strings.Join(p, "."))
	return s
}

func stringsAt(t *testing.T, tree map[string]any, p ...string) []string {
	l, ok := lookup(tree, p).([]any)
	require.True(t, ok, "%s is not a list in the effective config", strings.Join(p, "."))
	out := make([]string, len(l))
	for i, x := range l {
		out[i], ok = x.(string)
		require.True(t, ok)
	}
	return out
}

func durationAt(t *testing.T, tree map[string]any, p ...string) time.Duration {
	d, err := time.ParseDuration(stringAt(t, tree, p...))
	require.NoError(t, err)
	return d
}
