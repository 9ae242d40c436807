package cli

import (
	"io"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// describe lists the settings of cmd with the root's persistent ones.
func describe(root, cmd *cobra.Command) map[string]settings.Setting {
	fs := pflag.NewFlagSet("all", pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(root.PersistentFlags())
	out := map[string]settings.Setting{}
	for _, s := range settings.Describe(fs) {
		out[s.Flag] = s
	}
	return out
}

func find(t *testing.T, c *cobra.Command, path ...string) *cobra.Command {
	t.Helper()
	found, rest, err := c.Find(path)
	if err != nil || len(rest) > 0 || found == c {
		t.Fatalf("no command %v: %v", path, err)
	}
	return found
}

// TestSettingsParity: a setting has one flag name, env var and default
// whether its service runs in mcpbus up, as `mcpbus serve <name>` or as its
// own binary; every setting of a service is also a setting of mcpbus up.
func TestSettingsParity(t *testing.T) {
	root := newRoot(&globals{stdout: io.Discard, stderr: io.Discard})
	up := describe(root, find(t, root, "up"))
	if len(up) < 20 {
		t.Fatalf("mcpbus up has only %d settings: %v", len(up), up)
	}
	hostOnly := map[string]bool{"replicas": true} // one embedded node: always 1
	for _, def := range stack.Services() {
		serve := describe(root, find(t, root, "serve", def.Name))
		binFS, _, _, _ := service.Flags(def)
		bin := map[string]settings.Setting{}
		for _, s := range settings.Describe(binFS) {
			bin[s.Flag] = s
		}
		if len(bin) != len(serve) {
			t.Errorf("%s: `mcpbus serve` has %d settings, its binary %d", def.Name, len(serve), len(bin))
		}
		for name, b := range bin {
			if s, ok := serve[name]; !ok || s != b {
				t.Errorf("%s: --%s is %+v in its binary but %+v in mcpbus serve", def.Name, name, b, s)
			}
			u, ok := up[name]
			switch {
			case !ok && !hostOnly[name]:
				t.Errorf("%s: --%s (%s) is missing from mcpbus up", def.Name, name, b.Env)
			case ok && u != b:
				t.Errorf("%s: --%s is %+v alone but %+v in mcpbus up", def.Name, name, b, u)
			}
		}
		// The service's own settings, one by one.
		own := pflag.NewFlagSet("own", pflag.ContinueOnError)
		def.Options().Register(settings.New(own))
		n := 0
		own.VisitAll(func(f *pflag.Flag) {
			n++
			if _, ok := bin[f.Name]; !ok {
				t.Errorf("%s: its own --%s is not a setting of its binary", def.Name, f.Name)
			}
		})
		if n == 0 {
			t.Errorf("%s registers no settings", def.Name)
		}
	}
	// Spot checks of the drifts this test exists for.
	for flag, want := range map[string]settings.Setting{
		"max-servers":  {Flag: "max-servers", Env: "MCPBUS_MAX_SERVERS", Default: "10", Type: "int"},
		"call-timeout": {Flag: "call-timeout", Env: "MCPBUS_CALL_TIMEOUT", Default: "30s", Type: "duration"},
		"cors-origin":  {Flag: "cors-origin", Env: "MCPBUS_CORS_ORIGINS", Default: "[]", Type: "stringSlice"},
		"cred-backend": {Flag: "cred-backend", Env: "MCPBUS_CRED_BACKEND", Default: "file", Type: "string"},
		"nats":         {Flag: "nats", Env: "MCPBUS_NATS_URL", Default: "nats://127.0.0.1:4222", Type: "string"},
	} {
		if got := up[flag]; got != want {
			t.Errorf("mcpbus up --%s: %+v, want %+v", flag, got, want)
		}
	}
}
