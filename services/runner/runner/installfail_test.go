package runner_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// An npm package that npx cannot download because the npm registry is out
// of reach is seeds/002 §11.1's "npx fails": NETWORK_ERROR "Failed to
// install <server>. Check network." (it read "server exited during the
// handshake", SERVICE_UNAVAILABLE, which sends the operator to the server
// rather than to the network). Real npx, with its registry a closed local
// port.
func TestNpxInstallWithoutNetwork(t *testing.T) {
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close() // nothing listens there now: ECONNREFUSED
	// The runner passes npm_config_* of its own environment on to npx.
	t.Setenv("npm_config_registry", "http://"+closed+"/")
	t.Setenv("npm_config_cache", t.TempDir())
	t.Setenv("npm_config_fetch_retries", "0")
	t.Setenv("npm_config_update_notifier", "false")

	opts := quickOpts()
	opts.StartTimeout = 60 * time.Second
	opts.MaxRestarts = 1 // one try is enough to see the message
	e := runnertest.Start(t, opts)
	cfg := model.McpConfig{
		Name: "offline", Enabled: true,
		Package:   model.Package{Type: model.PackageNPM, Identifier: "@mcpbus-test/not-downloadable@1.0.0", RuntimeHint: "npx"},
		Transport: model.Transport{Type: model.TransportStdio},
		Runtime:   model.Runtime{Eager: true},
	}
	e.Put(t, cfg)
	st := e.WaitState(t, "offline", model.StateError, 60*time.Second)
	if st.Code != string(apierr.Network) || !strings.HasPrefix(st.Message, "Failed to install offline. Check network.") {
		t.Fatalf("npx without network: %s %q, want %s \"Failed to install offline. Check network.\"", st.Code, st.Message, apierr.Network)
	}
}
