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
