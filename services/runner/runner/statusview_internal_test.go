package runner

import (
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestMarkGone: a status is marked when its runner has no heartbeat, or is
// alive without the server's lease (with the lease's new holder, if any),
// and left alone when the runner is alive with a lease of the server, is the
// answering one, or the state needs no runner.
func TestMarkGone(t *testing.T) {
	owners := map[string]ownerEntry{
		beatPrefix + "r1": {Runner: "r1"},
		beatPrefix + "r2": {Runner: "r2"},
		leaseKey("a", 0):  {Runner: "r1"},
		leaseKey("b", 0):  {Runner: "r2"}, // r3's server b, taken over by r2
		leaseKey("g", 0):  {Runner: "r2"},
		leaseKey("g", 1):  {Runner: "r1"}, // g has two replicas
		leaseKey("i", 0):  {Runner: "r2"}, // r1 dropped i, r2 took it
	}
	cases := []struct {
		st   model.Status
		want string // the message's prefix; "" for unchanged
	}{
		{model.Status{Server: "a", State: model.StateRunning, Runner: "r1"}, ""},
		{model.Status{Server: "a", State: model.StateRunning, Runner: "r3"}, "runner r3 is gone (no heartbeat); runner r1 holds its lease now"},
		{model.Status{Server: "j", State: model.StateRunning, Runner: "r3"}, "runner r3 is gone (no heartbeat); no runner holds its lease yet"},
		{model.Status{Server: "b", State: model.StateRunning, Runner: "r3"}, "runner r3 is gone (no heartbeat); runner r2 holds its lease now"},
		{model.Status{Server: "c", State: model.StateError, Runner: "r3", Message: "crashed"}, "runner r3 is gone (no heartbeat); no runner holds its lease yet; crashed"},
		{model.Status{Server: "d", State: model.StateRunning, Runner: "self"}, ""},
		{model.Status{Server: "e", State: model.StateStopped, Runner: "r3"}, ""},
		{model.Status{Server: "f", State: model.StateDisabled}, ""},
		{model.Status{Server: "g", State: model.StateRunning, Runner: "r1"}, ""},
		{model.Status{Server: "h", State: model.StateRunning, Runner: "r1", Message: "pid 42"}, "runner r1 no longer holds its lease; no runner holds its lease yet; pid 42"},
		{model.Status{Server: "i", State: model.StateIdle, Runner: "r1"}, "runner r1 no longer holds its lease; runner r2 holds its lease now"},
	}
	for _, c := range cases {
		st := c.st
		markGone(&st, "self", owners)
		if c.want == "" {
			if st.Message != c.st.Message {
				t.Errorf("%s on %s (%s): message %q, want it unchanged", st.Server, st.Runner, st.State, st.Message)
			}
			continue
		}
		if st.Message != c.want || st.State != c.st.State || st.Runner != c.st.Runner {
			t.Errorf("%s on %s: got %s %s %q, want %s %s %q", st.Server, c.st.Runner, st.State, st.Runner, st.Message, c.st.State, c.st.Runner, c.want)
		}
	}
}

// TestAllStatusWaitsForOwners: before the owners watch has a snapshot, no
// runner is taken for gone; after it, the dead runner's status is marked.
func TestAllStatusWaitsForOwners(t *testing.T) {
	r := &Runner{opts: Options{ID: "r1"}, owners: map[string]ownerEntry{beatPrefix + "r1": {Runner: "r1"}},
		status: map[string]model.Status{"a": {Server: "a", State: model.StateRunning, Runner: "r3"}}}
	if got := r.allStatus().Servers[0].Message; got != "" {
		t.Fatalf("before the owners snapshot: message %q, want none", got)
	}
	r.ownersLoaded.Store(true)
	if got := r.allStatus().Servers[0].Message; !strings.HasPrefix(got, "runner r3 is gone") {
		t.Fatalf("after the owners snapshot: message %q, want r3 marked gone", got)
	}
	if r.status["a"].Message != "" {
		t.Fatal("allStatus changed the cache itself")
	}
}
