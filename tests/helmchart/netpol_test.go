package helmchart

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// The release's namespace in render.
const releaseNS = "mcpbus"

// endpoint is one end of a connection: a pod (labels, namespace) or, with
// no labels, an address outside the cluster's pods.
type endpoint struct {
	ip     string
	ns     string            // "" for an address outside the cluster
	labels map[string]string // pod labels
	nsLabs map[string]string // its namespace's labels
}

func pod(ip, ns string, l map[string]string) endpoint {
	return endpoint{ip: ip, ns: ns, labels: l, nsLabs: map[string]string{"kubernetes.io/metadata.name": ns}}
}

func external(ip string) endpoint { return endpoint{ip: ip} }

// peerMatches is NetworkPolicyPeer's meaning for e, seen from a policy in
// releaseNS: an ipBlock takes any address in its cidr but its excepts; pod
// and namespace selectors take pods only (a podSelector alone: the policy's
// namespace).
func peerMatches(t *testing.T, p networkingv1.NetworkPolicyPeer, e endpoint) bool {
	t.Helper()
	if p.IPBlock != nil {
		addr := netip.MustParseAddr(e.ip)
		if !netip.MustParsePrefix(p.IPBlock.CIDR).Contains(addr) {
			return false
		}
		for _, ex := range p.IPBlock.Except {
			if netip.MustParsePrefix(ex).Contains(addr) {
				return false
			}
		}
		return true
	}
	if e.ns == "" {
		return false
	}
	sel := func(ls *metav1.LabelSelector, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(labels.Set(l))
	}
	if p.NamespaceSelector == nil {
		if e.ns != releaseNS {
			return false
		}
	} else if !sel(p.NamespaceSelector, e.nsLabs) {
		return false
	}
	return p.PodSelector == nil || sel(p.PodSelector, e.labels)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, port int, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp == proto && (p.Port == nil || p.Port.IntValue() == port) {
			return true
		}
	}
	return false
}

func peersMatch(t *testing.T, peers []networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	return slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool { return peerMatches(t, p, e) })
}

// egressAllows: whether policy np lets its pods open port/proto on dst.
func egressAllows(t *testing.T, np *networkingv1.NetworkPolicy, dst endpoint, port int, proto corev1.Protocol) bool {
	t.Helper()
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		return true
	}
	for _, r := range np.Spec.Egress {
		if portMatches(r.Ports, port, proto) && peersMatch(t, r.To, dst) {
			return true
		}
	}
	return false
}

// ingressAllows: whether policy np lets src open port/proto on its pods.
func ingressAllows(t *testing.T, np *networkingv1.NetworkPolicy, src endpoint, port int, proto corev1.Protocol) bool {
	t.Helper()
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		return true
	}
	for _, r := range np.Spec.Ingress {
		if portMatches(r.Ports, port, proto) && peersMatch(t, r.From, src) {
			return true
		}
	}
	return false
}

// policies renders the chart with vals and returns its NetworkPolicies by
// the app.kubernetes.io/name of their metadata, and the Deployments' pod
// labels by service.
func policies(t *testing.T, vals map[string]any) (map[string]*networkingv1.NetworkPolicy, map[string]map[string]string) {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	nps, pods := map[string]*networkingv1.NetworkPolicy{}, map[string]map[string]string{}
	for _, d := range render(t, vals) {
		obj, _, err := strict.Decode([]byte(d), nil, nil)
		if err != nil {
			t.Fatalf("invalid manifest: %v\n%s", err, d)
		}
		switch o := obj.(type) {
		case *networkingv1.NetworkPolicy:
			name := o.Labels["app.kubernetes.io/name"]
			if nps[name] != nil {
				t.Fatalf("two NetworkPolicies for %s", name)
			}
			nps[name] = o
		case *appsv1.Deployment:
			pods[o.Labels["app.kubernetes.io/name"]] = o.Spec.Template.Labels
		}
	}
	return nps, pods
}

var mcpbusServices = []string{"config", "credential", "registry", "runner", "chat", "gateway"}

// The nats chart's server pods (its nats.selectorLabels), of release rel,
// and its nats-box pod.
var (
	natsPodLabels = map[string]string{"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "nats"}
	natsBoxLabels = map[string]string{"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "nats-box"}
)

// TestChartNetworkPolicies: by default every mcpbus pod (and the nats
// subchart's servers) is under a NetworkPolicy that gives the separation of
// compose's bus/edge networks: each service reaches the NATS servers' client
// port and kube-system's DNS; the runner (whose MCP servers share its pod's
// network), chat, registry, credential and gateway reach the internet but
// not the cloud metadata endpoint, in-cluster pods (Vault, other pods'
// metrics) or private addresses; only the credential service reaches Vault;
// config reaches nothing else; nothing reaches a pod but the gateway's port;
// the NATS servers admit their client port from the release's pods alone
// and their route port from one another.
func TestChartNetworkPolicies(t *testing.T) {
	nps, pods := policies(t, nil)
	if len(nps) != len(mcpbusServices)+1 || nps["nats"] == nil {
		t.Fatalf("NetworkPolicies for %v, want one per service and NATS's", slices.Sorted(func(yield func(string) bool) {
			for k := range nps {
				if !yield(k) {
					return
				}
			}
		}))
	}
	natsPod := pod("10.0.1.1", releaseNS, natsPodLabels)
	dnsPod := pod("10.96.0.10", "kube-system", map[string]string{"k8s-app": "kube-dns"})
	vaultPod := pod("10.0.2.2", "vault", map[string]string{"app.kubernetes.io/name": "vault"})
	metadata := external("169.254.169.254")
	internet, internet6 := external("93.184.216.34"), external("2606:2800:220:1::1")
	lan, lan6 := external("192.168.1.20"), external("fd00::20")
	cgnat, cluster := external("100.64.0.5"), external("172.20.0.9")

	for _, name := range mcpbusServices {
		np := nps[name]
		if np == nil {
			t.Errorf("%s: no NetworkPolicy", name)
			continue
		}
		// It selects the service's pods, and no other service's.
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		for other, l := range pods {
			if sel.Matches(labels.Set(l)) != (other == name) {
				t.Errorf("%s's policy selects %s's pods: %v", name, other, sel.Matches(labels.Set(l)))
			}
		}
		if sel.Matches(labels.Set(natsPodLabels)) || sel.Matches(labels.Set(natsBoxLabels)) {
			t.Errorf("%s's policy selects NATS's pods", name)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
			t.Errorf("%s: policyTypes %v", name, np.Spec.PolicyTypes)
		}

		// Egress.
		for _, c := range []struct {
			what  string
			dst   endpoint
			port  int
			proto corev1.Protocol
			want  bool
		}{
			{"NATS's client port", natsPod, 4222, corev1.ProtocolTCP, true},
			{"NATS's route port", natsPod, 6222, corev1.ProtocolTCP, false},
			{"NATS's monitor port", natsPod, 8222, corev1.ProtocolTCP, false},
			{"DNS (UDP)", dnsPod, 53, corev1.ProtocolUDP, true},
			{"DNS (TCP)", dnsPod, 53, corev1.ProtocolTCP, true},
			{"DNS elsewhere", external("10.3.3.3"), 53, corev1.ProtocolUDP, false},
			{"Vault", vaultPod, 8200, corev1.ProtocolTCP, name == "credential"},
			{"Vault's other ports", vaultPod, 8201, corev1.ProtocolTCP, false},
			{"cloud metadata", metadata, 80, corev1.ProtocolTCP, false},
			{"the internet", internet, 443, corev1.ProtocolTCP, name != "config"},
			{"the internet (IPv6)", internet6, 443, corev1.ProtocolTCP, name != "config"},
			{"the LAN", lan, 443, corev1.ProtocolTCP, false},
			{"the LAN (IPv6)", lan6, 443, corev1.ProtocolTCP, false},
			{"CGNAT", cgnat, 443, corev1.ProtocolTCP, false},
			{"a cluster address", cluster, 443, corev1.ProtocolTCP, false},
		} {
			if got := egressAllows(t, np, c.dst, c.port, c.proto); got != c.want {
				t.Errorf("%s reaches %s (%s:%d/%s): %v, want %v", name, c.what, c.dst.ip, c.port, c.proto, got, c.want)
			}
		}
		for other, l := range pods {
			if egressAllows(t, np, pod("10.0.3.3", releaseNS, l), 9464, corev1.ProtocolTCP) {
				t.Errorf("%s reaches %s's metrics port", name, other)
			}
		}

		// Ingress: the gateway's port alone, from anywhere.
		for _, src := range []endpoint{internet, pod("10.0.4.4", "ingress-nginx", map[string]string{"app": "ingress"})} {
			if got := ingressAllows(t, np, src, 8080, corev1.ProtocolTCP); got != (name == "gateway") {
				t.Errorf("%s admits %s on 8080: %v", name, src.ip, got)
			}
			if ingressAllows(t, np, src, 9464, corev1.ProtocolTCP) {
				t.Errorf("%s admits %s on its metrics port", name, src.ip)
			}
		}
		if ingressAllows(t, np, pod("10.0.5.5", releaseNS, pods["runner"]), 9464, corev1.ProtocolTCP) {
			t.Errorf("%s admits the runner on its metrics port", name)
		}
	}

	// NATS: its client port from this release's pods alone, its routes from
	// one another.
	np := nats(t, nps)
	for _, c := range []struct {
		what string
		src  endpoint
		port int
		want bool
	}{
		{"the runner", pod("10.0.6.1", releaseNS, pods["runner"]), 4222, true},
		{"the gateway", pod("10.0.6.2", releaseNS, pods["gateway"]), 4222, true},
		{"nats-box", pod("10.0.6.3", releaseNS, natsBoxLabels), 4222, true},
		{"another release's pod", pod("10.0.6.4", releaseNS, map[string]string{"app.kubernetes.io/instance": "other"}), 4222, false},
		{"a pod of the release's name in another namespace", pod("10.0.6.5", "elsewhere", pods["runner"]), 4222, false},
		{"an address", external("10.0.6.6"), 4222, false},
		{"another NATS server's route", pod("10.0.6.7", releaseNS, natsPodLabels), 6222, true},
		{"the runner on the route port", pod("10.0.6.1", releaseNS, pods["runner"]), 6222, false},
		{"the runner on the monitor port", pod("10.0.6.1", releaseNS, pods["runner"]), 8222, false},
	} {
		if got := ingressAllows(t, np, c.src, c.port, corev1.ProtocolTCP); got != c.want {
			t.Errorf("NATS admits %s on %d: %v, want %v", c.what, c.port, got, c.want)
		}
	}
	if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("NATS: policyTypes %v: its egress (the routes out) must stay open", np.Spec.PolicyTypes)
	}
}

// nats is the policy of the nats subchart's servers, which must select
// them and no mcpbus pod.
func nats(t *testing.T, nps map[string]*networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	t.Helper()
	np := nps["nats"]
	if np == nil {
		t.Fatal("no NetworkPolicy for NATS")
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(natsPodLabels)) || sel.Matches(labels.Set(natsBoxLabels)) {
		t.Fatalf("NATS's policy selects %v", sel)
	}
	return np
}

// TestChartNetworkPoliciesValues: what the values change. Disabled: none.
// Without the nats subchart: no policy for it, and the services reach the
// NATS ports at any address, or at networkPolicy.nats.to alone. The Vault
// rule takes vaultAddr's port (its scheme's without one); otlpEndpoint adds
// its port for every service; metrics.from and gateway.from say who is
// admitted; internet.except and extraEgress open private addresses.
func TestChartNetworkPoliciesValues(t *testing.T) {
	if nps, _ := policies(t, map[string]any{"networkPolicy": map[string]any{"enabled": false}}); len(nps) != 0 {
		t.Errorf("networkPolicy.enabled=false: %d NetworkPolicies rendered", len(nps))
	}

	ownNATS := map[string]any{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats.nats:4222"}
	nps, _ := policies(t, ownNATS)
	if nps["nats"] != nil || len(nps) != len(mcpbusServices) {
		t.Errorf("nats.enabled=false: %d NetworkPolicies, NATS's %v", len(nps), nps["nats"] != nil)
	}
	natsPod := pod("10.0.1.1", "nats", map[string]string{"app": "nats"})
	if !egressAllows(t, nps["runner"], natsPod, 4222, corev1.ProtocolTCP) {
		t.Error("nats.enabled=false: the runner does not reach NATS's client port")
	}
	if egressAllows(t, nps["runner"], natsPod, 4223, corev1.ProtocolTCP) {
		t.Error("nats.enabled=false: the runner reaches NATS on a port not its")
	}
	ownNATS["networkPolicy"] = map[string]any{"nats": map[string]any{"to": []any{
		map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "nats"}}}}}}
	nps, _ = policies(t, ownNATS)
	if !egressAllows(t, nps["config"], natsPod, 4222, corev1.ProtocolTCP) {
		t.Error("nats.to: config does not reach the NATS namespace")
	}
	if egressAllows(t, nps["config"], pod("10.0.1.2", "other", nil), 4222, corev1.ProtocolTCP) {
		t.Error("nats.to: config reaches port 4222 outside the NATS namespace")
	}

	vault := external("203.0.113.8")
	nps, _ = policies(t, map[string]any{
		"otlpEndpoint": "http://otel-collector.observability:4318",
		"services":     map[string]any{"credential": map[string]any{"vaultAddr": "https://vault.example.com"}},
		"networkPolicy": map[string]any{
			"metrics":  map[string]any{"from": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}},
			"gateway":  map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "198.51.100.0/24"}}}},
			"internet": map[string]any{"except": []any{"169.254.0.0/16", "10.0.0.0/8", "192.168.0.0/16", "fe80::/10", "203.0.113.8/32"}},
			"extraEgress": map[string]any{"chat": []any{map[string]any{
				"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.168.1.20/32"}}},
				"ports": []any{map[string]any{"port": 11434, "protocol": "TCP"}},
			}}},
		},
	})
	if !egressAllows(t, nps["credential"], vault, 443, corev1.ProtocolTCP) || egressAllows(t, nps["credential"], vault, 8200, corev1.ProtocolTCP) {
		t.Error("vaultAddr https://vault.example.com: the credential service's Vault rule is not port 443")
	}
	if egressAllows(t, nps["runner"], vault, 443, corev1.ProtocolTCP) {
		t.Error("a Vault address in internet.except: the runner reaches it")
	}
	collector := pod("10.0.7.7", "observability", map[string]string{"app": "otel-collector"})
	monitoring := pod("10.0.8.8", "monitoring", map[string]string{"app": "prometheus"})
	for _, name := range mcpbusServices {
		if !egressAllows(t, nps[name], collector, 4318, corev1.ProtocolTCP) {
			t.Errorf("%s does not reach the OTLP endpoint's port", name)
		}
		if !ingressAllows(t, nps[name], monitoring, 9464, corev1.ProtocolTCP) {
			t.Errorf("%s does not admit metrics.from on 9464", name)
		}
		if ingressAllows(t, nps[name], monitoring, 8080, corev1.ProtocolTCP) {
			t.Errorf("%s admits metrics.from on 8080", name)
		}
		// 172.16/12 left the except list.
		if got := egressAllows(t, nps[name], external("172.20.0.9"), 443, corev1.ProtocolTCP); got != (name != "config") {
			t.Errorf("%s reaches 172.20.0.9 (no longer excepted): %v", name, got)
		}
		if egressAllows(t, nps[name], external("169.254.169.254"), 80, corev1.ProtocolTCP) {
			t.Errorf("%s reaches the cloud metadata endpoint", name)
		}
		if got := egressAllows(t, nps[name], external("192.168.1.20"), 11434, corev1.ProtocolTCP); got != (name == "chat") {
			t.Errorf("%s reaches chat's extra peer: %v", name, got)
		}
	}
	if !ingressAllows(t, nps["gateway"], external("198.51.100.9"), 8080, corev1.ProtocolTCP) || ingressAllows(t, nps["gateway"], external("192.0.2.1"), 8080, corev1.ProtocolTCP) {
		t.Error("gateway.from: the gateway's port not limited to its peers")
	}
	if np := nats(t, nps); ingressAllows(t, np, monitoring, 4222, corev1.ProtocolTCP) || !ingressAllows(t, np, monitoring, 7777, corev1.ProtocolTCP) {
		t.Error("metrics.from: NATS does not admit it on its exporter's port alone")
	}
}

// TestChartNetworkPolicyURLPorts: the port the Vault rule takes from
// vaultAddr, for its forms.
func TestChartNetworkPolicyURLPorts(t *testing.T) {
	for addr, want := range map[string]int{
		"http://vault:8200":          8200,
		"https://vault.example.com":  443,
		"HTTPS://vault.example.com/": 443,
		"http://vault.example.com":   80,
		"https://[fd00::1]:8201/v1":  8201,
		"http://user@vault:8300":     8300,
	} {
		nps, _ := policies(t, map[string]any{"services": map[string]any{"credential": map[string]any{"vaultAddr": addr}}})
		var ports []string
		for _, r := range nps["credential"].Spec.Egress {
			if len(r.To) == 0 {
				for _, p := range r.Ports {
					ports = append(ports, p.Port.String())
				}
			}
		}
		if !egressAllows(t, nps["credential"], external("10.9.9.9"), want, corev1.ProtocolTCP) || len(ports) != 1 {
			t.Errorf("vaultAddr %s: open ports to any address %v, want %d", addr, strings.Join(ports, ","), want)
		}
	}
}
