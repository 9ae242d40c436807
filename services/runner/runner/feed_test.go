package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// feedResolver stands for the credential service's fingerprint feed: the
// values of servers this runner does not run.
type feedResolver struct {
	staticResolver
	mu     sync.Mutex
	values []string
}

func (f *feedResolver) set(values ...string) {
	f.mu.Lock()
	f.values = values
	f.mu.Unlock()
}

func (f *feedResolver) Fingerprints(context.Context) (model.FingerprintFeed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	feed := model.FingerprintFeed{Alg: fingerprint.Alg, Key: []byte("feed key of the test"), At: time.Now()}
	m := fingerprint.New(feed.Key)
	for _, v := range f.values {
		for _, form := range fingerprint.Forms(v) {
			s := m.Of([]byte(form))
			feed.Sums = append(feed.Sums, s[:]...)
			feed.Lengths = append(feed.Lengths, len(form))
		}
	}
	return feed, nil
}

// A stored secret of a server this runner never ran (only in the feed) is
// blocked in another server's arguments; a changed secret is blocked once
// its change event arrives (the periodic fetch is an hour away here), and
// the old value no longer is.
func TestFeedValuesBlocked(t *testing.T) {
	const (
		oldValue = "ghost-server-secret-01"
		newValue = "ghost-server-secret-02"
	)
	feed := &feedResolver{}
	feed.set(oldValue)
	opts := quickOpts()
	opts.Resolver, opts.SecretFeedInterval = feed, time.Hour
	e := runnertest.Start(t, opts)
	alpha := runnertest.Binary("alpha", testServer)
	alpha.Runtime.Eager = true
	e.Put(t, alpha)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	blocked := func(v string) bool {
		res, err := call(t, e, "alpha", "echo", `{"message":"`+v+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		var r callResult
		if err := json.Unmarshal(res, &r); err != nil || len(r.Content) == 0 {
			t.Fatalf("%s", res)
		}
		return r.IsError && strings.Contains(r.Content[0].Text, "rule mcpbus-known-secret")
	}
	waitUntil := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %s", what, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitUntil("the feed's value blocked", 5*time.Second, func() bool { return blocked(oldValue) })
	if blocked("an-ordinary-message-03") {
		t.Fatal("an ordinary message was blocked")
	}

	feed.set(newValue)
	ev, _ := json.Marshal(model.CredEvent{Type: model.CredChanged, ServerID: "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e", Via: "set", At: time.Now()})
	if err := e.NC.Publish(bus.NewSubjects("").Event("cred", "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"), ev); err != nil {
		t.Fatal(err)
	}
	took := waitUntil("the changed value blocked after its event", 2*time.Second, func() bool { return blocked(newValue) })
	t.Logf("the new value was blocked %s after the change event", took.Round(time.Millisecond))
	if blocked(oldValue) {
		t.Error("the old value is still blocked after the change")
	}
}
