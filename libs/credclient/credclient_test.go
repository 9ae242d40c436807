package credclient_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The end-to-end tests with the real service are in
// services/credential/credential; these cover the client's own behaviour
// against raw NATS responders.

func connect(t *testing.T) *nats.Conn {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true})
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

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const serverID = "0b6f1f3e-6f7a-4c59-9a55-2f0d7c1b9e11"

func TestNoService(t *testing.T) {
	nc := connect(t)
	ctx := ctxT(t)
	res, err := credclient.NewResolver(nc, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = res.Resolve(ctx, serverID)
	if e := apierr.From(err); e.Code != apierr.ServiceUnavailable || e.Message != "credential service not reachable" {
		t.Fatalf("Resolve without a service: %v", err)
	}
	c := credclient.New(nc, "")
	if _, err := c.Set(ctx, model.CredSetRequest{ServerID: serverID}); apierr.From(err).Message != "credential service not reachable" {
		t.Fatalf("Set without a service: %v", err)
	}
	if _, err := c.Delete(ctx, model.CredDeleteRequest{ServerID: serverID}); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Delete without a service: %v", err)
	}
	if _, err := c.Describe(ctx, model.CredDescribeRequest{ServerID: serverID}); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Describe without a service: %v", err)
	}
}

func TestResolverOpensOnlyItsOwnReplies(t *testing.T) {
	nc := connect(t)
	ctx := ctxT(t)
	sender, _ := nkeys.CreateCurveKeys()
	senderPub, _ := sender.PublicKey()
	stranger, _ := nkeys.CreateCurveKeys()
	strangerPub, _ := stranger.PublicKey()
	var sealTo string // "" seals to the requester
	var sawKey string
	sub, err := nc.Subscribe(bus.NewSubjects("custom.v9").Service("cred", "resolve"), func(m *nats.Msg) {
		var in model.CredResolveRequest
		if err := json.Unmarshal(m.Data, &in); err != nil || in.ServerID == "" {
			_ = m.RespondMsg(bus.ErrorMsg(apierr.Invalid("server_id", "bad")))
			return
		}
		sawKey = in.RecipientKey
		if in.ServerID != serverID {
			_ = m.RespondMsg(bus.ErrorMsg(apierr.New(apierr.Unauthorized, "OAuth token expired and refresh failed")))
			return
		}
		to := in.RecipientKey
		if sealTo != "" {
			to = sealTo
		}
		plain, _ := json.Marshal(model.ResolvedCredentials{Env: map[string]string{"TOKEN": "v"}})
		sealed, err := sender.Seal(plain, to)
		if err != nil {
			_ = m.RespondMsg(bus.ErrorMsg(err))
			return
		}
		out, _ := json.Marshal(model.SealedReply{SenderKey: senderPub, Sealed: sealed})
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	res, err := credclient.NewResolver(nc, "custom.v9")
	if err != nil {
		t.Fatal(err)
	}
	if !nkeys.IsValidPublicCurveKey(res.PublicKey()) {
		t.Fatalf("resolver key %q is not a curve key", res.PublicKey())
	}
	got, err := res.Resolve(ctx, serverID)
	if err != nil || got.Env["TOKEN"] != "v" {
		t.Fatalf("Resolve: %+v, %v", got, err)
	}
	if sawKey != res.PublicKey() {
		t.Fatalf("the request carried %q, not the resolver's key", sawKey)
	}
	// The same key pair is used for every request.
	if _, err := res.Resolve(ctx, serverID); err != nil || sawKey != res.PublicKey() {
		t.Fatalf("second Resolve: %v", err)
	}
	// A reply sealed for someone else does not open.
	sealTo = strangerPub
	if _, err := res.Resolve(ctx, serverID); apierr.Of(err) != apierr.Internal {
		t.Fatalf("a reply sealed to another key: %v", err)
	}
	// Error replies come through as the contract.
	_, err = res.Resolve(ctx, "11111111-2222-4333-8444-555555555555")
	if e := apierr.From(err); e.Code != apierr.Unauthorized || e.Message != "OAuth token expired and refresh failed" {
		t.Fatalf("error reply: %v", err)
	}
}
