package vaultstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// flakyVault is a proxy in front of a real Vault that answers 503 as a
// sealed Vault does: to every request while sealed is set, to the writes of
// records (PUT/POST under <mount>/data/) while failWrites is set, and to the
// deletes (DELETE) of a record whose path ends with failDelete.
type flakyVault struct {
	URL        string
	sealed     atomic.Bool
	failWrites atomic.Bool
	failDelete atomic.Value // string
}

func newFlakyVault(t *testing.T, v *vaultEnv) *flakyVault {
	t.Helper()
	target, err := url.Parse(v.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyVault{}
	f.failDelete.Store("")
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		del := f.failDelete.Load().(string)
		if f.sealed.Load() ||
			f.failWrites.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, "/data/") ||
			del != "" && r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/"+del) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"errors":["Vault is sealed"]}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	f.URL = front.URL
	return f
}

// store is a store on v through the proxy f, without retries (a retry
// would hide the 503s the tests ask for).
func (f *flakyVault) store(t *testing.T, v *vaultEnv) *vaultstore.Store {
	t.Helper()
	s, err := vaultstore.New(ctxT(t), vaultstore.Config{Address: f.URL, Token: v.token(t, "1h", ""), MaxRetries: -1}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// rotatingEndpoint is an OAuth token endpoint whose refresh tokens are single
// use: each refresh spends the one it took and hands out the next.
func rotatingEndpoint(t *testing.T, first string) (*httptest.Server, *atomic.Int32) {
	var accept atomic.Value
	accept.Store(first)
	var n, calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if r.PostForm.Get("refresh_token") != accept.Load().(string) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		i := n.Add(1)
		next := fmt.Sprintf("rt-%d", i)
		accept.Store(next)
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("at-%d", i), "token_type": "bearer",
			"expires_in": 3600, "refresh_token": next})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// expiredOAuth sets, through the service on nc, a new server's OAuth token
// that expired, with the refresh token rt-0 of the endpoint tokenURL, and
// returns the server's id and a resolver.
func expiredOAuth(t *testing.T, ctx context.Context, nc *nats.Conn, tokenURL string) (string, *credclient.Resolver) {
	t.Helper()
	id := uuid.NewString()
	if _, err := credclient.New(nc, "").Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &model.OAuthToken{
		AccessToken: "at-0", RefreshToken: "rt-0", ClientID: "client", TokenURL: tokenURL,
		ExpiresAt: time.Now().Add(-time.Minute), EnvVar: "TOKEN",
	}}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(nc, "")
	if err != nil {
		t.Fatal(err)
	}
	return id, res
}

// TestRefreshedTokenOutlivesAFailedWrite: the token endpoint rotates refresh
// tokens, so once a refresh succeeded the stored refresh token is spent. When
// Vault refuses the write of the new token, the next resolve after Vault is
// back must not refresh again with the spent one (invalid_grant: the server
// would stay UNAUTHORIZED until someone authorizes it again): it hands out
// the token it got and stores it.
func TestRefreshedTokenOutlivesAFailedWrite(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	fv := newFlakyVault(t, v)
	s := fv.store(t, v)
	tokenURL, calls := rotatingEndpoint(t, "rt-0")
	nc := credOnVault(t, s)
	id, res := expiredOAuth(t, ctx, nc, tokenURL.URL+"/token")
	fv.failWrites.Store(true)
	got, err := res.Resolve(ctx, id)
	if err != nil || got.Env["TOKEN"] != "at-1" {
		t.Fatalf("resolve while Vault refuses writes: %+v, %v", got.Env, err)
	}
	fv.failWrites.Store(false)
	got, err = res.Resolve(ctx, id)
	if err != nil || got.Env["TOKEN"] != "at-1" {
		t.Fatalf("resolve after Vault is back: %+v, %v (token endpoint called %d times)", got.Env, err, calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("token endpoint called %d times, want 1", n)
	}
	rec, _, err := s.Get(ctx, store.Key(model.CredServer, id))
	if err != nil || rec.OAuth == nil || rec.OAuth.RefreshToken != "rt-1" || rec.OAuth.AccessToken != "at-1" {
		t.Fatalf("stored after Vault is back: %+v, %v", rec.OAuth, err)
	}
}

// TestInstancesDoNotLoseEachOthersSets: two credential service instances
// (a split deployment: each its own Vault client, the same Vault) take the
// cred.set requests of one server in turn; each set adds a name to the
// record (read, merge, write). A set must not erase what the other instance
// wrote between its read and its write.
func TestInstancesDoNotLoseEachOthersSets(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	ns := startNATS(t)
	for range 2 {
		serveCred(t, ns, v.store(t, vaultstore.Config{Token: v.token(t, "1h", "")}))
	}
	nc := testkit.Connect(t, ns)
	c := credclient.New(nc, "")
	id := uuid.NewString()
	const n = 24
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{
				Env: map[string]string{fmt.Sprintf("K%d", i): "value"}}})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("set: %v", err)
		}
	}
	d, err := c.Describe(ctx, model.CredDescribeRequest{ServerID: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Env) != n {
		t.Fatalf("%d of %d names stored after concurrent sets on two instances: %v", len(d.Env), n, d.Env)
	}
}

// TestInstancesRefreshOnce: resolves of an expired OAuth token reach two
// instances at once. The token endpoint's refresh tokens are single use, so
// only one instance's refresh can succeed; the other must answer with the
// token that one stored, not UNAUTHORIZED (which leaves the server in error
// until someone authorizes it again).
func TestInstancesRefreshOnce(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	ns := startNATS(t)
	tokenURL, _ := rotatingEndpoint(t, "rt-0")
	// The endpoint answers slowly enough that the instances' refreshes overlap.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		u, _ := url.Parse(tokenURL.URL)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	for range 2 {
		serveCred(t, ns, v.store(t, vaultstore.Config{Token: v.token(t, "1h", "")}))
	}
	nc := testkit.Connect(t, ns)
	id, res := expiredOAuth(t, ctx, nc, slow.URL+"/token")
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			got, err := res.Resolve(ctx, id)
			if err == nil && got.Env["TOKEN"] != "at-1" {
				err = fmt.Errorf("handed out %q", got.Env["TOKEN"])
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("resolve: %v", err)
		}
	}
}

// TestInstancesAgreeOnTheKeyPair: two instances start together on an empty
// Vault and both make the service's curve key pair; the second write reaches
// Vault late (a slow Vault), after the first instance read its own back.
// They must still end up with the same pair: a secret sealed to one
// instance's key is opened by whichever instance gets the request.
func TestInstancesAgreeOnTheKeyPair(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	target, err := url.Parse(v.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var writes atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, credential.KeyRecordID) {
			if writes.Add(1) == 2 {
				time.Sleep(2 * time.Second)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	ns := startNATS(t)
	var svcs []*credential.Service
	for range 2 {
		st, err := vaultstore.New(ctx, vaultstore.Config{Address: front.URL, Token: v.token(t, "1h", "")}, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		svcs = append(svcs, newCred(t, ns, st))
	}
	pubs := make([]string, 2)
	errs := make(chan error, 2)
	for i, svc := range svcs {
		go func() {
			var err error
			pubs[i], err = svc.PublicKey(ctx)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if pubs[0] != pubs[1] {
		t.Fatalf("the instances hold different key pairs: %s and %s", pubs[0], pubs[1])
	}
}

// TestReadinessFollowsARefusedAppRoleLogin: once the AppRole secret id is
// gone (expired, destroyed) and the token with it, every request fails
// UNAUTHORIZED: readiness must say so, as it does for an invalid static
// token, and be back once a new secret id is in its file (no restart).
func TestReadinessFollowsARefusedAppRoleLogin(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "1h", "2h")
	dir := t.TempDir()
	secretFile := dir + "/secret_id"
	if err := os.WriteFile(secretFile, []byte(secretID), 0o600); err != nil {
		t.Fatal(err)
	}
	s := v.store(t, vaultstore.Config{RoleID: roleID, SecretIDFile: secretFile})
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	// The secret id is destroyed and the token revoked.
	if _, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential/secret-id/destroy", map[string]any{"secret_id": secretID}); err != nil {
		t.Fatal(err)
	}
	if err := v.root.Auth().Token().RevokeTree(s.Token()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("Get with the secret id gone: %v", err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ready while Vault refuses the AppRole login")
	}
	// A new secret id in the file: ready again, and requests work.
	sec, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(sec.Data["secret_id"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("not ready with a new secret id: %v", err)
	}
	if _, _, err := s.Get(ctx, id); err != nil {
		t.Fatalf("Get with a new secret id: %v", err)
	}
}

// TestPartialDeleteRetries: the whole-record delete of a server (the config
// service's) removes several Vault records in turn: its principals' own
// records, its OAuth client secret, a copy from before kinds, its own
// record. When Vault fails one of those deletes, the answer says the delete
// stopped partway and to run it again, and the server's own record (the one
// its config points at, deleted last) is still there with its current
// secrets, not gone (nor replaced by the old copy, which a read would move
// back if the record went first); run again, the delete removes them all.
func TestPartialDeleteRetries(t *testing.T) {
	t.Parallel()
	v := startVault(t)
	ctx := ctxT(t)
	fv := newFlakyVault(t, v)
	s := fv.store(t, v)
	c := credclient.New(credOnVault(t, s), "")
	id := uuid.NewString()
	own := store.Key(model.CredServer, id)
	client := store.Key(model.CredOAuthClient, model.OAuthClientCredentialID(id))
	principal := store.Key(model.CredPrincipal, model.PrincipalCredentialID(id, "key:alice"))
	for key, rec := range map[string]model.Credentials{
		own:       {Env: map[string]string{"NEW": "current"}},
		id:        {Env: map[string]string{"OLD": "stale"}}, // the copy from before kinds
		client:    {Env: map[string]string{"CLIENT_SECRET": "s"}},
		principal: {Headers: map[string]string{"X-Api-Key": "k"}, Owner: id},
	} {
		if err := s.Put(ctx, key, rec); err != nil {
			t.Fatal(err)
		}
	}
	ownStays := func(when string) {
		t.Helper()
		rec, _, err := s.Get(ctx, own)
		if err != nil || rec.Env["NEW"] != "current" {
			t.Fatalf("%s: the server's own record is %+v, %v", when, rec, err)
		}
		d, err := c.Describe(ctx, model.CredDescribeRequest{ServerID: id})
		if err != nil || len(d.Env) != 1 || d.Env[0] != "NEW" {
			t.Fatalf("%s: the server's secrets read %+v, %v", when, d, err)
		}
	}
	for _, failing := range []string{client, id} {
		fv.failDelete.Store(failing)
		_, err := c.Delete(ctx, model.CredDeleteRequest{ServerID: id, Principals: true})
		if e := apierr.From(err); e == nil || e.Code != apierr.ServiceUnavailable ||
			!strings.Contains(e.Message, "stopped partway") || !strings.Contains(e.Message, "run the delete again") {
			t.Fatalf("delete while Vault fails the delete of %s: %v", failing, err)
		}
		ownStays("after a delete that failed at " + failing)
	}
	fv.failDelete.Store("")
	if _, err := c.Delete(ctx, model.CredDeleteRequest{ServerID: id, Principals: true}); err != nil {
		t.Fatalf("the delete run again: %v", err)
	}
	for _, key := range []string{own, id, client, principal} {
		if _, _, err := s.Get(ctx, key); err != store.ErrNotFound {
			t.Fatalf("%s after the delete: %v", key, err)
		}
	}
}
