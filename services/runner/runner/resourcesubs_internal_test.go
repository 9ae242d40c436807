package runner

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// An update of the server's current session is published though the
// lease's entry names the session before a restart: a subscribe begun on
// the old session records it after resubscribe recorded the new one, and
// the new session's updates were dropped until the next renewal, a minute
// later. One of a session no longer the server's is not published.
func TestResourceUpdatedOfTheCurrentSession(t *testing.T) {
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
	events, err := nc.SubscribeSync(bus.NewSubjects("").EventsOf("resource_updated"))
	if err != nil {
		t.Fatal(err)
	}

	// Two sessions of one go-sdk server: the one before the restart and
	// the one after.
	upstream := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session := func() *mcp.ClientSession {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := upstream.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	before, after := session(), session()

	r := &Runner{nc: nc, subj: bus.NewSubjects(""), log: quiet}
	s := &server{r: r, slug: "alpha", log: quiet, sess: after}
	s.subs.byURI = map[string]*resourceSub{"test://greeting": {until: time.Now().Add(model.ResourceSubscriptionLease), on: before}}

	update := func(sess *mcp.ClientSession) {
		s.onResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationRequest{Session: sess, Params: &mcp.ResourceUpdatedNotificationParams{URI: "test://greeting"}})
	}
	update(after)
	if _, err := events.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the current session's update was not published: %v", err)
	}
	time.Sleep(noticeEvery) // past the coalescing
	update(before)
	if m, err := events.NextMsg(2 * noticeEvery); err == nil {
		t.Fatalf("an update of the session before the restart was published: %s", m.Data)
	}
}
