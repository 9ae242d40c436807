package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// changingResolver answers the current value of TOKEN.
type changingResolver struct{ token atomic.Pointer[string] }

func (r *changingResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Env: map[string]string{"TOKEN": *r.token.Load()}}, nil
}

// Issue 27: a secret set while its server was starting was lost. `mcpbus
// cred set` now restarts a starting server too: the restart waits behind the
// start, and the server comes up again with the new value.
func TestRestartDuringStartTakesTheNewSecret(t *testing.T) {
	slow := filepath.Join(t.TempDir(), "slow")
	// The server's path is an argument, which the sandbox grants (as a
	// deployment would need to), not text inside the script.
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 1\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := &changingResolver{}
	old, fresh := "old-secret-1", "new-secret-2"
	res.token.Store(&old)
	opts := quickOpts()
	opts.Resolver = res
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("slow", slow, testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.Runtime.Eager = true
	cfg.SecretScan.Results = model.SecretsOff // it reads its secret back through the env tool
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateStarting, 5*time.Second)
	res.token.Store(&fresh) // cred set
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.Client.Runtime(ctx, "restart", "slow"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	out, err := call(t, e, "slow", "env", `{"name":"TOKEN"}`)
	if err != nil || text(t, out) != fresh {
		t.Fatalf("TOKEN = %s (%v), want the new value", out, err)
	}
}
