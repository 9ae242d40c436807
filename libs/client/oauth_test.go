package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestAuthorizeServerWaitKeepsItsOutcome: the waiter hears the OAuth
// events of every server (it does not know the slug before the start
// answers); a burst of other flows' outcomes while the start is under way,
// and the caller's pause before it waits (printing the URL, opening a
// browser), must not cost it its own outcome. With a buffer of 8 that
// nats.go drops past, the outcome published after the start's reply was
// lost and the wait ran to its limit.
func TestAuthorizeServerWaitKeepsItsOutcome(t *testing.T) {
	ns := testkit.NATS(t)
	gw, nc := testkit.Connect(t, ns), testkit.Connect(t, ns)
	subj := bus.NewSubjects("")
	publish := func(ev model.OAuthEvent) {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Error(err)
			return
		}
		if err := gw.Publish(subj.Event("oauth", ev.Server), data); err != nil {
			t.Error(err)
		}
	}
	// The gateway's oauth.start: other users' flows end while it prepares
	// this one, then this one fails soon after the URL is handed out (a
	// newer flow replaced it).
	if _, err := gw.Subscribe(subj.Service("oauth", "start"), func(m *nats.Msg) {
		for i := range 64 {
			publish(model.OAuthEvent{Type: model.OAuthAuthorized, Server: fmt.Sprintf("other-%d", i), At: time.Now()})
		}
		reply, _ := json.Marshal(model.OAuthStartReply{Server: "remote", AuthorizationURL: "https://as.example/authorize?state=s",
			ExpiresAt: time.Now().Add(5 * time.Second)})
		_ = m.Respond(reply)
		publish(model.OAuthEvent{Type: model.OAuthFailed, Server: "remote", Code: string(apierr.ServiceUnavailable), Message: "cancelled", At: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, wait, err := client.New(nc, client.Options{}).AuthorizeServer(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the CLI prints the URL, opens a browser
	began := time.Now()
	err = wait(ctx)
	if e := apierr.From(err); e.Code != apierr.ServiceUnavailable || e.Message != "cancelled" {
		t.Fatalf("wait: %v after %s, want the flow's own outcome", err, time.Since(began).Round(time.Millisecond))
	}
}
