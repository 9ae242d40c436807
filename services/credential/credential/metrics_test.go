package credential_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
)

// Resolves are counted by via and outcome, backend operations timed by
// operation, and the backend is up after it answered.
func TestMetrics(t *testing.T) {
	reader := testkit.MeterReader(t)
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"A": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(e.nc, "", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := res.ChatKey(ctx, "nokey"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("chat key of a profile without one: %v", err)
	}
	got := testkit.Metrics(t, reader)
	for k, want := range map[string]int64{
		"mcpbus.credential.resolves|outcome=resolved,via=resolve":  1,
		"mcpbus.credential.resolves|outcome=NOT_FOUND,via=chatkey": 1,
		"mcpbus.credential.backend.up|backend=file":                1,
	} {
		if got[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
	for _, op := range []string{"get", "put"} {
		if got["mcpbus.credential.backend.duration|backend=file,operation="+op] == 0 {
			t.Errorf("no %s timed (all: %v)", op, got)
		}
	}
}

// downStore is a backend that cannot be reached.
type downStore struct{}

func (downStore) Get(context.Context, string) (model.Credentials, time.Time, error) {
	return model.Credentials{}, time.Time{}, apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Put(context.Context, string, model.Credentials) error {
	return apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Delete(context.Context, string) error {
	return apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Name() string { return "vault" }

// A backend that does not answer is down, and its failures carry the code.
func TestMetricsBackendDown(t *testing.T) {
	reader := testkit.MeterReader(t)
	e := newEnv(t, func(o *credential.Options) { o.Store = downStore{} })
	ctx := ctxT(t)
	_, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: uuid.NewString()})
	if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("describe on a sealed backend: %v", err)
	}
	got := testkit.Metrics(t, reader)
	if got["mcpbus.credential.backend.up|backend=vault"] != 0 || got["mcpbus.credential.backend.duration|backend=vault,error.type=SERVICE_UNAVAILABLE,operation=get"] == 0 {
		t.Fatalf("a sealed backend: %v", got)
	}
	if _, ok := got["mcpbus.credential.backend.up|backend=vault"]; !ok {
		t.Fatalf("no backend.up reported: %v", got)
	}
}
