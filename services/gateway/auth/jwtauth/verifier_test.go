package jwtauth_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
)

const resource = "https://mcp.example.test/mcp"

func newVerifier(t *testing.T, opts jwtauth.Options) *jwtauth.Verifier {
	t.Helper()
	if opts.Resource == "" {
		opts.Resource = resource
	}
	v, err := jwtauth.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sign(t *testing.T, iss *jwtissuer.Issuer, c jwt.Claims) string {
	t.Helper()
	tok, err := iss.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// refused asserts Verify refuses token with UNAUTHORIZED naming why.
func refused(t *testing.T, v *jwtauth.Verifier, token, why string) {
	t.Helper()
	p, err := v.Verify(t.Context(), token)
	if err == nil {
		t.Fatalf("accepted (%+v), want refused: %s", p, why)
	}
	if apierr.Of(err) != apierr.Unauthorized || !strings.Contains(err.Error(), why) {
		t.Fatalf("error %v (code %s), want UNAUTHORIZED about %q", err, apierr.Of(err), why)
	}
}

func TestVerify(t *testing.T) {
	iss := jwtissuer.Start(t)
	other := jwtissuer.Start(t)
	v := newVerifier(t, jwtauth.Options{Issuers: []string{iss.URL()}})

	t.Run("a valid token gives its subject and scopes", func(t *testing.T) {
		p, err := v.Verify(t.Context(), sign(t, iss, iss.Claims("alice", resource, "mcpbus:call", "openid")))
		if err != nil {
			t.Fatal(err)
		}
		if p.KeyID != "oauth:alice" || p.Issuer != iss.URL() || !slices.Equal(p.Scopes, []string{auth.ScopeCall}) ||
			!p.Tools.IsZero() || p.Can(auth.ScopeAdmin) || !p.AllowsTool("any__tool") {
			t.Fatalf("principal %+v", p)
		}
	})
	t.Run("the audience may differ by a trailing slash", func(t *testing.T) {
		if _, err := v.Verify(t.Context(), sign(t, iss, iss.Claims("alice", resource+"/", "mcpbus:call"))); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		c := iss.Claims("alice", resource, "mcpbus:call")
		c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-2 * time.Minute))
		refused(t, v, sign(t, iss, c), "expired")
	})
	t.Run("expired within the leeway is accepted", func(t *testing.T) {
		c := iss.Claims("alice", resource, "mcpbus:call")
		c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-5 * time.Second))
		if _, err := v.Verify(t.Context(), sign(t, iss, c)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("without exp", func(t *testing.T) {
		c := iss.Claims("alice", resource, "mcpbus:call")
		c.ExpiresAt = nil
		refused(t, v, sign(t, iss, c), "invalid access token")
	})
	t.Run("not yet valid", func(t *testing.T) {
		c := iss.Claims("alice", resource, "mcpbus:call")
		c.NotBefore = jwt.NewNumericDate(time.Now().Add(5 * time.Minute))
		refused(t, v, sign(t, iss, c), "not valid yet")
	})
	t.Run("wrong audience", func(t *testing.T) {
		refused(t, v, sign(t, iss, iss.Claims("alice", "https://other.example.test/mcp", "mcpbus:call")), "not meant for this resource")
	})
	t.Run("untrusted issuer", func(t *testing.T) {
		refused(t, v, sign(t, other, other.Claims("alice", resource, "mcpbus:call")), "is not trusted")
	})
	t.Run("another key claiming our issuer", func(t *testing.T) {
		c := other.Claims("alice", resource, "mcpbus:call")
		c.Issuer = iss.URL()
		refused(t, v, sign(t, other, c), "not signed by a key of its issuer")
	})
	t.Run("bad signature", func(t *testing.T) {
		tok := sign(t, iss, iss.Claims("alice", resource, "mcpbus:call"))
		parts := strings.Split(tok, ".")
		forged := sign(t, iss, iss.Claims("alice", resource, "mcpbus:admin"))
		// admin claims under the call token's signature (same kid).
		refused(t, v, parts[0]+"."+strings.Split(forged, ".")[1]+"."+parts[2], "signature does not verify")
	})
	t.Run("HMAC and none are refused", func(t *testing.T) {
		c := iss.Claims("alice", resource, "mcpbus:admin")
		hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("secret"))
		if err != nil {
			t.Fatal(err)
		}
		refused(t, v, hs, "invalid access token")
		none, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, v, none, "invalid access token")
	})
	t.Run("garbage", func(t *testing.T) {
		refused(t, v, "a.b.c", "not a well-formed JWT")
	})
	t.Run("no subject", func(t *testing.T) {
		c := iss.Claims("", resource, "mcpbus:call")
		c.ClientID = ""
		refused(t, v, sign(t, iss, c), "no usable subject")
	})
	// A client id standing in for the subject could be some user's
	// subject: the token would act as that user.
	t.Run("a client id but no subject", func(t *testing.T) {
		c := iss.Claims("", resource, "mcpbus:call")
		c.ClientID = "alice"
		refused(t, v, sign(t, iss, c), "no usable subject")
	})
}

// Keys are fetched once and cached; a rotation is picked up by the first
// token with the new kid, and a made-up kid costs at most one fetch per
// interval.
func TestKeyRotation(t *testing.T) {
	iss := jwtissuer.Start(t)
	v := newVerifier(t, jwtauth.Options{Issuers: []string{iss.URL()}})
	if iss.JWKSFetches() != 0 {
		t.Fatal("keys fetched before any token came")
	}
	old := sign(t, iss, iss.Claims("alice", resource, "mcpbus:call"))
	for range 3 {
		if _, err := v.Verify(t.Context(), old); err != nil {
			t.Fatal(err)
		}
	}
	if n := iss.JWKSFetches(); n != 1 {
		t.Fatalf("%d JWKS fetches for three tokens, want 1 (cached)", n)
	}
	if err := iss.Rotate(); err != nil {
		t.Fatal(err)
	}
	fresh := sign(t, iss, iss.Claims("alice", resource, "mcpbus:call"))
	if _, err := v.Verify(t.Context(), fresh); err != nil {
		t.Fatalf("token of the rotated key: %v", err)
	}
	if n := iss.JWKSFetches(); n != 2 {
		t.Fatalf("%d JWKS fetches after a rotation, want 2", n)
	}
	// The retired key is gone from the refreshed set (its kid is now
	// unknown: one more refresh, which does not bring it back).
	refused(t, v, old, "not signed by a key of its issuer")
	// Kids nobody published: each waits for its turn to refresh (one
	// fetch a second at most), then is refused; none is held for long.
	other := jwtissuer.Start(t)
	c := other.Claims("alice", resource, "mcpbus:call")
	c.Issuer = iss.URL()
	forged := sign(t, other, c)
	before := iss.JWKSFetches()
	start := time.Now()
	for range 3 {
		refused(t, v, forged, "not signed by a key of its issuer")
	}
	elapsed := time.Since(start)
	if n := iss.JWKSFetches() - before; n < 1 || float64(n) > elapsed.Seconds()+1 {
		t.Fatalf("%d JWKS fetches for 3 unknown kids in %s, want at most one a second", n, elapsed)
	}
	if elapsed > 8*time.Second {
		t.Fatalf("unknown kids held the requests %s", elapsed)
	}
}

func TestScopes(t *testing.T) {
	iss := jwtissuer.Start(t)
	v := newVerifier(t, jwtauth.Options{Issuers: []string{iss.URL()},
		ScopeMap: []string{"mcp.tools=call", "gh.read=call tool:github__get_*", "ops=admin"}})
	verify := func(c jwt.Claims) *auth.Principal {
		t.Helper()
		p, err := v.Verify(t.Context(), sign(t, iss, c))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := verify(iss.Claims("bob", resource, "mcp.tools", "unrelated"))
	if !slices.Equal(p.Scopes, []string{auth.ScopeCall}) || !p.Tools.IsZero() {
		t.Fatalf("mapped scope: %+v", p)
	}
	p = verify(iss.Claims("bob", resource, "gh.read", "mcpbus:tool:fs__read"))
	if !p.Can(auth.ScopeCall) || !p.AllowsTool("github__get_issue") || !p.AllowsTool("fs__read") ||
		p.AllowsTool("github__delete_repo") || p.AllowsTool("fs__write") {
		t.Fatalf("tool grants: %+v", p)
	}
	p = verify(iss.Claims("bob", resource, "mcpbus:chat"))
	if p.Can(auth.ScopeCall) || !p.Can(auth.ScopeChat) {
		t.Fatalf("chat only: %+v", p)
	}
	p = verify(iss.Claims("bob", resource, "openid", "profile"))
	if len(p.Scopes) != 0 {
		t.Fatalf("no gateway scope: %+v", p)
	}
	// scp as a list (Entra, Okta) instead of scope.
	type scpClaims struct {
		jwtissuer.Claims
		Scp []string `json:"scp"`
	}
	p = verify(scpClaims{Claims: iss.Claims("bob", resource), Scp: []string{"ops"}})
	if !p.Can(auth.ScopeAdmin) {
		t.Fatalf("scp list: %+v", p)
	}
	if got := v.TokenScope(auth.ScopeCall); got != "mcp.tools" {
		t.Fatalf("TokenScope(call) = %q, want the mapped name", got)
	}
	if got := v.TokenScope(auth.ScopeChat); got != "mcpbus:chat" {
		t.Fatalf("TokenScope(chat) = %q", got)
	}
}

func TestMetadata(t *testing.T) {
	iss := jwtissuer.Start(t)
	v := newVerifier(t, jwtauth.Options{Issuers: []string{iss.URL()}, ScopeMap: []string{"mcp.tools=call"}})
	if v.MetadataURL() != "https://mcp.example.test/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("metadata URL %q", v.MetadataURL())
	}
	if !slices.Equal(v.MetadataPaths(), []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"}) {
		t.Fatalf("paths %v", v.MetadataPaths())
	}
	rec := httptest.NewRecorder()
	v.MetadataHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/.well-known/oauth-protected-resource/mcp", nil))
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	want := map[string]any{
		"resource":                 resource,
		"authorization_servers":    []any{iss.URL()},
		"scopes_supported":         []any{"mcp.tools", "mcpbus:admin", "mcpbus:call", "mcpbus:chat"},
		"bearer_methods_supported": []any{"header"},
		"resource_name":            "mcpbus gateway",
	}
	got, _ := json.Marshal(doc)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("metadata\n got %s\nwant %s", got, exp)
	}
}

// Keys come from the issuer's metadata unless a JWKS URL is set; an
// issuer that cannot be reached is SERVICE_UNAVAILABLE, not the token's
// fault, and is not asked again at once.
func TestDiscovery(t *testing.T) {
	iss := jwtissuer.Start(t)
	v := newVerifier(t, jwtauth.Options{Issuers: []string{iss.URL()}, JWKSURL: iss.JWKSURL()})
	if _, err := v.Verify(t.Context(), sign(t, iss, iss.Claims("alice", resource, "mcpbus:call"))); err != nil {
		t.Fatal(err)
	}

	gone := jwtissuer.Start(t)
	tok := sign(t, gone, gone.Claims("alice", resource, "mcpbus:call"))
	gone.Close()
	v = newVerifier(t, jwtauth.Options{Issuers: []string{gone.URL()}, HTTPTimeout: 2 * time.Second})
	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := v.Verify(ctx, tok)
		cancel()
		if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), gone.URL()) {
			t.Fatalf("unreachable issuer: %v (%s)", err, apierr.Of(err))
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := jwtauth.Options{Issuers: []string{"https://idp.example.com/realms/a"}, Resource: resource}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (jwtauth.Options{}).Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
	for name, mod := range map[string]func(*jwtauth.Options){
		"resource without issuer": func(o *jwtauth.Options) { o.Issuers = nil },
		"no resource":             func(o *jwtauth.Options) { o.Resource = "" },
		"http issuer":             func(o *jwtauth.Options) { o.Issuers = []string{"http://idp.example.com"} },
		"relative resource":       func(o *jwtauth.Options) { o.Resource = "/mcp" },
		"quote in resource":       func(o *jwtauth.Options) { o.Resource = `https://x.example/"` },
		"query":                   func(o *jwtauth.Options) { o.Issuers = []string{"https://idp.example.com/?a=b"} },
		"jwks with two issuers": func(o *jwtauth.Options) {
			o.Issuers = append(o.Issuers, "https://b.example.com")
			o.JWKSURL = "https://b.example.com/jwks"
		},
		"map without =":       func(o *jwtauth.Options) { o.ScopeMap = []string{"x"} },
		"map unknown grant":   func(o *jwtauth.Options) { o.ScopeMap = []string{"x=write"} },
		"map bad glob":        func(o *jwtauth.Options) { o.ScopeMap = []string{"x=tool:a["} },
		"map built-in name":   func(o *jwtauth.Options) { o.ScopeMap = []string{"mcpbus:call=admin"} },
		"map twice":           func(o *jwtauth.Options) { o.ScopeMap = []string{"x=call", "x=chat"} },
		"map with no grant":   func(o *jwtauth.Options) { o.ScopeMap = []string{"x="} },
		"leeway out of range": func(o *jwtauth.Options) { o.Leeway = time.Hour },
	} {
		o := ok
		o.Issuers = slices.Clone(ok.Issuers)
		mod(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestKeysNotFetchedInClear: an issuer's metadata that names a JWK Set
// over plain http (not on localhost) is not followed: whoever is on the
// way could hand the gateway keys of their own and sign any token, admin
// scope included. --oauth-jwks-url is held to the same rule.
func TestKeysNotFetchedInClear(t *testing.T) {
	keys := jwtissuer.Start(t)
	mux := http.NewServeMux()
	meta := httptest.NewServer(mux)
	t.Cleanup(meta.Close)
	keysPort := keys.URL()[strings.LastIndexByte(keys.URL(), ':')+1:]
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": meta.URL, "authorization_endpoint": meta.URL + "/authorize",
			"token_endpoint": meta.URL + "/token", "code_challenge_methods_supported": []string{"S256"},
			"jwks_uri": "http://keys.example.test:" + keysPort + jwtissuer.JWKSPath})
	})
	// The network answers keys.example.test with the key server (on the
	// way, an attacker's).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, _ := net.SplitHostPort(addr); host == "keys.example.test" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return dial(ctx, network, addr)
	}
	v := newVerifier(t, jwtauth.Options{Issuers: []string{meta.URL}, HTTPClient: &http.Client{Transport: tr, Timeout: 5 * time.Second}})
	c := keys.Claims("mallory", resource, "mcpbus:admin")
	c.Issuer = meta.URL
	p, err := v.Verify(t.Context(), sign(t, keys, c))
	if err == nil {
		t.Fatalf("a token checked against keys fetched over http was accepted: %+v", p)
	}
	if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "jwks_uri") {
		t.Fatalf("error %v (code %s), want SERVICE_UNAVAILABLE naming the jwks_uri", err, apierr.Of(err))
	}
	if n := keys.JWKSFetches(); n != 0 {
		t.Fatalf("the JWK Set was fetched %d times over http", n)
	}
}

// TestKeysNotRedirectedToClear: an https JWK Set (or metadata) that
// redirects to plain http is not followed, for the same reason.
func TestKeysNotRedirectedToClear(t *testing.T) {
	keys := jwtissuer.Start(t)
	keysPort := keys.URL()[strings.LastIndexByte(keys.URL(), ':')+1:]
	mux := http.NewServeMux()
	meta := httptest.NewTLSServer(mux)
	t.Cleanup(meta.Close)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": meta.URL, "authorization_endpoint": meta.URL + "/authorize",
			"token_endpoint": meta.URL + "/token", "code_challenge_methods_supported": []string{"S256"}, "jwks_uri": meta.URL + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://keys.example.test:"+keysPort+jwtissuer.JWKSPath, http.StatusFound)
	})
	hc := meta.Client()
	tr := hc.Transport.(*http.Transport).Clone()
	dial := (&net.Dialer{}).DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, _ := net.SplitHostPort(addr); host == "keys.example.test" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return dial(ctx, network, addr)
	}
	hc.Transport, hc.Timeout = tr, 5*time.Second
	v := newVerifier(t, jwtauth.Options{Issuers: []string{meta.URL}, HTTPClient: hc})
	c := keys.Claims("mallory", resource, "mcpbus:admin")
	c.Issuer = meta.URL
	if p, err := v.Verify(t.Context(), sign(t, keys, c)); err == nil {
		t.Fatalf("a token checked against keys fetched over http was accepted: %+v", p)
	} else if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("error %v (code %s), want SERVICE_UNAVAILABLE", err, apierr.Of(err))
	}
	if n := keys.JWKSFetches(); n != 0 {
		t.Fatalf("the JWK Set was fetched %d times over http", n)
	}
}
