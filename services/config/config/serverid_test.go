package config_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Issue 27: a server whose id was a chat profile's api_key_ref received that
// profile's LLM key, and deleting it deleted the key. Server ids are random
// (v4) uuids; the derived records of chat profiles and OAuth clients are v5,
// so neither a create nor an import may take one.
func TestServerIDCannotNameAnotherOwnersRecord(t *testing.T) {
	e := newEnv(t)
	for name, id := range map[string]string{
		"chat profile": model.ChatProfileCredentialID("default"),
		"oauth client": model.OAuthClientCredentialID(uuid.NewString()),
		"version 1":    "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
	} {
		cfg := stdio("collide")
		cfg.ID = id
		wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Validation, "id", "")
		var rep model.ConfigImportReply
		err := e.call("import", model.ConfigImportRequest{Entries: []model.ConfigImportEntry{{Config: cfg}}}, &rep)
		for _, c := range append(rep.Created, rep.Updated...) {
			if err == nil && c.ID == id {
				t.Fatalf("%s: import took id %s", name, id)
			}
		}
	}
	cfg := stdio("fine")
	cfg.ID = uuid.NewString()
	if err := e.call("create", model.ConfigCreateRequest{Config: cfg}, nil); err != nil {
		t.Fatal(err)
	}
}

// A writer that does not use the Go client's sealing sends a secret in a URL
// or an argument: the config service refuses it, naming the field, without
// quoting it, and stores nothing.
func TestInlineSecretsRefusedAtSave(t *testing.T) {
	e := newEnv(t)
	remote := model.McpConfig{Name: "remote", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://h.example/mcp?access_token=s3cr3t-url"}}
	err := wantErr(t, e.call("create", model.ConfigCreateRequest{Config: remote}, nil), apierr.Validation, "transport.url", "")
	if strings.Contains(err.Message, "s3cr3t") {
		t.Fatalf("the error quotes the secret: %s", err.Message)
	}
	cfg := stdio("args")
	cfg.Package.Args = []string{"--api-key=s3cr3t-arg"}
	err = wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Validation, "package.args.0", "")
	if strings.Contains(err.Message, "s3cr3t") {
		t.Fatalf("the error quotes the secret: %s", err.Message)
	}
}
