package vaultstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	vault "github.com/hashicorp/vault/api"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// TestStaticTokenExpiry: a VAULT_TOKEN renewed up to its max TTL, and one
// that is not renewable, both run out. The service cannot replace them; it
// says so (an error in its log, each request UNAUTHORIZED naming the token
// as expired or revoked, not the policy, readiness failing) and never
// shows the token.
func TestStaticTokenExpiry(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	tokens := map[string]func() string{
		"renewed up to its max TTL": func() string { return v.token(t, "2s", "4s") },
		"not renewable": func() string {
			no := false
			sec, err := v.root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"mcpbus"}, TTL: "3s", Renewable: &no})
			if err != nil {
				t.Fatal(err)
			}
			return sec.Auth.ClientToken
		},
	}
	for name, newToken := range tokens {
		tok := newToken()
		var logs testkit.LogBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		s, err := vaultstore.New(ctx, vaultstore.Config{Address: v.srv.Addr, Token: tok}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		id := uuid.NewString()
		if err := s.Put(ctx, id, sample()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("%s: not ready with a valid token: %v", name, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := v.client(t, tok).Auth().Token().LookupSelf(); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the token did not expire", name)
			}
			time.Sleep(200 * time.Millisecond)
		}
		_, _, err = s.Get(ctx, id)
		e := apierr.From(err)
		if e.Code != apierr.Unauthorized || !strings.Contains(e.Message, "expired or was revoked") || strings.Contains(e.Message, "policy") {
			t.Errorf("%s: Get with the token expired: %v, want UNAUTHORIZED saying the token expired", name, err)
		}
		if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), "invalid") {
			t.Errorf("%s: ready with an expired token: %v", name, err)
		}
		out := logs.String()
		if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "VAULT_TOKEN") {
			t.Errorf("%s: no error logged about the token:\n%s", name, out)
		}
		if strings.Contains(out, "cannot look itself up") {
			t.Errorf("%s: an expired token reported as one without lookup-self:\n%s", name, out)
		}
		if strings.Contains(out, tok) || strings.Contains(e.Message, tok) {
			t.Errorf("%s: the token is shown", name)
		}
	}
}

// TestKVv1MountRefused: on a KV version 1 mount the KV v2 paths are plain
// keys (a write lands yet reports failure, a delete removes nothing): the
// store refuses every request naming the mount's version, writes nothing,
// and takes the mount once it is upgraded, without a restart.
func TestKVv1MountRefused(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	if err := v.root.Sys().MountWithContext(ctx, "kv1", &vault.MountInput{Type: "kv", Options: map[string]string{"version": "1"}}); err != nil {
		t.Fatal(err)
	}
	if err := v.root.Sys().PutPolicyWithContext(ctx, "kv1", `path "kv1/*" { capabilities = ["create", "read", "update", "delete", "list"] }`); err != nil {
		t.Fatal(err)
	}
	s := v.store(t, vaultstore.Config{Token: v.token(t, "1h", "", "kv1"), Mount: "kv1"})
	id := uuid.NewString()
	err := s.Put(ctx, id, sample())
	if e := apierr.From(err); e.Code != apierr.Internal || !strings.Contains(e.Message, "KV version 1") || !strings.Contains(e.Message, "kv1") {
		t.Fatalf("Put on a KV v1 mount: %v, want a refusal naming the mount's version", err)
	}
	if l, err := v.root.Logical().ListWithContext(ctx, "kv1/"); err != nil || l != nil {
		t.Fatalf("something was written to the KV v1 mount: %+v %v", l, err)
	}
	if _, _, err := s.Get(ctx, id); !strings.Contains(apierr.From(err).Message, "KV version 1") {
		t.Fatalf("Get on a KV v1 mount: %v", err)
	}
	// Upgraded in place: the next request works.
	if _, err := v.root.Logical().WriteWithContext(ctx, "sys/mounts/kv1/tune", map[string]any{"options": map[string]string{"version": "2"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Put(ctx, id, sample())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Put after the upgrade to KV v2: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := v.root.KVv2("kv1").Get(ctx2, "mcpbus/"+id); err != nil {
		t.Fatalf("the record is not in the upgraded mount: %v", err)
	}
}
