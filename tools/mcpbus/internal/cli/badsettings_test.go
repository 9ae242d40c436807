package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestMalformedSettingsStopAtOnce: a malformed env value or flag ends
// mcpbus up, mcpbus serve and each service binary at once, with an error
// that names it, before anything connects.
func TestMalformedSettingsStopAtOnce(t *testing.T) {
	cases := []struct {
		name, env, value string
		args             []string
		want             string
	}{
		{"up env", "MCPBUS_MAX_SERVERS", "ten", []string{"up"}, "MCPBUS_MAX_SERVERS"},
		{"up flag", "", "", []string{"up", "--idle-timeout", "soon"}, "--idle-timeout"},
		{"up log level", "MCPBUS_LOG_LEVEL", "loud", []string{"up"}, "loud"},
		{"serve runner env", "MCPBUS_CALL_TIMEOUT", "30", []string{"serve", "runner"}, "MCPBUS_CALL_TIMEOUT"},
		{"serve gateway env", "MCPBUS_NO_AUTH", "maybe", []string{"serve", "gateway"}, "MCPBUS_NO_AUTH"},
		{"serve config flag", "", "", []string{"serve", "config", "--replicas", "three"}, "--replicas"},
		{"serve registry replicas", "MCPBUS_REPLICAS", "9", []string{"serve", "registry"}, "--replicas"},
		{"serve credential backend", "MCPBUS_CRED_BACKEND", "floppy", []string{"serve", "credential", "--nats", "nats://127.0.0.1:1"}, "floppy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv(c.env, c.value)
			}
			var out, errOut bytes.Buffer
			start := time.Now()
			code := Main(append(c.args, "--data-dir", t.TempDir()), strings.NewReader(""), &out, &errOut)
			if code == 0 {
				t.Fatalf("exit 0; stderr %s", errOut.String())
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s to refuse", took)
			}
			if !strings.Contains(errOut.String(), c.want) {
				t.Errorf("stderr %q does not name %s", errOut.String(), c.want)
			}
		})
	}
	// Each service's own binary (service.Main) refuses the same way.
	t.Setenv("MCPBUS_LOG_LEVEL", "")
	t.Setenv("MCPBUS_REPLICAS", "lots")
	for _, def := range stack.Services() {
		var errOut bytes.Buffer
		if code := service.Main(def, []string{"--data-dir", t.TempDir()}, &errOut); code == 0 || !strings.Contains(errOut.String(), "MCPBUS_REPLICAS") {
			t.Errorf("mcpbus-%s: exit %d, stderr %q", def.Name, code, errOut.String())
		}
	}
}
