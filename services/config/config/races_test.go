package config_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// With MCP_EVENTS missing (or electing a leader) a write answers within a
// fraction of the callers' config timeout (libs/client: 15 s), made: it used
// to wait out the event's 15 s of retries, so the caller saw a timeout and its
// retry a conflict. The events follow, in order, once the stream is back.
func TestWriteDoesNotWaitForTheEventsStream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	streamCfg := st.CachedInfo().Config
	if err := e.js.DeleteStream(ctx, bus.StreamEvents); err != nil {
		t.Fatal(err)
	}
	write := func(verb string, in, out any) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := bus.RequestJSON(rctx, e.nc, e.subj.Service("config", verb), in, out, 0); err != nil {
			t.Fatalf("%s without an events stream: %v (after %s)", verb, err, time.Since(start).Round(time.Millisecond))
		}
	}
	var c, u model.McpConfig
	write("create", model.ConfigCreateRequest{Config: stdio("Quiet")}, &c)
	up := c
	up.Package.Args = []string{"--v2"}
	write("update", model.ConfigUpdateRequest{Config: up}, &u)
	if got, err := e.get("quiet"); err != nil || got.Revision != u.Revision {
		t.Fatalf("stored: %+v %v", got, err)
	}
	if _, err := e.js.CreateStream(ctx, streamCfg); err != nil {
		t.Fatal(err)
	}
	want := []string{"created:quiet", "updated:quiet"}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if got = eventTypes(e.events()); len(got) >= len(want) {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events once the stream is back: %v, want %v", got, want)
	}
}

// A delete racing an update (here a rename that adds a secret, written while
// the delete's secret removal is answered late) deletes the config as it is
// then: the KV delete is at the revision read, and a newer one is read again.
// It used to delete the update's config unconditionally and clean up by the
// slug it read first: the update's secrets and its slug stayed, and the
// event named the old slug.
func TestDeleteRacesUpdate(t *testing.T) {
	e := newEnv(t)
	orig := stdio("Alpha")
	orig.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}}
	c := e.mustCreate(orig, &model.Credentials{Env: map[string]string{"API_KEY": "v1"}})
	var once sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	e.cred.onRequest(func(verb string, _ []byte) bool {
		if verb == "delete" {
			once.Do(func() { close(entered) })
			<-release
		}
		return true
	})
	done := make(chan error, 1)
	go func() { done <- e.call("delete", model.ConfigRef{Server: c.Slug}, nil) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delete did not reach the credential service")
	}
	upd := c
	upd.Slug = "beta"
	upd.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true, SecretRef: "API_KEY"}, "NEW_KEY": {IsSecret: true}}
	err := e.call("update", model.ConfigUpdateRequest{Config: upd, Secrets: &model.Credentials{Env: map[string]string{"API_KEY": "v1b", "NEW_KEY": "v2"}}}, nil)
	close(release)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := e.kv(bus.BucketConfigs).Get(context.Background(), c.ID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("config after the delete: %v", err)
	}
	if k := e.keys(bus.BucketSlugs); len(k) != 0 {
		t.Fatalf("slugs left: %v", k)
	}
	if creds, ok := e.cred.get(c.ID); ok {
		t.Fatalf("secrets left for the deleted server: %v", creds.Env)
	}
	want := []string{"created:alpha", "updated:beta", "deleted:beta"}
	if got := eventTypes(e.events()); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A delete whose config removal fails after the secrets were removed cannot
// put them back (the config service never reads secrets): the error says so,
// and that the delete is to be retried.
func TestDeleteFailingAfterSecretsSaysRetry(t *testing.T) {
	e := newEnv(t)
	orig := stdio("Alpha")
	orig.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}}
	c := e.mustCreate(orig, &model.Credentials{Env: map[string]string{"API_KEY": "v1"}})
	e.cred.onRequest(func(verb string, _ []byte) bool {
		if verb == "delete" {
			// The store fails right then: its stream sealed refuses the delete.
			ctx := context.Background()
			st, err := e.js.Stream(ctx, "KV_"+bus.BucketConfigs)
			if err == nil {
				cfg := st.CachedInfo().Config
				cfg.Sealed = true
				_, err = e.js.UpdateStream(ctx, cfg)
			}
			if err != nil {
				t.Errorf("sealing: %v", err)
			}
		}
		return true
	})
	err := e.call("delete", model.ConfigRef{Server: c.Slug}, nil)
	got := wantErr(t, err, apierr.ServiceUnavailable, "", "")
	if !strings.Contains(got.Message, "secrets") || !strings.Contains(got.Message, "retry the delete") {
		t.Fatalf("message %q does not say the secrets are gone and to retry", got.Message)
	}
	if _, ok := e.cred.get(c.ID); ok {
		t.Fatal("secrets still there: the failure was not after their removal")
	}
	if _, err := e.get(c.Slug); err != nil {
		t.Fatalf("config after the failed delete: %v", err)
	}
}

// Two identical renames of one config: the first reserves the new slug, the
// second finds it held by the same id and wins the write, the first loses
// its compare-and-set. The loser's undo must not release the reservation the
// winner's config now relies on.
func TestRenameRaceKeepsReservation(t *testing.T) {
	e := newEnv(t)
	orig := stdio("Alpha")
	orig.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true}}
	c := e.mustCreate(orig, &model.Credentials{Env: map[string]string{"API_KEY": "v1"}})
	var once sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	var mu sync.Mutex
	e.cred.onRequest(func(verb string, data []byte) bool {
		mu.Lock()
		hold := verb == "set" && isWrite(data) && first
		if hold {
			first = false
		}
		mu.Unlock()
		if hold {
			once.Do(func() { close(entered) })
			<-release
		}
		return true
	})
	rename := func(value string) error {
		upd := c
		upd.Slug = "beta"
		upd.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, SecretRef: "API_KEY"}}
		return e.call("update", model.ConfigUpdateRequest{Config: upd, Secrets: &model.Credentials{Env: map[string]string{"API_KEY": value}}}, nil)
	}
	loser := make(chan error, 1)
	go func() { loser <- rename("v2") }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first rename did not store its secrets")
	}
	if err := rename("v3"); err != nil {
		t.Fatalf("second rename: %v", err)
	}
	close(release)
	wantErr(t, <-loser, apierr.Conflict, "revision", "")
	got, err := e.get("beta")
	if err != nil || got.ID != c.ID {
		t.Fatalf("renamed config: %+v %v", got, err)
	}
	entry, err := e.kv(bus.BucketSlugs).Get(context.Background(), "beta")
	if err != nil || string(entry.Value()) != c.ID {
		t.Fatalf("reservation of beta: %v (the config uses it)", err)
	}
	if k := e.keys(bus.BucketSlugs); !slices.Equal(k, []string{"beta"}) {
		t.Fatalf("slugs %v", k)
	}
}
