package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestOAuthTokenRevocation: access tokens are refused before their exp once
// revoked, on every gateway instance of the bus within about a second: one
// token by its jti (POST /api/v1/tokens/revoke on A, refused on A and B),
// then every token of a subject issued up to the revocation (mcp.v1.tokens
// .revoke, the CLI's): the subject's older tokens are refused with the
// reason, its newer ones and other subjects' work.
func TestOAuthTokenRevocation(t *testing.T) {
	iss := jwtissuer.Start(t)
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	opts := gateway.Options{AuthFailures: 1000, OAuth: jwtauth.Options{Issuers: []string{iss.URL()}, Resource: oauthResource}}
	a, b := startGateway(t, e, opts), startGateway(t, e, opts)
	aliceClaims := iss.Claims("alice", oauthResource, "mcpbus:call")
	alice := issue(t, iss, aliceClaims)
	alice2 := issue(t, iss, iss.Claims("alice", oauthResource, "mcpbus:call"))
	bob := issue(t, iss, iss.Claims("bob", oauthResource, "mcpbus:call"))
	for _, h := range []*gw{a, b} {
		for _, tok := range []string{alice, alice2, bob} {
			if r := h.do("GET", "/mcp/tools", tok, nil); r.status != http.StatusOK {
				t.Fatalf("%s before any revocation: %d %s", h.url, r.status, r.body)
			}
		}
	}
	// refused waits until tok gets 401 with want in its message on h.
	refused := func(h *gw, what, tok, want string) {
		t.Helper()
		began := time.Now()
		deadline := began.Add(time.Second)
		for {
			r := h.do("GET", "/mcp/tools", tok, nil)
			if r.status == http.StatusUnauthorized {
				if e := r.contract(t); e.Code != apierr.Unauthorized || !strings.Contains(e.Message, want) {
					t.Fatalf("%s on %s: %+v, want %q", what, h.url, e, want)
				}
				t.Logf("%s refused on %s %s after asking", what, h.url, time.Since(began).Round(time.Millisecond))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on %s: still %d a second after the revocation", what, h.url, r.status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	works := func(h *gw, what, tok string) {
		t.Helper()
		if r := h.do("GET", "/mcp/tools", tok, nil); r.status != http.StatusOK {
			t.Fatalf("%s on %s: %d %s", what, h.url, r.status, r.body)
		}
	}

	// Bad requests change nothing; a call key may not revoke.
	for _, body := range []map[string]string{{}, {"jti": "x", "sub": "alice"}, {"sub": " alice"}, {"iss": iss.URL()}, {"jti": "x", "iss": iss.URL()}, {"sub": "alice", "iss": "x\ty"}} {
		if r := a.do("POST", "/api/v1/tokens/revoke", a.admin, body); r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
			t.Fatalf("revoke %v: %d %s", body, r.status, r.body)
		}
	}
	if r := a.do("POST", "/api/v1/tokens/revoke", a.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key, map[string]string{"sub": "alice"}); r.status != http.StatusForbidden {
		t.Fatalf("revoke with a call key: %d %s", r.status, r.body)
	}
	works(b, "alice after refused revocations", alice)

	// One token, by jti, revoked on A.
	r := a.do("POST", "/api/v1/tokens/revoke", a.admin, model.TokenRevokeRequest{JTI: aliceClaims.ID})
	var rv model.TokenRevocation
	r.decode(t, &rv)
	if r.status != http.StatusOK || rv.Kind != model.RevokeJTI || rv.Value != aliceClaims.ID || !rv.ExpiresAt.After(rv.RevokedAt.Add(23*time.Hour)) {
		t.Fatalf("revoke jti: %d %s", r.status, r.body)
	}
	refused(a, "the revoked token", alice, "it was revoked at")
	refused(b, "the revoked token", alice, "it was revoked at")
	works(b, "alice's other token", alice2)

	// Every token of a subject, over the bus.
	nc, err := e.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.RequestJSON(ctx, nc, bus.NewSubjects("").Service("tokens", "revoke"), model.TokenRevokeRequest{Sub: "alice"}, &rv, 0); err != nil || rv.Kind != model.RevokeSub {
		t.Fatalf("tokens.revoke sub: %+v %v", rv, err)
	}
	for _, h := range []*gw{a, b} {
		refused(h, "alice's older token", alice2, "the tokens of alice issued up to")
		works(h, "bob", bob)
	}
	// A token alice gets after the revocation works (iat is in seconds).
	time.Sleep(1100 * time.Millisecond)
	fresh := iss.Claims("alice", oauthResource, "mcpbus:call")
	fresh.IssuedAt = jwt.NewNumericDate(time.Now())
	for _, h := range []*gw{a, b} {
		works(h, "alice's new token", issue(t, iss, fresh))
	}
	// A subject of one issuer: another issuer's bob is not this one.
	for _, other := range []string{"https://other.example.com", iss.URL()} {
		r = a.do("POST", "/api/v1/tokens/revoke", a.admin, model.TokenRevokeRequest{Sub: "bob", Iss: other})
		if r.decode(t, &rv); r.status != http.StatusOK || rv.Kind != model.RevokeSub || rv.Issuer != other {
			t.Fatalf("revoke bob of %s: %d %s", other, r.status, r.body)
		}
		if other != iss.URL() {
			time.Sleep(200 * time.Millisecond) // b's watch has had its chance
			works(a, "bob, after another issuer's bob was revoked", bob)
			works(b, "bob, after another issuer's bob was revoked", bob)
		}
	}
	for _, h := range []*gw{a, b} {
		refused(h, "bob, revoked for his issuer", bob, "the tokens of bob issued up to")
	}
	// A gateway started later loads the list.
	c := startGateway(t, e, opts)
	refused(c, "the revoked token on a new instance", alice, "it was revoked at")
}
