package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// stubRegistry answers mcp.v1.registry.{search,get} with fixed replies, as a
// registry service relaying a hostile registry's text would.
func stubRegistry(t *testing.T, search model.RegistrySearchReply, plan model.InstallPlan) string {
	t.Helper()
	handlers := map[string]micro.HandlerFunc{}
	for subj, reply := range map[string]any{"mcp.v1.registry.search": search, "mcp.v1.registry.get": plan} {
		data, _ := json.Marshal(reply)
		handlers[subj] = func(r micro.Request) { _ = r.Respond(data) }
	}
	url, _, _ := stubBus(t, "registry-stub", handlers)
	return url
}

// Text a registry wrote (names, warnings) reaches the terminal of `mcpbus
// search` and `mcpbus add` without its escape sequences; an entry that
// makes no config with nothing missing is told apart from missing values.
func TestRegistryCommandsShowRegistryTextSafely(t *testing.T) {
	const esc = "\x1b]52;c;cHduZWQ=\x07\x1b[2J"
	url := stubRegistry(t, model.RegistrySearchReply{
		Results:  []model.RegistryResult{{Name: "io.github.evil/x" + esc, QualifiedName: "@evil/x" + esc, Sources: []string{"official" + esc}, Description: "d"}},
		Warnings: []model.RegistryWarning{{Source: "smithery", Code: "SERVICE_UNAVAILABLE", Message: "down" + esc}},
		Page:     1, PageSize: 20, Total: 1,
	}, model.InstallPlan{Source: "official", Name: "io.github.evil/x" + esc, Warnings: []string{"no draft: bad" + esc}})
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats", url}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run("search", "evil")
	if code != 0 || !strings.Contains(out, "io.github.evil/x") || strings.ContainsAny(out+errOut, "\x1b\x07") {
		t.Fatalf("search: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run("add", "--from-registry", "io.github.evil/x")
	if code == 0 || strings.ContainsAny(out+errOut, "\x1b\x07") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if strings.Contains(errOut, "needs values for") || !strings.Contains(errOut, "does not make a valid server config") {
		t.Fatalf("add of an entry that makes no config, nothing missing: %q", errOut)
	}
}

// A credential the registry gives a template ("Bearer {smithery_api_key}",
// the Smithery gateway's Authorization header) is asked for by its
// placeholder and stored in the template's form: a user who types the key
// alone must not end up sending "Authorization: <key>". A value already in
// the form is kept.
func TestAskCredentialsFillsTemplates(t *testing.T) {
	creds := []model.PlanCredential{
		{Kind: model.CredentialHeader, Name: "Authorization", Required: true, Template: "Bearer {smithery_api_key}"},
		{Kind: model.CredentialEnv, Name: "API_KEY", Required: true},
		{Kind: model.CredentialHeader, Name: "X-Token", Required: true, Template: "Token {t}"},
	}
	var errOut bytes.Buffer
	g := &globals{stdin: strings.NewReader("smk-123\nplain\nToken already\n"), stdout: &bytes.Buffer{}, stderr: &errOut}
	got, err := askCredentials(g, creds)
	if err != nil {
		t.Fatal(err)
	}
	if got.Headers["Authorization"] != "Bearer smk-123" || got.Env["API_KEY"] != "plain" || got.Headers["X-Token"] != "Token already" {
		t.Fatalf("credentials: headers %q env %q", got.Headers, got.Env)
	}
	// A missing one is named by its credential, not by the prompt's text.
	g = &globals{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &errOut}
	_, err = askCredentials(g, []model.PlanCredential{{Kind: model.CredentialEnv, Name: "API_KEY", Description: "the key", Required: true}})
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Field != "API_KEY" || !strings.Contains(ae.Message, "API_KEY") {
		t.Fatalf("missing secret: %v", err)
	}
}

// What an entry makes run is shown before anything is asked or saved: the
// whole command line (runtime and package arguments), every variable with
// secrets marked, hidden characters escaped; and without a terminal to ask
// at, nothing is added unless --yes says so.
func TestAddShowsWhatRunsAndWantsConfirmation(t *testing.T) {
	draft := &model.McpConfig{
		Name: "x", Slug: "x", Enabled: true,
		Package:   model.Package{Type: model.PackageNPM, Identifier: "x-mcp@1.0.0", RuntimeArgs: []string{"--prefer-online"}, Args: []string{"--root", "/srv/a b", "--mode\u202e"}},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars: map[string]model.EnvVar{
			"LOG_LEVEL": {Value: "debug"},
			"API_KEY":   {IsSecret: true, SecretRef: "API_KEY", Required: true},
		},
	}
	url := stubRegistry(t, model.RegistrySearchReply{}, model.InstallPlan{
		Source: "official", Name: "io.github.acme/x", Version: "1.0.0", Ready: true, Draft: draft,
		Credentials: []model.PlanCredential{{Kind: model.CredentialEnv, Name: "API_KEY", Required: true}},
	})
	var out, errOut bytes.Buffer
	code := Main([]string{"--nats", url, "add", "--from-registry", "io.github.acme/x"}, strings.NewReader("secret-value\n"), &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "--yes") {
		t.Fatalf("add without --yes and no terminal: %d %q %q", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		`command: npx -y --prefer-online x-mcp@1.0.0 --root "/srv/a b" "--mode\u202e"`,
		"env:     API_KEY=(secret)",
		"env:     LOG_LEVEL=debug",
		"enabled: no", // off unless --enabled, whatever the draft says
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("preview lacks %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(errOut.String(), "\u202e") {
		t.Errorf("a bidi override reached the terminal: %q", errOut.String())
	}

	// A docker draft: the -e the runner adds, the entry's runtime arguments, a remote's headers.
	cfg := &model.McpConfig{
		Package:   model.Package{Type: model.PackageDocker, Identifier: "ghcr.io/acme/x:1", RuntimeArgs: []string{"-v", "data:/data"}, Args: []string{"serve"}},
		EnvVars:   map[string]model.EnvVar{"B": {Value: "1"}, "A": {IsSecret: true}},
		Transport: model.Transport{Type: model.TransportStdio},
	}
	if got, want := commandLine(cfg), "docker run --rm -i -e A -e B -v data:/data ghcr.io/acme/x:1 serve"; got != want {
		t.Errorf("docker command: %q, want %q", got, want)
	}
	var remote bytes.Buffer
	writeRunPreview(&remote, &model.InstallPlan{Source: "smithery", Name: "@acme/x", Credentials: []model.PlanCredential{{Kind: model.CredentialHeader, Name: "Authorization"}}},
		&model.McpConfig{Package: model.Package{Type: model.PackageHTTP}, Transport: model.Transport{Type: model.TransportHTTP, URL: "https://x.example/mcp", Headers: map[string]string{"X-Region": "eu"}}})
	for _, want := range []string{"url:     https://x.example/mcp", "header:  Authorization=(secret)", "header:  X-Region=eu", "enabled: no"} {
		if !strings.Contains(remote.String(), want) {
			t.Errorf("remote preview lacks %q:\n%s", want, remote.String())
		}
	}
}
