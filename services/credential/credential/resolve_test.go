package credential_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// wiretap records every message on the server (requests, replies in inboxes,
// micro discovery): what an eavesdropper with full subscribe rights sees.
type wiretap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
	nc   *nats.Conn
}

func tap(t *testing.T, e *env) *wiretap {
	t.Helper()
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &wiretap{nc: nc}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		w.mu.Lock()
		w.msgs = append(w.msgs, m)
		w.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// drain waits until a marker published after the traffic, by each of the
// given connections, has come through (per-connection order is kept).
func (w *wiretap) drain(t *testing.T, conns ...*nats.Conn) []*nats.Msg {
	t.Helper()
	for i, nc := range conns {
		subj := fmt.Sprintf("test.marker.%d.%s", i, uuid.NewString())
		if err := nc.Publish(subj, nil); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		deadline := time.Now().Add(5 * time.Second)
		for !w.seen(subj) {
			if time.Now().After(deadline) {
				t.Fatal("wiretap did not see the marker")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*nats.Msg(nil), w.msgs...)
}

func (w *wiretap) seen(subj string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if m.Subject == subj {
			return true
		}
	}
	return false
}

// carries reports whether a message shows secret in any form a reader could
// use: raw bytes, base64 (as []byte fields are encoded) or a header.
func carries(m *nats.Msg, secret string) bool {
	forms := [][]byte{[]byte(secret), []byte(base64.StdEncoding.EncodeToString([]byte(secret)))}
	for _, f := range forms {
		if bytes.Contains(m.Data, f) {
			return true
		}
		for _, vals := range m.Header {
			for _, v := range vals {
				if strings.Contains(v, string(f)) {
					return true
				}
			}
		}
	}
	return false
}

func TestResolveSealedAndNothingLeaks(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	w := tap(t, e)
	// The runner has its own connection, as in a deployment.
	runnerNC, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer runnerNC.Close()

	id := uuid.NewString()
	kf := keyfile(t, 0o600)
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{
		Env:      map[string]string{"GITHUB_TOKEN": secretEnv},
		Headers:  map[string]string{"X-Api-Key": secretHeader},
		Keyfiles: map[string]string{"GCP_KEY": kf},
		OAuth: &model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, ClientSecret: secretClient,
			TokenURL: "https://example.invalid/token", ExpiresAt: time.Now().Add(time.Hour), EnvVar: "OAUTH_TOKEN", Header: "Authorization"},
	}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(runnerNC, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := res.Resolve(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The token again with its expiry, for an HTTP upstream's token source.
	if o := got.OAuth; o == nil || o.AccessToken != secretAccess || o.Header != "Authorization" || time.Until(o.ExpiresAt) < 50*time.Minute {
		t.Fatalf("resolved oauth: %+v", got.OAuth)
	}
	got.OAuth = nil
	want := model.ResolvedCredentials{
		Env:      map[string]string{"GITHUB_TOKEN": secretEnv, "OAUTH_TOKEN": secretAccess},
		Headers:  map[string]string{"X-Api-Key": secretHeader, "Authorization": "Bearer " + secretAccess},
		Keyfiles: map[string]string{"GCP_KEY": kf},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resolved:\n got %+v\nwant %+v", got, want)
	}
	if _, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: id}); err != nil {
		t.Fatal(err)
	}

	msgs := w.drain(t, e.nc, runnerNC)
	var sealedSets, resolveReplies int
	for _, m := range msgs {
		switch {
		case m.Subject == "mcp.v1.cred.set" && bytes.Contains(m.Data, []byte(`"sealed"`)) && bytes.Contains(m.Data, []byte(`"sender_key"`)):
			sealedSets++
		case bytes.Contains(m.Data, []byte(`"sealed"`)) && bytes.Contains(m.Data, []byte(`"sender_key"`)):
			resolveReplies++
		}
		for _, s := range allSecrets {
			if carries(m, s) {
				t.Errorf("secret %q crossed the bus in clear on %s: %s", s, m.Subject, m.Data)
			}
		}
	}
	// The tap saw the traffic: the user's sealed set request and the sealed
	// resolve reply in the runner's inbox, neither in clear.
	if sealedSets != 1 || resolveReplies != 1 {
		t.Fatalf("wiretap saw %d sealed set requests and %d sealed replies in %d messages", sealedSets, resolveReplies, len(msgs))
	}
}

func TestSealedReplyOpensOnlyForTheRunner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"GITHUB_TOKEN": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	runner, _ := nkeys.CreateCurveKeys()
	runnerPub, _ := runner.PublicKey()
	raw, apiErr := e.raw("resolve", model.CredResolveRequest{ServerID: id, RecipientKey: runnerPub})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	var reply model.SealedReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		t.Fatal(err)
	}
	svcKey, err := e.svc.PublicKey(ctx)
	if err != nil || reply.SenderKey != svcKey || !nkeys.IsValidPublicCurveKey(reply.SenderKey) {
		t.Fatalf("sender key %q, service key %q (%v)", reply.SenderKey, svcKey, err)
	}
	plain, err := runner.Open(reply.Sealed, reply.SenderKey)
	if err != nil {
		t.Fatalf("the runner cannot open its reply: %v", err)
	}
	var rc model.ResolvedCredentials
	if err := json.Unmarshal(plain, &rc); err != nil || rc.Env["GITHUB_TOKEN"] != secretEnv {
		t.Fatalf("opened: %s, %v", plain, err)
	}
	// Any other key pair fails, including one that knows the sender key.
	other, _ := nkeys.CreateCurveKeys()
	if _, err := other.Open(reply.Sealed, reply.SenderKey); err == nil {
		t.Fatal("another key pair opened the sealed reply")
	}
	// A flipped byte fails too.
	bad := bytes.Clone(reply.Sealed)
	bad[len(bad)-1] ^= 1
	if _, err := runner.Open(bad, reply.SenderKey); err == nil {
		t.Fatal("a tampered reply opened")
	}

	// The recipient key must be a curve public key.
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	seed, _ := runner.Seed()
	for _, key := range []string{"", "not-a-key", userPub, string(seed), runnerPub[:len(runnerPub)-1]} {
		_, err := e.raw("resolve", model.CredResolveRequest{ServerID: id, RecipientKey: key})
		if err == nil || err.Code != apierr.Validation || err.Field != "recipient_key" {
			t.Errorf("recipient key %.8q…: %v", key, err)
		}
	}

	// A server without credentials resolves to nothing, not an error (the
	// runner reports the missing required ones by name).
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	empty, err := res.Resolve(ctx, uuid.NewString())
	if err != nil || len(empty.Env)+len(empty.Headers)+len(empty.Keyfiles) != 0 {
		t.Fatalf("unknown server: %+v, %v", empty, err)
	}
	if _, err := res.Resolve(ctx, "not-a-uuid"); apierr.Of(err) != apierr.Validation {
		t.Fatalf("bad id through the resolver: %v", err)
	}
}

// tokenEndpoint is an OAuth 2.0 token endpoint (RFC 6749 §5, §6) that accepts
// one refresh token and rotates it.
type tokenEndpoint struct {
	*httptest.Server
	calls   atomic.Int32
	accept  atomic.Value // the refresh token it accepts
	lastErr atomic.Value
	// resources are the resource parameters (RFC 8707) of the last
	// refresh request.
	resources atomic.Value
}

func newTokenEndpoint(t *testing.T, accept string) *tokenEndpoint {
	te := &tokenEndpoint{}
	te.accept.Store(accept)
	te.lastErr.Store("")
	te.resources.Store([]string(nil))
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.calls.Add(1)
		fail := func(status int, code, why string) {
			te.lastErr.Store(why)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": why})
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			fail(http.StatusBadRequest, "invalid_request", "method or content type")
			return
		}
		if err := r.ParseForm(); err != nil {
			fail(http.StatusBadRequest, "invalid_request", "form")
			return
		}
		id, sec, ok := r.BasicAuth()
		if !ok {
			id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		if id != "client-1" || sec != secretClient {
			fail(http.StatusUnauthorized, "invalid_client", "client authentication")
			return
		}
		if r.PostForm.Get("grant_type") != "refresh_token" || r.PostForm.Get("refresh_token") != te.accept.Load().(string) {
			fail(http.StatusBadRequest, "invalid_grant", "refresh token")
			return
		}
		te.resources.Store(r.PostForm["resource"])
		te.accept.Store(newRefresh) // rotation: the old refresh token is spent
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"bearer","expires_in":3600,"refresh_token":%q,"scope":"repo read:org"}`, newAccess, newRefresh)
	}))
	t.Cleanup(te.Close)
	return te
}

func TestOAuthRefresh(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	now := time.Now()
	clock.Store(&now)
	e := newEnv(t, func(o *credential.Options) { o.Now = func() time.Time { return *clock.Load() } })
	ctx := ctxT(t)
	te := newTokenEndpoint(t, secretRefresh)
	id := uuid.NewString()
	set := func(expires time.Time) {
		t.Helper()
		if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &model.OAuthToken{
			AccessToken: secretAccess, RefreshToken: secretRefresh, ClientID: "client-1", ClientSecret: secretClient,
			TokenURL: te.URL + "/token", ExpiresAt: expires, Scopes: []string{"repo"}, EnvVar: "GITHUB_TOKEN", Header: "Authorization",
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}

	// Valid for 10 more minutes: used as it is, no call to the endpoint.
	set(now.Add(10 * time.Minute))
	got, err := res.Resolve(ctx, id)
	if err != nil || got.Env["GITHUB_TOKEN"] != secretAccess || te.calls.Load() != 0 {
		t.Fatalf("fresh token: %+v, %v, %d calls", got, err, te.calls.Load())
	}

	// Expired: refreshed, handed out and stored (with the rotated refresh token).
	set(now.Add(-time.Minute))
	got, err = res.Resolve(ctx, id)
	if err != nil {
		t.Fatalf("refresh: %v (endpoint said %q)", err, te.lastErr.Load())
	}
	if got.Env["GITHUB_TOKEN"] != newAccess || got.Headers["Authorization"] != "Bearer "+newAccess || te.calls.Load() != 1 {
		t.Fatalf("after refresh: %+v, %d calls", got, te.calls.Load())
	}
	stored, _, err := e.store.Get(ctx, store.Key(model.CredServer, id))
	if err != nil {
		t.Fatal(err)
	}
	o := stored.OAuth
	if o.AccessToken != newAccess || o.RefreshToken != newRefresh || o.ClientSecret != secretClient || o.TokenURL != te.URL+"/token" ||
		!reflect.DeepEqual(o.Scopes, []string{"repo", "read:org"}) || o.EnvVar != "GITHUB_TOKEN" {
		t.Fatalf("stored token after refresh: %+v", o)
	}
	if d := time.Until(o.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("new expiry %v is not about an hour away", o.ExpiresAt)
	}
	desc, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: id})
	if err != nil || desc.OAuth == nil || !desc.OAuth.ExpiresAt.Equal(o.ExpiresAt) {
		t.Fatalf("describe after refresh: %+v, %v", desc, err)
	}
	// The stored token is used from now on: no second refresh.
	if got, err = res.Resolve(ctx, id); err != nil || got.Env["GITHUB_TOKEN"] != newAccess || te.calls.Load() != 1 {
		t.Fatalf("second resolve: %+v, %v, %d calls", got, err, te.calls.Load())
	}

	// Expiring within a minute counts as expired: the clock moves 59m30s on.
	later := now.Add(59*time.Minute + 30*time.Second)
	clock.Store(&later)
	te.accept.Store(newRefresh)
	if _, err = res.Resolve(ctx, id); err != nil || te.calls.Load() != 2 {
		t.Fatalf("near-expiry refresh: %v, %d calls", err, te.calls.Load())
	}

	// Concurrent resolves of an expired token refresh it once (the refresh
	// token is single use at this endpoint).
	clock.Store(&now)
	te.accept.Store(secretRefresh)
	set(now.Add(-time.Minute))
	before := te.calls.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := res.Resolve(ctx, id)
			if err == nil && got.Env["GITHUB_TOKEN"] != newAccess {
				err = errors.New("old token handed out")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent resolve: %v", err)
		}
	}
	if n := te.calls.Load() - before; n != 1 {
		t.Fatalf("%d refreshes for 8 concurrent resolves, want 1", n)
	}
}

// TestOAuthRefreshCarriesResource: a token issued for a resource (RFC
// 8707) is refreshed for that resource, as it was authorized and
// exchanged; one of unknown resource is refreshed without the parameter.
func TestOAuthRefreshCarriesResource(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	te := newTokenEndpoint(t, secretRefresh)
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	const resource = "https://mcp.example.com/mcp"
	for _, c := range []struct {
		resource string
		want     []string
	}{{resource, []string{resource}}, {"", nil}} {
		te.accept.Store(secretRefresh)
		id := uuid.NewString()
		tok := model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, ClientID: "client-1", ClientSecret: secretClient,
			TokenURL: te.URL + "/token", ExpiresAt: time.Now().Add(-time.Minute), Header: "Authorization", Resource: c.resource}
		if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
			t.Fatal(err)
		}
		got, err := res.Resolve(ctx, id)
		if err != nil || got.OAuth == nil || got.OAuth.AccessToken != newAccess {
			t.Fatalf("refresh of a token for %q: %+v, %v (endpoint said %q)", c.resource, got, err, te.lastErr.Load())
		}
		if r := te.resources.Load().([]string); !reflect.DeepEqual(r, c.want) {
			t.Fatalf("refresh of a token for %q sent resource %q, want %q", c.resource, r, c.want)
		}
		if got.OAuth.Resource != c.resource {
			t.Fatalf("refreshed token's resource %q, want %q", got.OAuth.Resource, c.resource)
		}
	}
}

func TestOAuthRefreshFailure(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	te := newTokenEndpoint(t, "some-other-refresh-token")
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	tok := model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, ClientID: "client-1", ClientSecret: secretClient,
		TokenURL: te.URL + "/token", ExpiresAt: time.Now().Add(-time.Minute), EnvVar: "GITHUB_TOKEN"}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	before, _, _ := e.store.Get(ctx, store.Key(model.CredServer, id))

	_, err = res.Resolve(ctx, id)
	ae := apierr.From(err)
	if err == nil || ae.Code != apierr.Unauthorized || ae.Message != "OAuth token expired and refresh failed" {
		t.Fatalf("refresh failure: %v", err)
	}
	if te.calls.Load() == 0 || te.lastErr.Load() != "refresh token" {
		t.Fatalf("the endpoint was not asked (calls %d, %v)", te.calls.Load(), te.lastErr.Load())
	}
	for _, s := range allSecrets {
		if strings.Contains(ae.Error(), s) {
			t.Fatalf("error carries a secret: %v", ae)
		}
	}
	after, _, _ := e.store.Get(ctx, store.Key(model.CredServer, id))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a failed refresh changed the record:\n%+v\n%+v", before, after)
	}

	// An endpoint that cannot be reached did not refuse anything: the
	// outage may end, so the answer is one the runner retries (it used to
	// be UNAUTHORIZED, which left the server down for good).
	tok.TokenURL = "http://127.0.0.1:1/token"
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable ||
		!strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("unreachable token endpoint: %v", err)
	}

	// A token endpoint that redirects is not followed: the refresh token
	// and the client's secret would go wherever it points.
	var followed atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(elsewhere.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/token", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	tok.TokenURL = redirecting.URL + "/token"
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized || followed.Load() != 0 {
		t.Fatalf("redirecting token endpoint: %v, %d requests reached its target", err, followed.Load())
	}

	// A token that expires in 30 s but cannot be refreshed right now is
	// still handed out: it works for a while.
	tok.ExpiresAt = time.Now().Add(30 * time.Second)
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	if got, err := res.Resolve(ctx, id); err != nil || got.Env["GITHUB_TOKEN"] != secretAccess {
		t.Fatalf("nearly expired token with a failing refresh: %+v, %v", got, err)
	}

	// An expired token that has no refresh token cannot be refreshed at all.
	tok = model.OAuthToken{AccessToken: secretAccess, ExpiresAt: time.Now().Add(-time.Second), EnvVar: "GITHUB_TOKEN"}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("expired without refresh token: %v", err)
	}
}

// TestOAuthRefreshOutage: a token endpoint that fails (5xx), rate limits or
// does not answer in time has not refused the refresh: the resolve of an
// expired token answers SERVICE_UNAVAILABLE naming the endpoint's host
// (retried by the runner), and once the endpoint is back the refresh works.
func TestOAuthRefreshOutage(t *testing.T) {
	var mode atomic.Value // "503", "429", "hang" or "" (the real endpoint)
	mode.Store("503")
	good := newTokenEndpoint(t, secretRefresh)
	target, _ := url.Parse(good.URL)
	hang := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("<html>upstream down</html>"))
		case "429":
			w.WriteHeader(http.StatusTooManyRequests)
		case "hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		default:
			httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
		}
	}))
	t.Cleanup(front.Close)
	t.Cleanup(func() { close(hang) }) // before front.Close, which waits for the handlers
	e := newEnv(t, func(o *credential.Options) {
		o.HTTPClient = &http.Client{Timeout: 300 * time.Millisecond}
	})
	ctx := ctxT(t)
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	tok := model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, ClientID: "client-1", ClientSecret: secretClient,
		TokenURL: front.URL + "/token?k=" + secretClient, ExpiresAt: time.Now().Add(-time.Minute), EnvVar: "GITHUB_TOKEN"}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(front.URL, "http://")
	for m, says := range map[string]string{"503": "answered HTTP 503", "429": "answered HTTP 429", "hang": "did not answer in time"} {
		mode.Store(m)
		_, err := res.Resolve(ctx, id)
		if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), host) || !strings.Contains(err.Error(), says) {
			t.Fatalf("token endpoint %s: %v", m, err)
		}
		for _, s := range allSecrets {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("error carries a secret: %v", err)
			}
		}
	}
	mode.Store("")
	if got, err := res.Resolve(ctx, id); err != nil || got.Env["GITHUB_TOKEN"] != newAccess {
		t.Fatalf("after the outage: %+v, %v", got, err)
	}
}

func TestResolverServiceNotReachable(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.stop()
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = res.Resolve(ctx, uuid.NewString())
	if ae := apierr.From(err); ae.Code != apierr.ServiceUnavailable || ae.Message != "credential service not reachable" {
		t.Fatalf("no service: %v", err)
	}
	_, err = e.client.Describe(ctx, model.CredDescribeRequest{ServerID: uuid.NewString()})
	if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("client without service: %v", err)
	}
}

// TestOAuthRefreshFailureLoggedBounded: the OAuth error code of a token
// endpoint that refused a refresh is its own text (oauth2 reads up to 1 MiB
// of its body): the log gets one line of at most model.CallEventErrorMax
// characters of it, not the endpoint's megabyte and line breaks.
func TestOAuthRefreshFailureLoggedBounded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	code := "invalid_grant\nlevel=ERROR msg=forged " + strings.Repeat("x", 512<<10)
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
	}))
	t.Cleanup(hostile.Close)
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	tok := model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, ClientID: "client-1", ClientSecret: secretClient,
		TokenURL: hostile.URL + "/token", ExpiresAt: time.Now().Add(-time.Minute), EnvVar: "GITHUB_TOKEN"}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{OAuth: &tok}}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("refused refresh: %v", err)
	}
	found := false
	for line := range strings.Lines(e.logs.String()) {
		if !strings.Contains(line, "OAuth token refresh failed") {
			continue
		}
		found = true
		var rec struct {
			OAuthError string `json:"oauth_error"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("record %.300s…: %v", line, err)
		}
		if n := utf8.RuneCountInString(rec.OAuthError); n > model.CallEventErrorMax || strings.ContainsAny(rec.OAuthError, "\r\n") ||
			!strings.HasPrefix(rec.OAuthError, "invalid_grant level=ERROR") {
			t.Errorf("oauth_error of %d characters: %.300q…", n, rec.OAuthError)
		}
	}
	if !found {
		t.Fatalf("no refresh failure in the log:\n%.2000s", e.logs.String())
	}
}
