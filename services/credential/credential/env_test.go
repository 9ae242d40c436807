package credential_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

type env struct {
	t      *testing.T
	ns     *embednats.Server
	nc     *nats.Conn
	svc    *credential.Service
	stop   func()
	store  *filestore.Store
	logs   *testkit.LogBuffer
	client *credclient.Client
}

// newEnv runs an embedded NATS server and the service on a file store in a
// temp dir; the log is checked for secrets when the test ends.
func newEnv(t *testing.T, tweak ...func(*credential.Options)) *env {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := filestore.New(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LogBuffer{}
	// Most tests resolve without a runner's lease; owner_test.go checks leases.
	opts := credential.Options{Store: st, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), AnyResolver: true}
	for _, f := range tweak {
		f(&opts)
	}
	svc, err := credential.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.RunService(t, svc)
	e := &env{t: t, ns: ns, nc: nc, svc: svc, stop: stop, store: st, logs: logs, client: credclient.New(nc, "")}
	t.Cleanup(func() {
		for _, s := range allSecrets {
			if bytes.Contains([]byte(logs.String()), []byte(s)) {
				t.Errorf("the service log contains the secret %q", s)
			}
		}
	})
	return e
}

// allSecrets are every secret value the tests use: none may reach a log.
var allSecrets = []string{secretEnv, secretHeader, secretAccess, secretRefresh, secretClient, newAccess, newRefresh}

const (
	secretEnv     = "ghp_envSecretValue0123456789"
	secretHeader  = "hdrSecretValue-abcdef"
	secretAccess  = "gho_accessSecret-old"
	secretRefresh = "ghr_refreshSecret-old"
	secretClient  = "client-secret-xyz"
	newAccess     = "gho_accessSecret-NEW"
	newRefresh    = "ghr_refreshSecret-NEW"
)

// raw sends a body to mcp.v1.cred.<verb> and returns the reply body or the error.
func (e *env) raw(verb string, body any) ([]byte, *apierr.Error) {
	e.t.Helper()
	// Clear credentials are sealed the way every writer does it: the raw
	// tests exercise what the service does with their content.
	if req, isSet := body.(model.CredSetRequest); isSet && verb == "set" && !req.Credentials.Empty() {
		sealed, sender, err := e.client.Sealer().Seal(context.Background(), req.Credentials)
		if err != nil {
			e.t.Fatal(err)
		}
		req.Credentials, req.Sealed, req.SenderKey = model.Credentials{}, sealed, sender
		body = req
	}
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			e.t.Fatal(err)
		}
	}
	msg := nats.NewMsg(bus.NewSubjects("").Service("cred", verb))
	msg.Data = data
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := bus.Request(ctx, e.nc, msg, 0)
	if err != nil {
		return nil, apierr.From(err)
	}
	return reply.Data, nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
