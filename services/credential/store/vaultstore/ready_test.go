package vaultstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// TestReadinessFollowsVault: the credential service's own readiness check
// (what /readyz adds to answering on the bus) holds while Vault answers and
// fails once Vault is sealed, then once it is gone.
func TestReadinessFollowsVault(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	s := v.store(t, vaultstore.Config{Token: v.token(t, "1h", ""), MaxRetries: -1, Timeout: 2 * time.Second})
	if err := s.Ping(ctxT(t)); err != nil {
		t.Fatalf("Ping of a running, unsealed Vault: %v", err)
	}
	svc := serveCred(t, startNATS(t), s, func(o *credential.Options) {
		o.ProbeInterval = 50 * time.Millisecond
		o.AnyResolver = false
	})
	checks := svc.Checks()
	if len(checks) != 1 || checks[0].Name != "backend" {
		t.Fatalf("checks %+v, want one named backend", checks)
	}
	backend := checks[0].Err
	waitErr := func(want string) {
		t.Helper()
		testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
			err := backend()
			if want == "" {
				return err == nil, "backend check: " + errText(err)
			}
			return err != nil && strings.Contains(err.Error(), want), "backend check: " + errText(err) + ", want " + want
		})
	}
	waitErr("")
	if err := v.root.Sys().Seal(); err != nil {
		t.Fatal(err)
	}
	waitErr("sealed")
	v.srv.Kill()
	waitErr("unreachable")
}

// TestPingUnreachable: no Vault at the address, Ping says so within its deadline.
func TestPingUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := vaultstore.New(ctx, vaultstore.Config{Address: "http://127.0.0.1:1", Token: "s.x", MaxRetries: -1}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Ping with no Vault: %v", err)
	}
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
