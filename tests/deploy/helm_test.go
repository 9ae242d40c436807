package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/helmtest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestHelmChart runs tests/helmchart (the chart rendered with Helm's engine,
// every manifest decoded strictly into its Kubernetes type and checked by
// kubeconform -strict against the schemas of the Kubernetes OpenAPI
// document) through its binary built once per machine.
func TestHelmChart(t *testing.T) {
	out, err := helmtest.Run(t.Context(), filepath.Join(clitest.RepoRoot(t), "deploy", "helm", "mcpbus"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, test := range []string{"TestChartRenders", "TestChartHardening", "TestChartDependsOnNATS", "TestChartKubeconform"} {
		if !strings.Contains(out, "--- PASS: "+test) {
			t.Errorf("%s did not pass:\n%s", test, out)
		}
	}
}
