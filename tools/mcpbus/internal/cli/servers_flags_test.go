package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

func applyEditFlags(t *testing.T, cfg *model.McpConfig, args ...string) {
	t.Helper()
	f := &specFlags{}
	cmd := &cobra.Command{}
	f.register(cmd)
	f.registerEdit(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	if _, err := f.apply(cmd, &globals{}, cfg); err != nil {
		t.Fatalf("apply %v: %v", args, err)
	}
}

// A second edit's --deny-tool adds to the first's; --unset-* and --clear-*
// take away. The same for every list a server edit changes.
func TestServerEditListFlagsAdd(t *testing.T) {
	cfg := model.McpConfig{Package: model.Package{Type: model.PackageNPM, Identifier: "p", Args: []string{"/tmp"}},
		Transport: model.Transport{Type: model.TransportHTTP, Headers: map[string]string{"X-Mode": "a"}, SecretHeaders: []string{"Authorization"}}}
	applyEditFlags(t, &cfg, "--deny-tool", "echo")
	applyEditFlags(t, &cfg, "--deny-tool", "add", "--deny-tool", "echo", "--allow-tool", "*")
	if !reflect.DeepEqual(cfg.Tools, model.ToolFilter{Allow: []string{"*"}, Deny: []string{"echo", "add"}}) {
		t.Fatalf("after two edits: %+v", cfg.Tools)
	}
	applyEditFlags(t, &cfg, "--unset-deny-tool", "echo", "--unset-allow-tool", "*")
	if !reflect.DeepEqual(cfg.Tools, model.ToolFilter{Deny: []string{"add"}}) {
		t.Fatalf("after unset: %+v", cfg.Tools)
	}
	applyEditFlags(t, &cfg, "--clear-tool-filter", "--allow-tool", "x*")
	if !reflect.DeepEqual(cfg.Tools, model.ToolFilter{Allow: []string{"x*"}}) {
		t.Fatalf("after clear: %+v", cfg.Tools)
	}
	applyEditFlags(t, &cfg, "--arg", "/srv")
	if !reflect.DeepEqual(cfg.Package.Args, []string{"/tmp", "/srv"}) {
		t.Fatalf("args %q", cfg.Package.Args)
	}
	applyEditFlags(t, &cfg, "--clear-args", "--arg", "/data")
	if !reflect.DeepEqual(cfg.Package.Args, []string{"/data"}) {
		t.Fatalf("args after --clear-args %q", cfg.Package.Args)
	}
	applyEditFlags(t, &cfg, "--header", "X-Other=b")
	applyEditFlags(t, &cfg, "--unset-header", "x-mode", "--unset-header", "authorization")
	if !reflect.DeepEqual(cfg.Transport.Headers, map[string]string{"X-Other": "b"}) || len(cfg.Transport.SecretHeaders) != 0 {
		t.Fatalf("headers %v, secret %v", cfg.Transport.Headers, cfg.Transport.SecretHeaders)
	}
}

// --env takes plain values only: one shaped like a token is refused,
// naming the variable and --secret-env, and never quoted; it would be
// stored in clear in the config.
func TestServerEnvRefusesSecretLookingValue(t *testing.T) {
	const token = "ghp_0123456789abcdefghijABCDEFGHIJklmnop"
	f := &specFlags{}
	cmd := &cobra.Command{}
	f.register(cmd)
	if err := cmd.ParseFlags([]string{"--env", "LOG=debug", "--env", "FOO=" + token}); err != nil {
		t.Fatal(err)
	}
	_, err := f.apply(cmd, &globals{}, &model.McpConfig{})
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "env.FOO" || !strings.Contains(e.Message, "--secret-env FOO") || strings.Contains(e.Message, token) {
		t.Fatalf("--env FOO=<token>: %v", err)
	}
	for _, plain := range []string{"FLAG=true", "URL=https://api.example.com/v1", "MAX_ITEMS=4096", "MODE=demo"} {
		applyEditFlags(t, &model.McpConfig{}, "--env", plain)
	}
}
