package registry_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
)

// dialAs is a client whose connections to the named addresses go to the
// given listeners instead: a registry on a public name, served locally.
func dialAs(base *http.Transport, to map[string]string) *http.Client {
	t := base.Clone()
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if local, ok := to[addr]; ok {
			addr = local
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: t}
}

// redirectTo answers every request with a redirect to target + its path and query.
func redirectTo(target string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusFound)
	}
}

// A public registry cannot redirect the registry service to an address
// inside the host or its network: the internal server is never asked, and
// the search fails as the registry being unreachable.
func TestRegistryRedirectToInternalAddressRefused(t *testing.T) {
	e := start(t, setup{})
	var asked atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"servers": []any{map[string]any{"server": map[string]any{
			"name": "io.github.inside/metadata", "version": "1.0.0", "description": "fetched from inside"}}}})
	}))
	t.Cleanup(internal.Close)
	public := httptest.NewServer(redirectTo(internal.URL))
	t.Cleanup(public.Close)

	opts := registry.Options{
		Prefix:      "redirect",
		OfficialURL: "http://registry.example.com",
		SmitheryURL: e.smi.URL,
		HTTPClient:  dialAs(http.DefaultTransport.(*http.Transport), map[string]string{"registry.example.com:80": public.Listener.Addr().String()}),
		HasCommand:  func(string) bool { return true },
		Logger:      e.logger(),
	}
	e.run(t, e.nc, opts)
	r, err := registry.Search(context.Background(), e.nc, "redirect", model.RegistrySearchRequest{Query: "metadata", Registry: model.RegistryOfficial})
	if err == nil {
		t.Fatalf("search followed the redirect to %s: %+v", internal.URL, r)
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the internal server was asked %d times", n)
	}
	if ae := asAPIErr(t, err); ae.Code != apierr.Network || !strings.Contains(ae.Message, "internal address") {
		t.Fatalf("error %v, want NETWORK_ERROR naming the refused redirect", ae)
	}
}

// A registry reached over https cannot redirect to plain http: the
// Smithery key would follow in clear text.
func TestRegistryRedirectFromHTTPSToHTTPRefused(t *testing.T) {
	e := start(t, setup{})
	var auths atomic.Value
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auths.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"servers": []any{map[string]any{"qualifiedName": "@plain/text"}},
			"pagination": map[string]any{"currentPage": 1, "totalPages": 1}})
	}))
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(redirectTo("http://example.com:8080"))
	t.Cleanup(secure.Close)

	opts := registry.Options{
		Prefix:         "downgrade",
		OfficialURL:    e.off.URL,
		SmitheryURL:    "https://example.com", // the test certificate's name
		SmitheryAPIKey: "sk-smithery-test",
		HTTPClient: dialAs(secure.Client().Transport.(*http.Transport), map[string]string{
			"example.com:443": secure.Listener.Addr().String(), "example.com:8080": plain.Listener.Addr().String()}),
		HasCommand: func(string) bool { return true },
		Logger:     e.logger(),
	}
	e.run(t, e.nc, opts)
	r, err := registry.Search(context.Background(), e.nc, "downgrade", model.RegistrySearchRequest{Query: "text", Registry: model.RegistrySmithery})
	if a, _ := auths.Load().(string); a != "" {
		t.Fatalf("the Smithery key went over plain http: %q", a)
	}
	if err == nil {
		t.Fatalf("search followed a redirect from https to http: %v", names(r.Results))
	}
	if ae := asAPIErr(t, err); ae.Code != apierr.Network || !strings.Contains(ae.Message, "https to http") {
		t.Fatalf("error %v, want NETWORK_ERROR naming the refused redirect", ae)
	}
}

// A private sub-registry (its base URL names an internal host) may
// redirect inside the network it is in.
func TestPrivateRegistryRedirectsInside(t *testing.T) {
	e := start(t, setup{})
	moved := httptest.NewServer(redirectTo(e.off.URL))
	t.Cleanup(moved.Close)
	opts := registry.Options{Prefix: "private", OfficialURL: moved.URL, SmitheryURL: e.smi.URL,
		HasCommand: func(string) bool { return true }, Logger: e.logger()}
	e.run(t, e.nc, opts)
	r, err := registry.Search(context.Background(), e.nc, "private", model.RegistrySearchRequest{Query: "airtable", Registry: model.RegistryOfficial})
	if err != nil || len(r.Results) == 0 {
		t.Fatalf("search through a private registry's redirect: %v %+v", err, r)
	}
}
