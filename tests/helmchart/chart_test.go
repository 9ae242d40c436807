package helmchart

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// chartDir is $MCPBUS_HELM_CHART (libs/helmtest sets it: the binary is
// cached and may outlive the checkout it was built in), else the chart next
// to this file.
func chartDir(t *testing.T) string {
	if dir := os.Getenv("MCPBUS_HELM_CHART"); dir != "" {
		return dir
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "helm", "mcpbus")
}

// render is `helm template` of the chart with vals over its values.yaml.
func render(t *testing.T, vals map[string]any) []string {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "rel", Namespace: "mcpbus", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var docs []string
	for name, text := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, d := range strings.Split(text, "\n---") {
			if strings.TrimSpace(d) != "" && strings.Contains(d, "kind:") {
				docs = append(docs, d)
			}
		}
	}
	return docs
}

// TestChartGatewayAffinity: with more than one gateway replica the
// gateway's Service keeps a client on one pod (its MCP session lives there);
// with one it sets no affinity.
func TestChartGatewayAffinity(t *testing.T) {
	for replicas, want := range map[int]corev1.ServiceAffinity{1: "", 3: corev1.ServiceAffinityClientIP} {
		docs := render(t, map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222",
			"services": map[string]any{"gateway": map[string]any{"replicas": replicas}}})
		strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
		found := false
		for _, d := range docs {
			obj, _, err := strict.Decode([]byte(d), nil, nil)
			if err != nil {
				t.Fatalf("invalid manifest: %v\n%s", err, d)
			}
			if svc, ok := obj.(*corev1.Service); ok {
				found = true
				if svc.Spec.SessionAffinity != want {
					t.Errorf("%d gateway replicas: sessionAffinity %q, want %q", replicas, svc.Spec.SessionAffinity, want)
				}
			}
		}
		if !found {
			t.Fatalf("%d gateway replicas: no Service", replicas)
		}
	}
}

// TestChartGatewayPreStop: the gateway's pod waits before its SIGTERM (which
// closes the listener at once) so that the Service stops sending it new
// connections first; no other pod does.
func TestChartGatewayPreStop(t *testing.T) {
	docs := render(t, map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222"})
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	for _, d := range docs {
		obj, _, err := strict.Decode([]byte(d), nil, nil)
		if err != nil {
			t.Fatalf("invalid manifest: %v\n%s", err, d)
		}
		dep, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		name := dep.Labels["app.kubernetes.io/name"]
		lc := dep.Spec.Template.Spec.Containers[0].Lifecycle
		switch {
		case name == "gateway" && (lc == nil || lc.PreStop == nil || lc.PreStop.Sleep == nil || lc.PreStop.Sleep.Seconds != 5):
			t.Errorf("gateway: lifecycle %+v, want a preStop sleep of 5 s", lc)
		case name != "gateway" && lc != nil:
			t.Errorf("%s: lifecycle %+v, want none", name, lc)
		}
	}
}

// TestChartRenders: without the nats dependency (not downloaded here) the
// chart renders valid Deployments, a Service and NetworkPolicies: each manifest decodes strictly
// (no unknown or duplicate field) into its API type.
func TestChartRenders(t *testing.T) {
	docs := render(t, map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222"})
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	deploys := map[string]*appsv1.Deployment{}
	var services int
	for _, d := range docs {
		obj, _, err := strict.Decode([]byte(d), nil, nil)
		if err != nil {
			t.Fatalf("invalid manifest: %v\n%s", err, d)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			deploys[o.Labels["app.kubernetes.io/name"]] = o
		case *corev1.Service:
			services++
		case *networkingv1.NetworkPolicy: // TestChartNetworkPolicies
		default:
			t.Errorf("unexpected %T", obj)
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range deploys {
			if !yield(k) {
				return
			}
		}
	})
	if want := []string{"chat", "config", "credential", "gateway", "registry", "runner"}; !slices.Equal(names, want) || services != 1 {
		t.Fatalf("deployments %v, services %d; want %v and the gateway's", names, services, want)
	}
	for name, d := range deploys {
		c := d.Spec.Template.Spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: security context %+v", name, sc)
		}
		wantAdd := []corev1.Capability(nil)
		if name == "runner" {
			wantAdd = []corev1.Capability{"SETUID", "SETGID", "KILL"}
		}
		if !slices.Equal(sc.Capabilities.Add, wantAdd) {
			t.Errorf("%s: adds %v, want %v", name, sc.Capabilities.Add, wantAdd)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: readiness probe %+v", name, c.ReadinessProbe)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["MCPBUS_NATS_URL"] != "nats://nats:4222" {
			t.Errorf("%s: MCPBUS_NATS_URL %q", name, env["MCPBUS_NATS_URL"])
		}
		var identity string
		for _, m := range c.VolumeMounts {
			if m.Name == "identity" {
				identity = m.MountPath
			}
		}
		// Its own seed only: the identities Secret is projected key by key.
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != "identity" {
				continue
			}
			var keys bool
			for _, it := range v.Secret.Items {
				switch {
				case name == "gateway" && it.Key == "audit-keys.env":
					keys = it.Path == filepath.Base(env["MCPBUS_AUDIT_KEYS"]) && filepath.Dir(env["MCPBUS_AUDIT_KEYS"]) == identity
				case !strings.HasPrefix(it.Key, name) || !strings.HasSuffix(it.Key, ".nk"):
					t.Errorf("%s mounts the seed %s", name, it.Key)
				}
			}
			if name == "gateway" && !keys {
				t.Errorf("gateway: no audit keys mounted where MCPBUS_AUDIT_KEYS (%q) says: %v", env["MCPBUS_AUDIT_KEYS"], v.Secret.Items)
			}
			if len(v.Secret.Items) != int(*d.Spec.Replicas) && name == "runner" || len(v.Secret.Items) == 0 {
				t.Errorf("%s: seeds %v", name, v.Secret.Items)
			}
		}
	}
}

// TestChartDependsOnNATS: NATS comes from the official chart, switched by nats.enabled.
func TestChartDependsOnNATS(t *testing.T) {
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range ch.Metadata.Dependencies {
		if d.Name == "nats" && d.Repository == "https://nats-io.github.io/k8s/helm/charts/" && d.Condition == "nats.enabled" {
			found = true
		}
	}
	if !found {
		t.Fatalf("dependencies %+v: want the official nats chart", ch.Metadata.Dependencies)
	}
	// With it enabled (and not downloaded) every replica is given every node
	// of its cluster, by pod name under the headless service.
	all := "nats://rel-nats-0.rel-nats-headless:4222,nats://rel-nats-1.rel-nats-headless:4222,nats://rel-nats-2.rel-nats-headless:4222"
	for _, d := range render(t, nil) {
		if strings.Contains(d, "MCPBUS_NATS_URL") && !strings.Contains(d, all) {
			t.Fatalf("MCPBUS_NATS_URL not the nats cluster's nodes:\n%s", d)
		}
	}
	// Without a cluster, its client service.
	single := map[string]any{"nats": map[string]any{"config": map[string]any{"cluster": map[string]any{"enabled": false}}}}
	for _, d := range render(t, single) {
		if strings.Contains(d, "MCPBUS_NATS_URL") && !strings.Contains(d, "nats://rel-nats:4222\"") {
			t.Fatalf("MCPBUS_NATS_URL not the nats chart's service:\n%s", d)
		}
	}
}

// TestChartHardening: every pod runs as a non-root user under the runtime's
// default seccomp profile (a Pod that names none runs Unconfined on most
// kubelets, where docker compose gets the engine's default), shares no host
// namespace, mounts no host path nor the service account token, and has
// memory and CPU limits; the runner's pod has an init (its pause process)
// that reaps orphans; no container is privileged, adds CAP_SYS_ADMIN or
// leaves seccomp; only the runner may gain privileges at exec (its binary's
// file capabilities switch MCP servers to another uid).
func TestChartHardening(t *testing.T) {
	docs := render(t, map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222"})
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var n int
	for _, d := range docs {
		obj, _, err := strict.Decode([]byte(d), nil, nil)
		if err != nil {
			t.Fatalf("invalid manifest: %v\n%s", err, d)
		}
		dep, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		n++
		name := dep.Labels["app.kubernetes.io/name"]
		pod := dep.Spec.Template.Spec
		psc := pod.SecurityContext
		switch {
		case psc == nil:
			t.Errorf("%s: no pod security context", name)
			continue
		case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s: pod seccompProfile %+v, want RuntimeDefault", name, psc.SeccompProfile)
		}
		if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: runAsNonRoot %v runAsUser %v, want a non-root user", name, psc.RunAsNonRoot, psc.RunAsUser)
		}
		if pod.HostNetwork || pod.HostPID || pod.HostIPC {
			t.Errorf("%s: shares a host namespace (network %v, pid %v, ipc %v)", name, pod.HostNetwork, pod.HostPID, pod.HostIPC)
		}
		// The runner's orphaned grandchildren need an init that reaps them:
		// the pod's pause process (compose: init: true).
		if shares := pod.ShareProcessNamespace != nil && *pod.ShareProcessNamespace; shares != (name == "runner") {
			t.Errorf("%s: shareProcessNamespace %v, want it on the runner alone", name, shares)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: mounts the service account token", name)
		}
		for _, v := range pod.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: mounts the host path %s", name, v.HostPath.Path)
			}
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s/%s: no security context", name, c.Name)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s/%s: privileged", name, c.Name)
			}
			if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s/%s: seccompProfile %+v", name, c.Name, sc.SeccompProfile)
			}
			if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") {
				t.Errorf("%s/%s: adds SYS_ADMIN", name, c.Name)
			}
			escalates := sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation
			if escalates != (name == "runner" && c.Name == "runner") {
				t.Errorf("%s/%s: allowPrivilegeEscalation %v", name, c.Name, sc.AllowPrivilegeEscalation)
			}
			// Root only where the runner's data dir is given to it, with
			// CAP_CHOWN alone (TestChartRunnerPrivateDirs).
			root := sc.RunAsUser != nil && *sc.RunAsUser == 0 || sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot
			if root && (name != "runner" || c.Name != "private-dirs" || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN"})) {
				t.Errorf("%s/%s: runs as root (capabilities %+v)", name, c.Name, sc.Capabilities)
			}
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
				t.Errorf("%s/%s: limits %v, want memory and cpu", name, c.Name, c.Resources.Limits)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Deployment rendered")
	}
}

// TestChartRunnerPrivateDirs: an emptyDir is made 0777 and root's, so MCP
// servers (another uid) could replace what the runner keeps in its data dir
// where Landlock is missing, and the runner refuses such a data dir. The
// runner's pod gives it the dir (0700, the pod's uid) and makes /tmp sticky
// first, as compose's tmpfs modes do, in an init container that mounts the
// very volumes the runner does and drops every capability but CHOWN.
func TestChartRunnerPrivateDirs(t *testing.T) {
	docs := render(t, map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222"})
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var pod *corev1.PodSpec
	for _, d := range docs {
		obj, _, err := strict.Decode([]byte(d), nil, nil)
		if err != nil {
			t.Fatalf("invalid manifest: %v\n%s", err, d)
		}
		if dep, ok := obj.(*appsv1.Deployment); ok && dep.Labels["app.kubernetes.io/name"] == "runner" {
			pod = &dep.Spec.Template.Spec
		}
	}
	if pod == nil {
		t.Fatal("no runner Deployment")
	}
	runner := pod.Containers[0]
	var dataDir string
	for _, e := range runner.Env {
		if e.Name == "MCPBUS_DATA_DIR" {
			dataDir = e.Value
		}
	}
	mounts := map[string]string{} // mount path -> volume, the runner's
	for _, m := range runner.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if dataDir == "" || mounts[dataDir] == "" || mounts["/tmp"] == "" {
		t.Fatalf("runner: data dir %q, mounts %v", dataDir, mounts)
	}
	uid, gid := *pod.SecurityContext.RunAsUser, *pod.SecurityContext.RunAsGroup
	if len(pod.InitContainers) != 1 {
		t.Fatalf("runner pod: init containers %+v, want the one that makes its dirs private", pod.InitContainers)
	}
	c := pod.InitContainers[0]
	script := strings.Join(c.Command, " ")
	for _, want := range []string{"chmod 01777 /tmp", "chmod 00700 " + dataDir, fmt.Sprintf("chown %d:%d %s", uid, gid, dataDir)} {
		if !strings.Contains(script, want) {
			t.Errorf("init %s: command %q does not %q", c.Name, script, want)
		}
	}
	if !strings.HasPrefix(script, "/bin/sh -ec ") {
		t.Errorf("init %s: command %q, want /bin/sh -ec (stop at the first failure)", c.Name, script)
	}
	for _, m := range c.VolumeMounts {
		if mounts[m.MountPath] != m.Name {
			t.Errorf("init %s mounts %s at %s, the runner %q", c.Name, m.Name, m.MountPath, mounts[m.MountPath])
		}
		delete(mounts, m.MountPath)
	}
	if mounts[dataDir] != "" || mounts["/tmp"] != "" {
		t.Errorf("init %s does not mount the data dir or /tmp: %v left", c.Name, mounts)
	}
	if c.Image != runner.Image {
		t.Errorf("init %s: image %q, want the runner's %q (it has sh, chmod, chown)", c.Name, c.Image, runner.Image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("init %s: security context %+v, want root with CAP_CHOWN alone, read-only root", c.Name, sc)
	}
}
