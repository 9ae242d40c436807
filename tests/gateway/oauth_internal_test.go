package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
	"github.com/mcpbus/mcpbus/libs/netguard/netguardtest"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
)

// TestOAuthEndpointsOfAPublicServerStayOutside: the metadata of a server
// outside the operator's network cannot aim the gateway's registration or
// token request (POSTs it sends on the server's word) at the host or its
// network, directly or by a redirect. The test calls 127.0.0.2 internal
// and 127.0.0.1, where the servers listen, public.
func TestOAuthEndpointsOfAPublicServerStayOutside(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	inner := listenInside(t, &reached)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)

	guard := netguard.Guard{Internal: func(ip netip.Addr) bool { return ip == netip.MustParseAddr("127.0.0.2") }}
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{Timeout: 10 * time.Second, Guard: guard}})

	for _, c := range []struct {
		name string
		meta func(*oauthex.AuthServerMeta)
	}{
		{"registration inside", func(m *oauthex.AuthServerMeta) { m.RegistrationEndpoint = inner.URL + "/register" }},
		{"registration redirected inside", func(m *oauthex.AuthServerMeta) { m.RegistrationEndpoint = redirect.URL + "/register" }},
		{"token inside", func(m *oauthex.AuthServerMeta) { m.TokenEndpoint = inner.URL + "/token" }},
		{"token redirected inside", func(m *oauthex.AuthServerMeta) { m.TokenEndpoint = redirect.URL + "/token" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			as := oauthtest.Start(t, oauthtest.Options{Meta: c.meta})
			slug := strings.ReplaceAll(c.name, " ", "-")
			if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, as))}); r.status != http.StatusCreated {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			before := reached.Load()
			r := e.do("POST", "/api/v1/servers/"+slug+"/auth", nil)
			if r.status == http.StatusOK {
				// Registered outside: the token exchange comes after the
				// user's approval, and must fail then.
				var out model.OAuthStartReply
				r.decode(t, &out)
				if code, page := browse(t, out.AuthorizationURL); code != http.StatusBadRequest || !strings.Contains(page, model.MsgAuthorizeFailed) {
					t.Fatalf("callback page: %d %q", code, page)
				}
			} else if r.contract(t).Code != apierr.Unauthorized {
				t.Fatalf("start: %d %s", r.status, r.body)
			}
			if n := reached.Load() - before; n != 0 {
				t.Fatalf("the internal address got %d requests", n)
			}
		})
	}
}

// TestOAuthAuthorizationServerThatNeverAnswers: an authorization server
// that accepts the connection and never answers, at discovery (its
// metadata) or at registration, fails the authorization within the
// flow's per-request bound, saying it did not answer, instead of holding
// the start (and the flow's goroutine) for the whole flow.
func TestOAuthAuthorizationServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select { // accepts, reads, never answers
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(silent.Close)
	t.Cleanup(func() { close(stop) }) // runs first: the handlers return, Close does not wait on them

	const flowTimeout, requestTimeout = 40 * time.Second, time.Second
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{Timeout: flowTimeout, RequestTimeout: requestTimeout}})
	registering := oauthtest.Start(t, oauthtest.Options{Meta: func(m *oauthex.AuthServerMeta) { m.RegistrationEndpoint = silent.URL + "/register" }})
	for _, c := range []struct {
		name string
		as   *oauthtest.Server
	}{
		{"discovery", &oauthtest.Server{URL: silent.URL}}, // its metadata never comes
		{"registration", registering},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			slug := "silent-at-" + c.name
			if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, c.as))}); r.status != http.StatusCreated {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			began := time.Now()
			r := e.do("POST", "/api/v1/servers/"+slug+"/auth", nil)
			took := time.Since(began)
			if took > flowTimeout/2 {
				t.Fatalf("the start took %s (the flow's timeout is %s, each request's %s): %d %s", took, flowTimeout, requestTimeout, r.status, r.body)
			}
			if ae := r.contract(t); ae.Code != apierr.Network || ae.Message != oauthflow.MsgNoAnswer {
				t.Fatalf("start: %d %s", r.status, r.body)
			}
		})
	}
}

// TestOAuthServerInsideOnlyByItsDNS: a server is trusted as inside the
// operator's network (its flow's requests may go to internal addresses)
// only while its connections land inside. A public server whose DNS
// answered the gateway's check with internal addresses and the probe's
// dial with its own (DNS rebinding) must not get that trust: its metadata
// then aimed the registration at an internal service. A server installed
// from a registry (its URL is someone else's word) never gets it: the
// runner reaches such a server at public addresses only, and the flow's
// probe went to the internal address its name resolved to. The test calls
// 127.0.0.2 internal and 127.0.0.1, where the attacker listens, public.
func TestOAuthServerInsideOnlyByItsDNS(t *testing.T) {
	t.Parallel()
	internal := netip.MustParseAddr("127.0.0.2")
	var reached atomic.Int32
	inner := listenInside(t, &reached)

	// The attacker: a server that asks for OAuth, its resource metadata
	// naming an authorization server whose registration endpoint is the
	// internal service.
	as := oauthtest.Start(t, oauthtest.Options{Meta: func(m *oauthex.AuthServerMeta) { m.RegistrationEndpoint = inner.URL + "/register" }})
	mux := http.NewServeMux()
	attacker := httptest.NewServer(mux)
	t.Cleanup(attacker.Close)
	_, port, _ := net.SplitHostPort(attacker.Listener.Addr().String())
	rebound := "http://rebind.example.test:" + port + "/mcp"
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+attacker.URL+`/prm"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
	mux.HandleFunc("/prm", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(oauthex.ProtectedResourceMetadata{Resource: rebound, AuthorizationServers: []string{as.URL}})
	})

	// The registry's server: its name resolves to the internal service only.
	inside := listenInside(t, &reached)
	_, insidePort, _ := net.SplitHostPort(inside.Listener.Addr().String())
	registryURL := "http://registry-entry.example.test:" + insidePort + "/mcp"

	names := netguardtest.Resolver(map[string][]netip.Addr{"rebind.example.test": {internal}, "registry-entry.example.test": {internal}})
	guard := netguard.Guard{Internal: func(ip netip.Addr) bool { return ip == internal }, Resolver: names}
	// What the dials resolve: the rebinding name now answers with the
	// attacker's address; every other name as the guard's resolver does.
	dialer := &net.Dialer{Timeout: 5 * time.Second, Resolver: names}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, p, _ := net.SplitHostPort(addr); host == "rebind.example.test" {
			addr = net.JoinHostPort("127.0.0.1", p)
		}
		return dialer.DialContext(ctx, network, addr)
	}
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{Timeout: 10 * time.Second, RequestTimeout: 5 * time.Second,
		Guard: guard, HTTPClient: &http.Client{Transport: tr}}})

	registryCfg := remoteConfig("registry-entry", registryURL)
	registryCfg.Source = model.Source{Type: model.SourceOfficial, Name: "example/registry-entry"}
	for _, cfg := range []model.McpConfig{remoteConfig("rebinding", rebound), registryCfg} {
		t.Run(cfg.Name, func(t *testing.T) {
			if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			before := reached.Load()
			r := e.do("POST", "/api/v1/servers/"+cfg.Name+"/auth", nil)
			if r.status == http.StatusOK {
				t.Fatalf("start: %d %s, want refused", r.status, r.body)
			}
			if n := reached.Load() - before; n != 0 {
				t.Fatalf("the internal address got %d requests (start: %d %s)", n, r.status, r.body)
			}
			// Said as the runner says it of the registry's entry (its URL,
			// not an outage: VALIDATION_ERROR on transport.url), and of
			// the rebound name; never "could not reach", which reads as
			// an outage to wait out.
			c := r.contract(t)
			t.Logf("start: %d %s %q (field %q)", r.status, c.Code, c.Message, c.Field)
			if r.status != http.StatusBadRequest || c.Code != apierr.Validation || c.Field != "transport.url" {
				t.Fatalf("start: %d %s, want 400 VALIDATION_ERROR on transport.url", r.status, r.body)
			}
			if cfg.Source.Type != "" && !strings.Contains(c.Message, model.MsgRegistryRemoteInternal) {
				t.Fatalf("start: %q, want it to say %q", c.Message, model.MsgRegistryRemoteInternal)
			}
		})
	}
}

// listenInside serves an internal service on 127.0.0.2 (the tests' internal
// network; the test is skipped where there is no such loopback address),
// counting in reached the requests that get to it. It ends with the test.
func listenInside(t *testing.T, reached *atomic.Int32) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	inner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		http.Error(w, "an internal service", http.StatusTeapot)
	}))
	_ = inner.Listener.Close()
	inner.Listener = ln
	inner.Start()
	t.Cleanup(inner.Close)
	return inner
}
