package config_test

import (
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
