package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// A secret changed over REST reaches the running server: the gateway
// restarts it (as `mcpbus cred set` does), says so in Mcpbus-Restarted, and
// ?restart=false leaves it running with the old value.
func TestSecretChangeRestartsServer(t *testing.T) {
	t.Parallel()
	e := start(t)
	cfg := model.McpConfig{Name: "keyed", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"API_TOKEN": {IsSecret: true}},
	}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.waitState("keyed", model.StateRunning)
	hash := func(v string) string { s := sha256.Sum256([]byte(v)); return hex.EncodeToString(s[:]) }
	// seen is the hash of API_TOKEN the running server has; "" when unset.
	seen := func() string {
		r := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "keyed__env_sha256", Params: json.RawMessage(`{"name":"API_TOKEN"}`)})
		var inv rest.InvokeReply
		r.decode(t, &inv)
		if r.status != http.StatusOK {
			t.Fatalf("invoke: %d %s", r.status, r.body)
		}
		var res struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(inv.Result, &res); err != nil || len(res.Content) == 0 {
			t.Fatalf("result %s: %v", inv.Result, err)
		}
		return strings.TrimSpace(res.Content[0].Text)
	}
	waitSeen := func(want, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			e.waitState("keyed", model.StateRunning)
			got := seen()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the server sees %q, want %q", what, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	unset := seen()
	put := func(path, value string) reply {
		r := e.do("PUT", path, model.Credentials{Env: map[string]string{"API_TOKEN": value}})
		if r.status != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", path, r.status, r.body)
		}
		return r
	}
	if r := put("/api/v1/servers/keyed/credentials", "first-token-value"); r.header.Get(rest.RestartedHeader) != "true" {
		t.Fatalf("a set on a running server: %s = %q", rest.RestartedHeader, r.header.Get(rest.RestartedHeader))
	}
	waitSeen(hash("first-token-value"), "after the first set")
	// Opting out: stored, not applied until the next start.
	if r := put("/api/v1/servers/keyed/credentials?restart=false", "second-token-value"); r.header.Get(rest.RestartedHeader) != "false" {
		t.Fatalf("?restart=false: %s = %q", rest.RestartedHeader, r.header.Get(rest.RestartedHeader))
	}
	if got := seen(); got != hash("first-token-value") {
		t.Fatalf("?restart=false restarted the server (it sees %q)", got)
	}
	// A delete applies too: the server runs without the secret.
	r := e.do("DELETE", "/api/v1/servers/keyed/credentials?name=API_TOKEN", nil)
	if r.status != http.StatusOK || r.header.Get(rest.RestartedHeader) != "true" {
		t.Fatalf("delete: %d %s (%s = %q)", r.status, r.body, rest.RestartedHeader, r.header.Get(rest.RestartedHeader))
	}
	waitSeen(unset, "after the delete")
	if r := e.do("PUT", "/api/v1/servers/keyed/credentials?restart=maybe", model.Credentials{Env: map[string]string{"API_TOKEN": "x-value-123"}}); r.status != http.StatusBadRequest {
		t.Fatalf("?restart=maybe: %d %s", r.status, r.body)
	}
}

// A server whose upstream refused its key is in error and is not restarted
// automatically; storing the right key brings it back (docs/servers.md):
// the secret change restarts a server in error as it does a running one.
func TestSecretChangeRestartsServerInError(t *testing.T) {
	t.Parallel()
	url := testmcp.ServeHTTP(t, "remote", nil, func(h http.Handler) http.Handler {
		return testmcp.RequireBearer("the-right-token", h)
	})
	e := start(t)
	c := remoteConfig("keyed", url)
	c.Transport.SecretHeaders = []string{"Authorization"}
	c.Enabled = true
	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: c,
		Secrets: &model.Credentials{Headers: map[string]string{"Authorization": "Bearer a-wrong-token"}}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if st := e.waitState("keyed", model.StateError); st.Code != string(apierr.Unauthorized) {
		t.Fatalf("with the wrong key: %+v, want UNAUTHORIZED", st)
	}
	r = e.do("PUT", "/api/v1/servers/keyed/credentials", model.Credentials{Headers: map[string]string{"Authorization": "Bearer the-right-token"}})
	if r.status != http.StatusOK || r.header.Get(rest.RestartedHeader) != "true" {
		t.Fatalf("set on a server in error: %d %s (%s = %q)", r.status, r.body, rest.RestartedHeader, r.header.Get(rest.RestartedHeader))
	}
	e.waitState("keyed", model.StateRunning)
	r = e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "keyed__echo", Params: json.RawMessage(`{"message":"back"}`)})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "back") {
		t.Fatalf("call after the new key: %d %s", r.status, r.body)
	}
}
