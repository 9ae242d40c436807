package jwtauth_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
)

// Two admins revoke one subject at once through two gateway instances:
// both instances end up with the cutoff the bucket holds. Before, an
// instance stored its own revocation after its write was acknowledged,
// over whatever its watch had applied meanwhile: when the other instance's
// later write reached the watch first, the instance kept its own, earlier,
// cutoff (accepting tokens the others refuse) until the next revocation.
func TestConcurrentSubjectRevocationsConverge(t *testing.T) {
	ns := testkit.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	open := func() *jwtauth.Revocations {
		js, err := jetstream.New(testkit.Connect(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		r, err := jwtauth.OpenRevocations(ctx, js, jwtauth.RevocationOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	a, b := open(), open()
	js, err := jetstream.New(testkit.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, jwtauth.BucketRevocations)
	if err != nil {
		t.Fatal(err)
	}
	const sub = "alice"
	var key string
	for round := range 60 {
		var wg sync.WaitGroup
		for _, r := range []*jwtauth.Revocations{a, b} {
			wg.Go(func() {
				if _, err := r.Revoke(ctx, model.TokenRevokeRequest{Sub: sub}, "test"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if key == "" {
			keys, err := kv.Keys(ctx)
			if err != nil || len(keys) != 1 {
				t.Fatalf("bucket keys %v, %v; want the subject's one", keys, err)
			}
			key = keys[0]
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var stored model.TokenRevocation
		if err := json.Unmarshal(e.Value(), &stored); err != nil {
			t.Fatal(err)
		}
		// The cutoff in force is exactly the stored one: a token issued
		// at it is refused, one issued a nanosecond later is not.
		cut := stored.RevokedAt
		for name, r := range map[string]*jwtauth.Revocations{"a": a, "b": b} {
			deadline := time.Now().Add(2 * time.Second)
			for r.Check("", "", sub, cut) == nil || r.Check("", "", sub, cut.Add(time.Nanosecond)) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: instance %s does not hold the stored cutoff %s (a token issued at it: %v; a nanosecond later: %v)",
						round, name, cut.Format(time.RFC3339Nano), r.Check("", "", sub, cut), r.Check("", "", sub, cut.Add(time.Nanosecond)))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}
