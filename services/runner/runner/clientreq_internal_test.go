package runner

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The only-one-in-flight rule with calls given up: a call of another
// principal that ended unanswered keeps the session's requests from every
// other principal's call until its bound passes; two calls in flight are
// refused whatever the doubts.
func TestClientReqTargetsInDoubt(t *testing.T) {
	var c clientTargets
	sess, other := &mcp.ClientSession{}, &mcp.ClientSession{}
	alice1, alice2 := &clientTarget{principal: "key:alice"}, &clientTarget{principal: "key:alice"}
	bob := &clientTarget{principal: "key:bob"}
	gone, stop := context.WithCancel(context.Background())
	stop()

	check := func(what string, s *mcp.ClientSession, want *clientTarget, wantLate bool) {
		t.Helper()
		if got, late := c.only(s); got != want || late != wantLate {
			t.Fatalf("%s: only = %p (late %v), want %p (late %v)", what, got, late, want, wantLate)
		}
	}

	c.enter(sess, alice1)
	c.leave(sess, alice1, unanswered(context.Background(), "key:alice", time.Hour))
	c.enter(sess, bob)
	check("after alice's answered call", sess, bob, false)
	c.leave(sess, bob, inDoubt{})

	c.enter(sess, alice1)
	c.leave(sess, alice1, unanswered(gone, "key:alice", 200*time.Millisecond))
	c.enter(sess, bob)
	check("bob after alice's call given up", sess, nil, true)
	c.enter(other, bob)
	check("bob on another session", other, bob, false)
	c.leave(other, bob, inDoubt{})
	c.leave(sess, bob, inDoubt{})

	c.enter(sess, alice2)
	check("alice after her own call given up", sess, alice2, false)
	c.enter(sess, nil) // an rpc, or a call without a client subject
	check("alice with another operation in flight", sess, nil, false)
	c.leave(sess, nil, inDoubt{})
	c.leave(sess, alice2, inDoubt{})

	time.Sleep(250 * time.Millisecond)
	c.enter(sess, bob)
	check("bob after the bound", sess, bob, false)
	c.leave(sess, bob, unanswered(gone, "key:bob", time.Nanosecond))
	time.Sleep(time.Millisecond)
	c.enter(other, alice1)
	c.leave(other, alice1, unanswered(gone, "key:alice", time.Hour))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.doubt) != 1 || len(c.doubt[other]) != 1 || len(c.bySession) != 0 {
		t.Fatalf("left: doubts %v, sessions %v; want alice's on the other session alone (the passed ones pruned)", c.doubt, c.bySession)
	}
}
