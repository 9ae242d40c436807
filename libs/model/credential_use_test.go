package model_test

import (
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

func TestCheckCredentialsUsed(t *testing.T) {
	stdio := model.Transport{Type: model.TransportStdio}
	plain := model.McpConfig{Slug: "everything", AuthType: model.AuthNone, Transport: stdio,
		EnvVars: map[string]model.EnvVar{"MODE": {Value: "demo"}}}
	declared := model.McpConfig{Slug: "github", AuthType: model.AuthAPIKey, Transport: stdio, EnvVars: map[string]model.EnvVar{
		"GITHUB_TOKEN": {SecretRef: "GITHUB_TOKEN", IsSecret: true}, "OTHER": {IsSecret: true}, "MODE": {Value: "x"}}}
	apiKey := model.McpConfig{Slug: "legacy", AuthType: model.AuthAPIKey, Transport: stdio}
	remote := model.McpConfig{Slug: "api", AuthType: model.AuthAPIKey, Transport: model.Transport{Type: model.TransportHTTP, URL: "https://x", SecretHeaders: []string{"Authorization"}}}
	env := func(n string) model.Credentials { return model.Credentials{Env: map[string]string{n: "v"}} }
	cases := []struct {
		name       string
		cfg        model.McpConfig
		creds      model.Credentials
		field, msg string
	}{
		{"nothing", plain, model.Credentials{}, "", ""},
		{"server without secrets", plain, env("DUMMY_TOKEN"), "env.DUMMY_TOKEN", "declares no secret"},
		{"oauth for a server without secrets", plain, model.Credentials{OAuth: &model.OAuthToken{AccessToken: "a"}}, "oauth", "set auth_type: oauth in its config first"},
		{"oauth for an oauth server", model.McpConfig{Slug: "slack", AuthType: model.AuthOAuth, Transport: model.Transport{Type: model.TransportHTTP, URL: "https://x"}},
			model.Credentials{OAuth: &model.OAuthToken{AccessToken: "a"}}, "", ""},
		{"declared by reference", declared, env("GITHUB_TOKEN"), "", ""},
		{"declared by name", declared, env("OTHER"), "", ""},
		{"undeclared name", declared, env("GITHUB_TOKN"), "env.GITHUB_TOKN", "it declares GITHUB_TOKEN, OTHER"},
		{"plain variable is no secret", declared, env("MODE"), "env.MODE", "is not a secret variable"},
		{"undeclared keyfile", declared, model.Credentials{Keyfiles: map[string]string{"KEY": "/k"}}, "keyfiles.KEY", "is not a secret variable"},
		{"api_key auth takes any name", apiKey, env("ANY_KEY"), "", ""},
		{"header on stdio", apiKey, model.Credentials{Headers: map[string]string{"X-Key": "v"}}, "headers.X-Key", "runs on stdio"},
		{"env on remote", remote, env("TOKEN"), "env.TOKEN", "remote (http) server"},
		{"declared header, any case", remote, model.Credentials{Headers: map[string]string{"authorization": "v"}}, "", ""},
		{"undeclared header", remote, model.Credentials{Headers: map[string]string{"X-Key": "v"}}, "headers.X-Key", "it declares Authorization"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.cfg.CheckCredentialsUsed(tc.creds)
			if tc.field == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("got %+v, want %s containing %q", e, tc.field, tc.msg)
			}
		})
	}
}
