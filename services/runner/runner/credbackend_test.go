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

// refusingResolver answers as the credential service does while Vault
// refuses it (code, say RATE_LIMITED or SERVICE_UNAVAILABLE) for the first
// refusals resolves, then the secret.
type refusingResolver struct {
	code     apierr.Code
	message  string
	refusals atomic.Int32
}

func newRefusingResolver(code apierr.Code, message string, refusals int32) *refusingResolver {
	r := &refusingResolver{code: code, message: message}
	r.refusals.Store(refusals)
	return r
}

func (r *refusingResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	if r.refusals.Add(-1) >= 0 {
		return model.ResolvedCredentials{}, apierr.New(r.code, r.message)
	}
	return model.ResolvedCredentials{Env: map[string]string{"TOKEN": "secret-value-1"}}, nil
}

// putNeedingSecret puts an eager server name whose start needs the secret
// TOKEN and waits until it runs.
func putNeedingSecret(t *testing.T, e *runnertest.Env, name string, within time.Duration) {
	t.Helper()
	cfg := runnertest.Binary(name, testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	e.Put(t, cfg)
	e.WaitState(t, name, model.StateRunning, within)
}

// A server whose secrets cannot be read at its start because Vault rate
// limits the credential service (429) is started again automatically, as it
// is while Vault is down or sealed (SERVICE_UNAVAILABLE): a rate limit
// passes, and no one should have to restart every server by hand after it.
func TestStartRetriedWhileVaultRateLimits(t *testing.T) {
	opts := lifecycleOpts()
	opts.Resolver = newRefusingResolver(apierr.RateLimited, "Vault is rate limiting requests (reading credentials from Vault)", 1)
	putNeedingSecret(t, runnertest.Start(t, opts), "busy", 10*time.Second)
}

// A Vault outage longer than the server's restart budget (MaxRestarts
// starts in a row, a few seconds with the default backoff) is not the
// server's failure: once Vault is back the server starts by itself, without
// `mcpbus restart`.
func TestStartWaitsOutAVaultOutage(t *testing.T) {
	opts := lifecycleOpts()
	opts.MaxRestarts = 2
	opts.RestartBackoffMax = 400 * time.Millisecond
	opts.Resolver = newRefusingResolver(apierr.ServiceUnavailable, "Vault is sealed or unavailable (reading credentials from Vault)", 6)
	putNeedingSecret(t, runnertest.Start(t, opts), "sealed", 15*time.Second)
}
