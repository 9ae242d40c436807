// Package helmtest runs the checks of the Helm chart deploy/helm/mcpbus: the
// suite in tests/helmchart renders the chart with Helm's own engine and
// decodes every manifest strictly into the Kubernetes API types. That module
// pulls in Helm and client-go (minutes to compile on two cores), so, like
// Vault and Jaeger, its test binary is built once per machine into
// ~/.cache/mcpbus and run as a program by `make test` (tests/deploy).
package helmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
)

// BuildTimeout bounds the wait for the lock and a cold build.
const BuildTimeout = 15 * time.Minute

// ChartEnv names the chart directory for the suite (it would otherwise look
// next to its own source, which a cached binary may have outlived).
const ChartEnv = "MCPBUS_HELM_CHART"

var spec = toolbuild.Spec{Name: "helmchart", Dir: "tests/helmchart", Test: true}

// Run runs the suite against chartDir and returns its verbose output; an
// error when it could not be built or a check failed.
func Run(ctx context.Context, chartDir string) (string, error) {
	bctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	bin, err := toolbuild.Binary(bctx, spec)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ChartEnv+"="+chartDir)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("the Helm chart checks failed: %w", err)
	}
	return string(out), nil
}
