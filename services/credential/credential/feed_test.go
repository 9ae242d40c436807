package credential_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
	"github.com/mcpbus/mcpbus/services/credential/credential"
)

// TestFingerprintFeed: a runner gets the fingerprints of every stored value
// (servers', a chat profile's, OAuth tokens; not a principal's own, which
// any key may write with any values),
// sealed to its key; no value crosses the wire or is in the opened feed; a
// change (set, delete) is published on events.cred.<id> and the next feed
// follows it; no other identity may ask.
func TestFingerprintFeed(t *testing.T) {
	e := newRoleEnv(t, access.Runner, access.Gateway, access.Chat)
	ctx := ctxT(t)
	var tapMu sync.Mutex
	var wire [][]byte
	var changes []model.CredEvent
	if _, err := e.admin.Subscribe(">", func(m *nats.Msg) {
		tapMu.Lock()
		defer tapMu.Unlock()
		wire = append(wire, bytes.Clone(m.Data))
		var ev model.CredEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type == model.CredChanged && m.Subject == "mcp.v1.events.cred."+ev.ServerID {
			changes = append(changes, ev)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Flush(); err != nil {
		t.Fatal(err)
	}

	serverA, serverB := uuid.NewString(), uuid.NewString()
	principal := model.PrincipalCredentialID(serverA, "key:alice")
	values := map[string]string{
		"env":           "feed-env-secret-0001",
		"header token":  "feed-header-token-0002",
		"chat key":      "feed-chat-key-0003",
		"principal":     "feed-principal-0004",
		"oauth access":  "feed-oauth-access-0005",
		"oauth refresh": "feed-oauth-refresh-0006",
	}
	cl := credclient.New(e.conns[access.Gateway], "") // as the REST API writes
	set := func(kind model.CredentialKind, id string, c model.Credentials) {
		t.Helper()
		if _, err := cl.Set(ctx, model.CredSetRequest{ServerID: id, Kind: kind, Credentials: c}); err != nil {
			t.Fatalf("set %s %s: %v", kind, id, err)
		}
	}
	set(model.CredServer, serverA, model.Credentials{Env: map[string]string{"TOKEN": values["env"]},
		Headers: map[string]string{"Authorization": "Bearer " + values["header token"]}})
	set(model.CredChatProfile, model.ChatProfileCredentialID("work"), model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: values["chat key"]}})
	set(model.CredPrincipal, principal, model.Credentials{Headers: map[string]string{"X-Api-Key": values["principal"]}})
	set(model.CredServer, serverB, model.Credentials{OAuth: &model.OAuthToken{AccessToken: values["oauth access"], RefreshToken: values["oauth refresh"], EnvVar: "GH_TOKEN"}})

	runner, err := credclient.NewResolver(e.conns[access.Runner], "", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	feed, err := runner.Fingerprints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if feed.Records != 3 || len(feed.Key) != 32 || len(feed.Sums)%fingerprint.Size != 0 {
		t.Fatalf("feed of %d records, %d-byte key, %d bytes of sums", feed.Records, len(feed.Key), len(feed.Sums))
	}
	for label, v := range values {
		if label != "principal" && !holds(feed, v) {
			t.Errorf("the feed has no fingerprint of the %s", label)
		}
	}
	if holds(feed, values["principal"]) {
		t.Error("the feed holds a principal's own value: any key could make any word a known secret")
	}
	if holds(feed, "feed-never-stored-0007") {
		t.Error("the feed holds a value never stored")
	}
	// Fingerprints only: no value in the opened feed, nor anywhere on the
	// wire, as written or base64-encoded.
	opened, _ := json.Marshal(feed)
	tapMu.Lock()
	for label, v := range values {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(opened, []byte(form)) {
				t.Errorf("the opened feed holds the %s", label)
			}
			for _, m := range wire {
				if bytes.Contains(m, []byte(form)) {
					t.Errorf("a message on the wire holds the %s: %s", label, m)
				}
			}
		}
	}
	tapMu.Unlock()

	// A change: a new value of A, B's record deleted. Each is an event,
	// and the next feed follows.
	set(model.CredServer, serverA, model.Credentials{Env: map[string]string{"TOKEN": "feed-env-secret-NEW1"}})
	if _, err := cl.Delete(ctx, model.CredDeleteRequest{ServerID: serverB}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		tapMu.Lock()
		defer tapMu.Unlock()
		var setA, delB bool
		for _, ev := range changes {
			setA = setA || (ev.ServerID == serverA && ev.Via == "set")
			delB = delB || (ev.ServerID == serverB && ev.Via == "delete")
		}
		return setA && delB && len(changes) == 6 // 4 sets, then a set and a delete
	}, "the change events of 5 sets and a delete")
	if feed, err = runner.Fingerprints(ctx); err != nil {
		t.Fatal(err)
	}
	if !holds(feed, "feed-env-secret-NEW1") || holds(feed, values["env"]) || holds(feed, values["oauth access"]) || feed.Records != 2 {
		t.Errorf("after the change: new %v, old %v, deleted %v, %d records", holds(feed, "feed-env-secret-NEW1"), holds(feed, values["env"]), holds(feed, values["oauth access"]), feed.Records)
	}

	// Only runners may ask: the gateway's and the chat service's requests
	// never leave their connection.
	for _, role := range []access.Role{access.Gateway, access.Chat} {
		other, err := credclient.NewResolver(e.conns[role], "")
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		if _, err := other.Fingerprints(short); err == nil {
			t.Errorf("the %s identity got the feed", role)
		}
		cancel()
	}
	waitFor(t, func() bool {
		return e.violations[access.Gateway].on("mcp.v1.cred.fingerprints") && e.violations[access.Chat].on("mcp.v1.cred.fingerprints")
	}, "permission violations for cred.fingerprints (gateway, chat)")
}

// holds reports whether feed has the fingerprint of value.
func holds(feed model.FingerprintFeed, value string) bool {
	sum := fingerprint.New(feed.Key).Of([]byte(value))
	for i := 0; i+fingerprint.Size <= len(feed.Sums); i += fingerprint.Size {
		if bytes.Equal(feed.Sums[i:i+fingerprint.Size], sum[:]) {
			return true
		}
	}
	return false
}

// TestFingerprintFeedBounded: past MaxFingerprints the feed is cut (the
// same records every time, sorted by key) and says so.
func TestFingerprintFeedBounded(t *testing.T) {
	e := newEnv(t, func(o *credential.Options) { o.MaxFingerprints = 2 })
	ctx := ctxT(t)
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: uuid.NewString(), Credentials: model.Credentials{Env: map[string]string{
		"A": "bounded-value-0001", "B": "bounded-value-0002", "C": "bounded-value-0003"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	feed, err := r.Fingerprints(ctx)
	if err != nil || !feed.Truncated || len(feed.Sums) != 2*fingerprint.Size {
		t.Fatalf("feed: %v, truncated %v, %d bytes of sums", err, feed.Truncated, len(feed.Sums))
	}
}
