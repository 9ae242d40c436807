package credential_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

const secretChatKey = "sk-chat-0123456789abcdefSECRET"

// roleEnv is an embedded server whose users are identities with the
// permission table's rights (access.User) and an unrestricted observer; the
// credential service runs on the credential identity's connection.
type roleEnv struct {
	ns    *embednats.Server
	conns map[access.Role]*nats.Conn
	// violations are the permission errors each role's connection got.
	violations map[access.Role]*violations
	admin      *nats.Conn
	logs       *testkit.LogBuffer
}

type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) add(err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err)
	v.mu.Unlock()
}

// on reports whether a publish permission violation names subject.
func (v *violations) on(subject string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, err := range v.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "Publish") && strings.Contains(err.Error(), subject) {
			return true
		}
	}
	return false
}

func newRoleEnv(t *testing.T, roles ...access.Role) *roleEnv {
	t.Helper()
	ids, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roles = append(roles, access.Credential)
	var users []*server.NkeyUser
	idOf := map[access.Role]access.Identity{}
	for _, r := range roles {
		id, err := ids.Ensure(string(r), r)
		if err != nil {
			t.Fatal(err)
		}
		u, err := access.User(id, bus.DefaultPrefix)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
		idOf[r] = id
	}
	admin, _ := nkeys.CreateUser()
	adminPub, _ := admin.PublicKey()
	ns, err := embednats.Start(embednats.Options{Port: -1, Users: append(users, &server.NkeyUser{Nkey: adminPub})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	e := &roleEnv{ns: ns, conns: map[access.Role]*nats.Conn{}, violations: map[access.Role]*violations{}, logs: &testkit.LogBuffer{}}
	if e.admin, err = ns.ConnectTCP(nats.Nkey(adminPub, admin.Sign)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.admin.Close)
	for r, id := range idOf {
		kp, err := nkeys.FromSeed(id.Seed)
		if err != nil {
			t.Fatal(err)
		}
		v := &violations{}
		nc, err := ns.ConnectTCP(nats.Nkey(id.Public, kp.Sign), nats.CustomInboxPrefix(id.Inbox()),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { v.add(err) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		e.conns[r], e.violations[r] = nc, v
	}
	st, err := filestore.New(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := credential.New(e.conns[access.Credential], credential.Options{Store: st,
		Logger: slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunService(t, svc)
	t.Cleanup(func() {
		for _, s := range append([]string{secretChatKey}, allSecrets...) {
			if strings.Contains(e.logs.String(), s) {
				t.Errorf("the credential service log contains the secret %q", s)
			}
		}
	})
	return e
}

// TestChatKey: the chat identity reads back the API key of a stored chat
// profile on cred.chatkey, sealed to its own key and nothing else of the
// record; no other record can be asked for there; the registry identity may
// not publish on it at all; every answer leaves an audit event.
func TestChatKey(t *testing.T) {
	e := newRoleEnv(t, access.Chat, access.Registry, access.Config)
	ctx := ctxT(t)
	chat := e.conns[access.Chat]
	var mu sync.Mutex
	var events []model.CredEvent
	var eventSubjects []string
	sub, err := e.admin.Subscribe("mcp.v1.events.cred.>", func(m *nats.Msg) {
		var ev model.CredEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type != model.CredChanged { // resolves only (feed_test.go has the changes)
			mu.Lock()
			events, eventSubjects = append(events, ev), append(eventSubjects, m.Subject)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var tapMu sync.Mutex
	var wire []*nats.Msg
	if _, err := e.admin.Subscribe(">", func(m *nats.Msg) { tapMu.Lock(); wire = append(wire, m); tapMu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Flush(); err != nil {
		t.Fatal(err)
	}

	// The chat service stores a profile's key (as services/chat/profiles
	// does), with a stray extra variable that must not come back.
	profileID := model.ChatProfileCredentialID("work")
	if _, err := credclient.NewForChat(chat, "").Set(ctx, model.CredSetRequest{ServerID: profileID, Kind: model.CredChatProfile, Replace: true,
		Credentials: model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: secretChatKey, "OTHER": secretHeader}}}); err != nil {
		t.Fatal(err)
	}
	// A server's secrets (the config service's to write), which cred.chatkey
	// must never hand out.
	serverID := uuid.NewString()
	if _, err := credclient.New(e.conns[access.Config], "").Set(ctx, model.CredSetRequest{ServerID: serverID,
		Credentials: model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(chat, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := res.ChatKey(ctx, "work"); err != nil || got != secretChatKey {
		t.Fatalf("the profile's key: %v", err)
	}

	// Only the key: a raw request opened by hand holds API_KEY alone.
	kp, _ := nkeys.CreateCurveKeys()
	pub, _ := kp.PublicKey()
	var reply model.SealedReply
	if err := bus.RequestJSON(ctx, chat, "mcp.v1.cred.chatkey", credclient.ChatKeyRequest{Profile: "work", RecipientKey: pub}, &reply, 0); err != nil {
		t.Fatal(err)
	}
	plain, err := kp.Open(reply.Sealed, reply.SenderKey)
	if err != nil {
		t.Fatal(err)
	}
	var opened model.ResolvedCredentials
	if err := json.Unmarshal(plain, &opened); err != nil {
		t.Fatal(err)
	}
	if len(opened.Env) != 1 || opened.Env[model.ChatAPIKeyEnv] != secretChatKey || opened.Headers != nil || opened.Keyfiles != nil {
		t.Fatalf("the reply holds more than the key: %d env vars", len(opened.Env))
	}

	// No other record: the id is derived from the profile name, a server id
	// given as a name names no record, and server_id is not a field.
	if _, err := res.ChatKey(ctx, serverID); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("a server id as the profile: %v, want NOT_FOUND", err)
	}
	if _, err := res.ChatKey(ctx, "missing"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("a profile with no key: %v, want NOT_FOUND", err)
	}
	for _, body := range []any{
		map[string]string{"server_id": serverID, "recipient_key": pub},
		map[string]string{"profile": "work", "server_id": serverID, "recipient_key": pub},
		map[string]string{"server_id": model.RegistryCredentialsID, "recipient_key": pub},
		credclient.ChatKeyRequest{Profile: "work.>", RecipientKey: pub},
		credclient.ChatKeyRequest{Profile: "", RecipientKey: pub},
	} {
		var out model.SealedReply
		if err := bus.RequestJSON(ctx, chat, "mcp.v1.cred.chatkey", body, &out, 0); apierr.Of(err) != apierr.Validation {
			t.Fatalf("%+v: %v, want VALIDATION_ERROR", body, err)
		}
	}
	var out model.SealedReply
	if err := bus.RequestJSON(ctx, chat, "mcp.v1.cred.chatkey", credclient.ChatKeyRequest{Profile: "work", RecipientKey: "Unot-a-curve-key"}, &out, 0); apierr.Of(err) != apierr.Validation {
		t.Fatalf("a bad recipient key: %v, want VALIDATION_ERROR", err)
	}

	// The registry identity may not publish on cred.chatkey (nor the chat
	// identity on cred.registry or cred.resolve): NATS refuses.
	reg, err := credclient.NewResolver(e.conns[access.Registry], "")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := reg.ChatKey(short, "work"); err == nil {
		t.Fatal("the registry identity got a chat profile's key")
	}
	cancel()
	chatAsRegistry, err := credclient.NewResolver(chat, "", credclient.ForRegistry())
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := chatAsRegistry.Resolve(short, model.RegistryCredentialsID); err == nil {
		t.Fatal("the chat identity resolved on cred.registry")
	}
	cancel()
	waitFor(t, func() bool {
		return e.violations[access.Registry].on("mcp.v1.cred.chatkey") && e.violations[access.Chat].on("mcp.v1.cred.registry")
	}, "permission violations for cred.chatkey (registry) and cred.registry (chat)")

	// Audit: one event per answer, on events.cred.<profile credential id>,
	// via chatkey, without a runner and without a value.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(events) >= 5 }, "the audit events")
	mu.Lock()
	var resolvedN, refusedNotFound int
	for i, ev := range events {
		if ev.Via != credential.VerbChatKey || ev.Runner != "" {
			t.Errorf("event %+v", ev)
		}
		if eventSubjects[i] != "mcp.v1.events.cred."+ev.ServerID {
			t.Errorf("event of %s on %s", ev.ServerID, eventSubjects[i])
		}
		switch {
		case ev.Type == model.CredResolved && ev.ServerID == profileID:
			resolvedN++
		case ev.Type == model.CredRefused && ev.Code == string(apierr.NotFound):
			refusedNotFound++
		}
		if ev.ServerID == serverID || ev.ServerID == model.RegistryCredentialsID {
			t.Errorf("an event names a record cred.chatkey may not read: %+v", ev)
		}
	}
	mu.Unlock()
	if resolvedN != 2 || refusedNotFound != 2 {
		t.Errorf("resolved %d (want 2), refused NOT_FOUND %d (want 2)", resolvedN, refusedNotFound)
	}

	// Nothing on the wire in clear.
	if err := e.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	tapMu.Lock()
	defer tapMu.Unlock()
	for _, m := range wire {
		for _, s := range []string{secretChatKey, secretHeader, secretEnv} {
			if carries(m, s) {
				t.Errorf("%s carries a secret", m.Subject)
			}
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
