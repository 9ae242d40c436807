package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

const clearRefused = "secrets must be sealed to the credential service key (mcp.v1.cred.key)"

// Secrets in clear are refused, whichever way they come; nothing is written
// and nothing reaches the credential service.
func TestClearSecretsRefused(t *testing.T) {
	e := newEnv(t)
	withValue := stdio("Keyed")
	withValue.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "clear-1", IsSecret: true}}
	namedSecret := stdio("Named")
	namedSecret.EnvVars = map[string]model.EnvVar{"GITHUB_TOKEN": {Value: "clear-2"}}
	remote := model.McpConfig{Name: "Remote", Package: model.Package{Type: model.PackageHTTP, Identifier: "https://mcp.example/x"},
		Transport: model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example/x", Headers: map[string]string{"Authorization": "Bearer clear-3"}}}
	cases := []struct {
		name, verb, field string
		body              any
	}{
		{"secrets field", "create", "secrets", model.ConfigCreateRequest{Config: stdio("Given"), Secrets: &model.Credentials{Env: map[string]string{"API_KEY": "clear-0"}}}},
		{"env value marked secret", "create", "env_vars.API_KEY.value", model.ConfigCreateRequest{Config: withValue}},
		{"env value named like a secret", "create", "env_vars.GITHUB_TOKEN.value", model.ConfigCreateRequest{Config: namedSecret}},
		{"secret header", "create", "transport.headers.Authorization", model.ConfigCreateRequest{Config: remote}},
		{"import content with a secret", "import", "servers[0].secrets", model.ConfigImportRequest{
			Content: `{"mcpServers": {"gh": {"command": "npx", "args": ["-y", "gh-mcp"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}}}}`,
			Vars:    map[string]string{"GITHUB_TOKEN": "clear-4"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, e.callClear(c.verb, c.body, nil), apierr.Validation, c.field, clearRefused)
			nothingSaved(t, e)
			if n := len(e.cred.callsOf("check")); n != 0 {
				t.Fatalf("%d checks reached the credential service", n)
			}
		})
	}
	// An update in clear is refused the same way and changes nothing.
	saved := e.mustCreate(stdio("Plain"), nil)
	upd := saved
	upd.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "clear-5", IsSecret: true}}
	wantErr(t, e.callClear("update", model.ConfigUpdateRequest{Config: upd}, nil), apierr.Validation, "env_vars.API_KEY.value", clearRefused)
	if got, _ := e.get("plain"); got.Revision != saved.Revision {
		t.Fatalf("refused update wrote revision %d", got.Revision)
	}
}

// A blob sealed to another key, altered, or announced with other names is
// refused with a VALIDATION_ERROR before anything is written.
func TestSealedSecretsRefused(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	creds := model.Credentials{Env: map[string]string{"API_KEY": "sealed-secret-1"}}
	good, err := credclient.NewSealer(e.nc, "").SealSecrets(ctx, creds)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateCurveKeys()
	strangerPub, _ := stranger.PublicKey()
	otherKey, otherSender, err := credclient.Seal(creds, strangerPub)
	if err != nil {
		t.Fatal(err)
	}
	tampered := good
	tampered.Sealed = append([]byte(nil), good.Sealed...)
	tampered.Sealed[len(tampered.Sealed)/2] ^= 0x20
	wrongKey := good
	wrongKey.Sealed, wrongKey.SenderKey = otherKey, otherSender
	otherNames := good
	otherNames.Names = &model.SecretNames{Env: []string{"API_KEY", "OTHER_KEY"}}
	noNames := good
	noNames.Names = nil
	badSender := good
	badSender.SenderKey = "Xnot-a-key"
	cases := []struct {
		name   string
		sealed model.SealedSecrets
		field  string
		msg    string
	}{
		{"sealed to another key", wrongKey, "sealed_secrets", "cannot be opened"},
		{"altered", tampered, "sealed_secrets", "cannot be opened"},
		{"names that do not match", otherNames, "secret_names", "do not match"},
		{"no names", noNames, "secret_names", "secret_names must name"},
		{"bad sender key", badSender, "sender_key", "sender_key must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := stdio("Sealed")
			cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}}
			err := wantErr(t, e.callClear("create", model.ConfigCreateRequest{Config: cfg, SealedSecrets: c.sealed}, nil), apierr.Validation, c.field, "")
			if !strings.Contains(err.Message, c.msg) || strings.Contains(err.Message, "sealed-secret-1") {
				t.Fatalf("message %q", err.Message)
			}
			nothingSaved(t, e)
		})
	}
	// An import whose second entry does not open writes nothing, not even
	// the first entry's secrets (every blob is checked before any write).
	first := stdio("First")
	first.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true}}
	second := stdio("Second")
	second.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true}}
	err = e.callClear("import", model.ConfigImportRequest{Entries: []model.ConfigImportEntry{
		{Config: first, SealedSecrets: good}, {Config: second, SealedSecrets: tampered}}}, nil)
	wantErr(t, err, apierr.Validation, "servers[1].sealed_secrets", "")
	nothingSaved(t, e)
	// Entries come instead of content.
	wantErr(t, e.callClear("import", model.ConfigImportRequest{Content: `{"servers": []}`, Entries: []model.ConfigImportEntry{{Config: first}}}, nil),
		apierr.Validation, "entries", "")

	// The good blob goes through as it came: the credential service opens it.
	cfg := stdio("Sealed")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}}
	var out model.McpConfig
	if err := e.callClear("create", model.ConfigCreateRequest{Config: cfg, SealedSecrets: good}, &out); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.cred.get(out.ID); !ok || got.Env["API_KEY"] != "sealed-secret-1" {
		t.Fatalf("stored: %+v", got)
	}
	if out.AuthType != model.AuthAPIKey || out.EnvVars["API_KEY"].SecretRef != "API_KEY" {
		t.Fatalf("config: %+v", out)
	}
}
