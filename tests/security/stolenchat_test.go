package security

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestStolenChatSeed: the chat identity stores its profiles' API keys, and
// nothing else: with its seed, an attacker can neither replace nor delete
// nor describe a server's secrets (the subjects are refused by NATS), and
// the chat's own verbs refuse every other kind of record.
func TestStolenChatSeed(t *testing.T) {
	store, st := stackWithStolenSeed(t, "chat-2", access.Chat)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "vault", Enabled: false,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		EnvVars:   map[string]model.EnvVar{"TOP_SECRET": {IsSecret: true}},
		Transport: model.Transport{Type: model.TransportStdio}},
		&model.Credentials{Env: map[string]string{"TOP_SECRET": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}

	var v violations
	nc, err := connectSeed(t, st, store.SeedFile("chat-2"), access.Inbox("chat-2"), &v)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := bus.NewSubjects("")
	for _, verb := range []string{"set", "delete", "describe"} {
		body, _ := json.Marshal(model.CredDeleteRequest{ServerID: cfg.ID, Kind: model.CredServer})
		if _, err := nc.Request(subj.Service("cred", verb), body, 2*time.Second); err == nil {
			t.Errorf("cred.%s answered the chat identity", verb)
		}
		if !v.wait(subj.Service("cred", verb)) {
			t.Errorf("no permissions violation for cred.%s", verb)
		}
	}
	// Its own verbs, asked about a server's record.
	chat := credclient.NewForChat(nc, "")
	_, err = chat.Delete(ctx, model.CredDeleteRequest{ServerID: cfg.ID, Kind: model.CredServer})
	if apierr.Of(err) != apierr.Validation {
		t.Errorf("cred.chatdelete of a server's secrets: %v, want VALIDATION_ERROR", err)
	}
	_, err = chat.Set(ctx, model.CredSetRequest{ServerID: cfg.ID, Kind: model.CredServer, Replace: true,
		Credentials: model.Credentials{Env: map[string]string{"TOP_SECRET": "attacker"}}})
	if apierr.Of(err) != apierr.Validation {
		t.Errorf("cred.chatset of a server's secrets: %v, want VALIDATION_ERROR", err)
	}
	d, err := credclient.New(st.Conn, "").Describe(ctx, model.CredDescribeRequest{ServerID: cfg.ID, Kind: model.CredServer})
	if err != nil || len(d.Env) != 1 {
		t.Fatalf("the server's secrets after the attempts: %+v %v", d, err)
	}
}
