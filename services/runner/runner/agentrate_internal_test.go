package runner

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// gone is the KV entry of a deleted record.
type gone struct {
	jetstream.KeyValueEntry
	key string
}

func (g gone) Key() string                     { return g.key }
func (g gone) Operation() jetstream.KeyValueOp { return jetstream.KeyValueDelete }

// A runner kept the token bucket of every agent it ever served, its
// record long deleted: the buckets go with the records.
func TestAgentRatesGoWithRecords(t *testing.T) {
	r := &Runner{agents: map[string]model.AgentRecord{}}
	h := r.forgetRates(followCache(&r.mu, r.agents, decodeJSON[model.AgentRecord]))
	buckets := func() (n int) {
		r.agentRates.Range(func(any, any) bool { n++; return true })
		return n
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := r.admit(caller{agent: name}); err != nil {
			t.Fatal(err)
		}
	}
	h.Update(gone{key: "a"})
	if n := buckets(); n != 2 {
		t.Fatalf("%d buckets after a record was deleted, want 2", n)
	}
	h.Snapshot(map[string]jetstream.KeyValueEntry{}) // the watch started over: b and c are gone too
	if n := buckets(); n != 0 {
		t.Fatalf("%d buckets after a snapshot without records, want 0", n)
	}
}

// A revoked agent's upstream sessions leave the map when its record's
// delete is followed, before any later record of the name (an agent made
// again, the same principal agent:<name>) is: the new agent's calls, which
// wait for that record, never find a session opened with the revoked one's
// credentials. Other principals keep theirs.
func TestRevokedAgentSessionsGoWithItsRecord(t *testing.T) {
	s := &server{}
	s.principals.byID = map[string]*principalSession{}
	for _, who := range []string{"agent:a", "agent:ab", "key:a"} {
		s.principals.byID[who] = &principalSession{ready: make(chan struct{})} // still starting: nothing to close
	}
	r := &Runner{agents: map[string]model.AgentRecord{}, servers: map[string]*server{"remote": s}}
	h := r.forgetRates(followCache(&r.mu, r.agents, decodeJSON[model.AgentRecord]))
	h.Update(gone{key: "a"})
	s.principals.mu.Lock()
	defer s.principals.mu.Unlock()
	if _, ok := s.principals.byID["agent:a"]; ok {
		t.Error("the revoked agent's session is still there once its record's delete was followed")
	}
	for _, who := range []string{"agent:ab", "key:a"} {
		if _, ok := s.principals.byID[who]; !ok {
			t.Errorf("%s's session went with agent a's record", who)
		}
	}
}

// held is the KV entry of a stored record.
type held struct {
	jetstream.KeyValueEntry
	key string
}

func (h held) Key() string                     { return h.key }
func (h held) Value() []byte                   { return []byte(`{}`) }
func (h held) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// An agent revoked while the runner's watch of the records was down (NATS
// reconnected, the bucket's leader changed) is not told as a delete: the
// watch starts over with a snapshot that lacks the record, or, when an
// agent was made again with the name meanwhile (the same principal,
// agent:<name>), holds a record as if nothing happened. Every agent's
// upstream sessions go then, or the namesake would call upstream on the
// revoked one's, opened with its credentials. Other principals keep theirs.
func TestAgentSessionsGoWithASnapshot(t *testing.T) {
	s := &server{}
	s.principals.byID = map[string]*principalSession{}
	for _, who := range []string{"agent:a", "agent:ab", "key:a"} {
		s.principals.byID[who] = &principalSession{ready: make(chan struct{})} // still starting: nothing to close
	}
	r := &Runner{agents: map[string]model.AgentRecord{}, servers: map[string]*server{"remote": s}}
	h := r.forgetRates(followCache(&r.mu, r.agents, decodeJSON[model.AgentRecord]))
	h.Snapshot(map[string]jetstream.KeyValueEntry{"ab": held{key: "ab"}}) // a gone; ab revoked and made again, or not
	s.principals.mu.Lock()
	defer s.principals.mu.Unlock()
	for _, who := range []string{"agent:a", "agent:ab"} {
		if _, ok := s.principals.byID[who]; ok {
			t.Errorf("%s's session is still there once the watch started over", who)
		}
	}
	if _, ok := s.principals.byID["key:a"]; !ok {
		t.Error("key:a's session went with the agents' snapshot")
	}
	if _, ok := r.agents["ab"]; !ok {
		t.Error("the snapshot's record is not followed")
	}
}
