package config_test

import (
	"bytes"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

// A variable whose value is a URL carrying a secret (a key in its query, a
// password in its user info) is a secret whatever it is called, and so is one
// named with a word like PASS or DSN: their values move to the credential
// service. A plain URL stays in the config.
func TestCreateMovesSecretURLsAndNamesOut(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Hooks")
	secrets := map[string]string{
		"WEBHOOK_URL":  "https://hooks.example.com/in?api_key=hk-secret-81f2",
		"DATABASE_URL": "postgres://app:pg-secret-73aa@db:5432/app",
		"DB_PASS":      "pass-secret-11c3",
		"SENTRY_DSN":   "https://dsn-secret-44@o1.ingest.sentry.io/1",
	}
	cfg.EnvVars = map[string]model.EnvVar{"DOCS_URL": {Value: "https://docs.example.com/?page=2"}}
	for name, v := range secrets {
		cfg.EnvVars[name] = model.EnvVar{Value: v}
	}
	got := e.mustCreate(cfg, nil)
	raw := e.rawConfig(got.ID)
	stored, _ := e.cred.get(got.ID)
	for name, v := range secrets {
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("stored config holds %s's value: %s", name, raw)
		}
		if ev := got.EnvVars[name]; ev.Value != "" || ev.SecretRef != name || !ev.IsSecret {
			t.Errorf("%s = %+v", name, ev)
		}
		if stored.Env[name] != v {
			t.Errorf("credential service got %s = %q", name, stored.Env[name])
		}
	}
	if got.EnvVars["DOCS_URL"].Value != "https://docs.example.com/?page=2" || stored.Env["DOCS_URL"] != "" {
		t.Errorf("plain URL moved: %+v", got.EnvVars["DOCS_URL"])
	}
}
