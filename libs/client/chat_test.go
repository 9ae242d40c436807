package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// startNATS is an embedded NATS server and a connection to it.
func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// A profile's API key crosses the bus sealed to the credential service's
// key (only it can open it); the revision read goes back; errors keep the
// contract; nobody answering says the chat service is not running.
func TestPutProfileSealsTheKey(t *testing.T) {
	nc := startNATS(t)
	c := client.New(nc, client.Options{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if _, err := c.ListProfiles(ctx); apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "chat service is not running") {
		t.Fatalf("no chat service: %v", err)
	}

	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := curve.PublicKey()
	subj := bus.NewSubjects("")
	if _, err := nc.Subscribe(subj.Service("cred", credclient.VerbKey), func(m *nats.Msg) {
		b, _ := json.Marshal(model.CredKeyReply{PublicKey: pub})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var raw [][]byte
	if _, err := nc.Subscribe(subj.Service("chat", "profiles.put"), func(m *nats.Msg) {
		mu.Lock()
		raw = append(raw, m.Data)
		mu.Unlock()
		var req model.ChatProfilePutRequest
		_ = json.Unmarshal(m.Data, &req)
		if req.Profile.Revision == 1 {
			_ = m.RespondMsg(bus.ErrorMsg(apierr.New(apierr.Conflict, "profile w changed since revision 1 (now 2)")))
			return
		}
		p := req.Profile
		p.HasAPIKey, p.Revision = len(req.Sealed) > 0, 2
		b, _ := json.Marshal(p)
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}

	const key = "sk-unit-9a8b7c"
	out, err := c.PutProfile(ctx, model.Profile{Name: "w", Provider: "openai", Model: "m"}, client.ProfileKey{Set: key})
	if err != nil || !out.HasAPIKey || out.Revision != 2 {
		t.Fatalf("put: %+v, %v", out, err)
	}
	mu.Lock()
	body := raw[0]
	mu.Unlock()
	if strings.Contains(string(body), key) {
		t.Fatalf("the key crossed the bus in clear: %s", body)
	}
	var req model.ChatProfilePutRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	creds, err := credclient.Open(curve, req.Sealed, req.SenderKey, credclient.FieldSealed, "")
	if err != nil || creds.Env[model.ChatAPIKeyEnv] != key || len(creds.Env) != 1 {
		t.Fatalf("the credential service would open %+v (%v)", creds, err)
	}

	_, err = c.PutProfile(ctx, model.Profile{Name: "w", Provider: "openai", Model: "m", Revision: 1}, client.ProfileKey{})
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("a stale revision: %v", err)
	}
	if _, err := c.PutProfile(ctx, model.Profile{Name: "w"}, client.ProfileKey{Set: "k", Remove: true}); apierr.Of(err) != apierr.Validation {
		t.Fatalf("set and remove at once: %v", err)
	}
}
