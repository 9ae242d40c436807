package helmchart

import (
	"fmt"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
)

// TestChartKubeconform is `helm template deploy/helm/mcpbus | kubeconform
// -strict` with the schemas of kubeSchemas: every manifest is valid (none
// skipped for want of a schema), and a manifest with a field its kind does
// not have is not.
func TestChartKubeconform(t *testing.T) {
	v, err := validator.New([]string{kubeSchemas(t)}, validator.Opts{Strict: true, KubernetesVersion: strings.TrimPrefix(kubeModule, "k8s.io/kubernetes@v")})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var docs []string
	// Without the nats subchart (not downloaded here), with it (the policy
	// of its servers), and with every NetworkPolicy value set.
	for _, vals := range []map[string]any{
		{"nats": map[string]any{"enabled": false}, "natsURL": "nats://nats:4222"},
		nil,
		{"otlpEndpoint": "http://otel:4318", "networkPolicy": map[string]any{
			"nats":    map[string]any{"to": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "nats"}}}}},
			"vault":   map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.8/32"}}}, "ports": []any{8200, 8201}},
			"otlp":    map[string]any{"to": []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "otel"}}}}},
			"gateway": map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "198.51.100.0/24"}}}},
			"metrics": map[string]any{"from": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}},
			"extraEgress": map[string]any{"chat": []any{map[string]any{
				"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.168.1.20/32"}}},
				"ports": []any{map[string]any{"port": 11434, "protocol": "TCP"}},
			}}},
		}},
	} {
		docs = render(t, vals)
		for i, d := range docs {
			res := v.ValidateResource(resource.Resource{Path: fmt.Sprint("manifest ", i), Bytes: []byte(d)})
			if res.Status != validator.Valid {
				t.Errorf("kubeconform (values %v): status %d, %v %v\n%s", vals, res.Status, res.Err, res.ValidationErrors, d)
				continue
			}
			sig, err := res.Resource.Signature()
			if err != nil {
				t.Fatal(err)
			}
			kinds[sig.Kind]++
		}
	}
	t.Logf("kubeconform -strict (%s): valid %v", kubeModule, kinds)
	if kinds["Deployment"] == 0 || kinds["Service"] == 0 || kinds["NetworkPolicy"] == 0 {
		t.Fatalf("validated %v, want the chart's Deployments, Service and NetworkPolicies", kinds)
	}

	// The checks can fail: an unknown field, and a wrong type.
	for _, bad := range []struct{ name, from, to string }{
		{"unknown field", "\nspec:\n", "\nspec:\n  replicass: 2\n"},
		{"wrong type", "\nspec:\n", "\nspec:\n  minReadySeconds: soon\n"},
	} {
		for _, d := range docs {
			if !strings.Contains(d, "kind: Deployment") {
				continue
			}
			broken := strings.Replace(d, bad.from, bad.to, 1)
			if res := v.ValidateResource(resource.Resource{Path: bad.name, Bytes: []byte(broken)}); res.Status != validator.Invalid {
				t.Errorf("%s: status %d (%v), want invalid", bad.name, res.Status, res.Err)
			}
			break
		}
	}
}
