package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// busyVaultResolver answers as the credential service does while Vault
// rate limits it (RATE_LIMITED) for the first resolves, then the secret.
type busyVaultResolver struct{ refusals atomic.Int32 }

func (r *busyVaultResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	if r.refusals.Add(-1) >= 0 {
		return model.ResolvedCredentials{}, apierr.New(apierr.RateLimited, "Vault is rate limiting requests (reading credentials from Vault)")
	}
	return model.ResolvedCredentials{Env: map[string]string{"TOKEN": "secret-value-1"}}, nil
}

// A server whose secrets cannot be read at its start because Vault rate
// limits the credential service (429) is started again automatically, as it
// is while Vault is down or sealed (SERVICE_UNAVAILABLE): a rate limit
// passes, and no one should have to restart every server by hand after it.
func TestStartRetriedWhileVaultRateLimits(t *testing.T) {
	res := &busyVaultResolver{}
	res.refusals.Store(1)
	opts := lifecycleOpts()
	opts.Resolver = res
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("busy", testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	e.Put(t, cfg)
	e.WaitState(t, "busy", model.StateRunning, 10*time.Second)
}

// downVaultResolver answers SERVICE_UNAVAILABLE (Vault sealed or down) for
// the first resolves, then the secret.
type downVaultResolver struct{ refusals atomic.Int32 }

func (r *downVaultResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	if r.refusals.Add(-1) >= 0 {
		return model.ResolvedCredentials{}, apierr.New(apierr.ServiceUnavailable, "Vault is sealed or unavailable (reading credentials from Vault)")
	}
	return model.ResolvedCredentials{Env: map[string]string{"TOKEN": "secret-value-1"}}, nil
}

// A Vault outage longer than the server's restart budget (MaxRestarts
// starts in a row, a few seconds with the default backoff) is not the
// server's failure: once Vault is back the server starts by itself, without
// `mcpbus restart`.
func TestStartWaitsOutAVaultOutage(t *testing.T) {
	res := &downVaultResolver{}
	res.refusals.Store(6)
	opts := lifecycleOpts()
	opts.MaxRestarts = 2
	opts.RestartBackoffMax = 400 * time.Millisecond
	opts.Resolver = res
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("sealed", testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	e.Put(t, cfg)
	e.WaitState(t, "sealed", model.StateRunning, 15*time.Second)
}
