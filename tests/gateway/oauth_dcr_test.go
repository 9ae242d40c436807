package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
)

// TestOAuthOneRegistration: the gateway registers its public client at a
// remote server's authorization server once (RFC 7591) and reuses it for
// every later flow, of any principal: two principals starting together,
// then one of them again, make one registration, and all three ask with
// the same client. Each flow registering its own let any key that may
// start a flow make the gateway flood a third party with registrations.
// A client the token endpoint refuses (invalid_client) is dropped: that
// flow fails saying so, and the next registers once more, which the one
// after reuses. Behind another authorization server (issuer), the flows
// register there once.
func TestOAuthOneRegistration(t *testing.T) {
	t.Parallel()
	// Registrations of the concurrent flows overlap unless they wait for
	// each other.
	as := oauthtest.Start(t, oauthtest.Options{RegistrationDelay: 300 * time.Millisecond})
	const slug = "dcr"
	e := startWith(t, nil, gateway.Options{})
	cfg := remoteConfig(slug, testmcp.ServeProtected(t, slug, as))
	cfg.Auth.PerPrincipal = true
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// authorize runs principal's flow as the operator's CLI does
	// (`mcpbus servers auth --principal`) and returns its outcome.
	authorize := func(principal string) error {
		ctx := ctxT(t, time.Minute)
		out, wait, err := e.st.Client.AuthorizeServerFor(ctx, slug, principal)
		if err != nil {
			return err
		}
		browse(t, out.AuthorizationURL)
		return wait(ctx)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []string{"key:alice", "key:bob"} {
		wg.Go(func() { errs[i] = authorize(p) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent flows: %v", err)
		}
	}
	if err := authorize("key:alice"); err != nil {
		t.Fatalf("alice again: %v", err)
	}
	if n := as.Registrations(); n != 1 {
		t.Fatalf("%d registrations for three flows of two principals, want 1", n)
	}
	clients := map[string]bool{}
	for _, q := range as.Authorizations() {
		clients[q.Get("client_id")] = true
	}
	if len(clients) != 1 {
		t.Fatalf("the flows asked with clients %v, want one", clients)
	}

	// The authorization server stops taking the client.
	as.ExpireClients()
	if err := authorize("key:bob"); err == nil || apierr.From(err).Message != oauthflow.MsgRegisteredClientRefused {
		t.Fatalf("flow with a refused client: %v, want %q", err, oauthflow.MsgRegisteredClientRefused)
	}
	if n := as.Registrations(); n != 1 {
		t.Fatalf("%d registrations after the refused flow, want 1 (it does not retry)", n)
	}
	for _, p := range []string{"key:bob", "key:alice"} {
		if err := authorize(p); err != nil {
			t.Fatalf("%s after the client was refused: %v", p, err)
		}
	}
	if n := as.Registrations(); n != 2 {
		t.Fatalf("%d registrations, want 2 (one new after the refusal, reused after)", n)
	}
	auths := as.Authorizations()
	if last, prev := auths[len(auths)-1].Get("client_id"), auths[len(auths)-2].Get("client_id"); last != prev || clients[last] {
		t.Fatalf("after the refusal the flows asked with %q and %q, want one new client", prev, last)
	}

	// The server moves behind another authorization server: its flows
	// register there once, not with the first one's client.
	other := oauthtest.Start(t, oauthtest.Options{})
	cur, err := e.st.Client.GetConfig(ctxT(t, 30*time.Second), slug)
	if err != nil {
		t.Fatal(err)
	}
	cur.Transport.URL = testmcp.ServeProtected(t, slug, other)
	cur.Package.Identifier = cur.Transport.URL
	if _, err := e.st.Client.UpdateConfig(ctxT(t, 30*time.Second), cur, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"key:bob", "key:alice"} {
		if err := authorize(p); err != nil {
			t.Fatalf("%s at the other authorization server: %v", p, err)
		}
	}
	if n, m := as.Registrations(), other.Registrations(); n != 2 || m != 1 {
		t.Fatalf("registrations after the move: %d at the first authorization server (want 2), %d at the other (want 1)", n, m)
	}
}

// TestOAuthOneRegistrationAcrossInstances: two gateway instances (one
// public URL, so one callback) starting a server's first flows at once
// register one client between them, and both flows ask with it. The lock
// that serialises registrations was per instance: each registered its own.
func TestOAuthOneRegistrationAcrossInstances(t *testing.T) {
	t.Parallel()
	// Registrations overlap unless the instances wait for each other.
	as := oauthtest.Start(t, oauthtest.Options{RegistrationDelay: 500 * time.Millisecond})
	const slug = "dcr-two"
	e := startWith(t, nil, gateway.Options{})
	e2 := runGateway(t, e.st, "test-gateway-2", t.TempDir(), e.logs, gateway.Options{PublicURL: e.url})
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, as))}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	urls := make([]string, 2)
	for i, g := range []*env{e, e2} {
		wg.Go(func() {
			r := g.do("POST", "/api/v1/servers/"+slug+"/auth", nil)
			var out model.OAuthStartReply
			if json.Unmarshal(r.body, &out) != nil || r.status != http.StatusOK || out.AuthorizationURL == "" {
				t.Errorf("POST auth on instance %d: %d %s", i+1, r.status, r.body)
				return
			}
			urls[i] = out.AuthorizationURL
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := as.Registrations(); n != 1 {
		t.Fatalf("%d registrations for the first flows of two instances, want 1", n)
	}
	var clients []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, u.Query().Get("client_id"))
	}
	if clients[0] == "" || clients[0] != clients[1] {
		t.Fatalf("the flows ask with clients %q, want one", clients)
	}
}

// TestOAuthRegistrationLockOfADeadInstance: a registration lock left by an
// instance that died holding it delays a flow by a bounded while (three
// request timeouts), then is taken over: the flow registers and starts.
func TestOAuthRegistrationLockOfADeadInstance(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{})
	const slug = "dcr-dead"
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{RequestTimeout: time.Second}})
	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, as))})
	var cfg model.McpConfig
	r.decode(t, &cfg)
	if r.status != http.StatusCreated || cfg.ID == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	nc, err := e.st.ConnectAs("test-gateway-dead", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t, 10*time.Second), bus.BucketOAuthFlows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctxT(t, 10*time.Second), "registering."+cfg.ID, []byte("dead")); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if r := e.do("POST", "/api/v1/servers/"+slug+"/auth", nil); r.status != http.StatusOK {
		t.Fatalf("POST auth behind a dead instance's lock: %d %s", r.status, r.body)
	}
	took := time.Since(began)
	if took < 2*time.Second || took > 20*time.Second || as.Registrations() != 1 {
		t.Fatalf("the flow started after %s with %d registrations, want one after the 3 s the lock is held for", took, as.Registrations())
	}
}
