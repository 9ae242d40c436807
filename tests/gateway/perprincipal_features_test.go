package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// featureSeen is one request of a resource or prompt method an upstream
// server got: the method and the user key header it carried ("" on the
// server's own session).
type featureSeen struct{ method, user string }

// TestPerPrincipalResourcesAndPrompts: on a per-principal server, a key's
// resources and prompts (not only its tool calls) go on its own upstream
// session, in both eras: a key without credentials of its own reads
// nothing (never through the server's own session, the operator's
// credentials), lists none of the server's resources or prompts, and once
// it has its own, each read and get carries its own header and no one
// else's.
func TestPerPrincipalResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []featureSeen
	url := testmcp.ServeHTTP(t, "remote", nil, testmcp.OnMethod(func(method string, r *http.Request) {
		if strings.HasPrefix(method, "resources/") || strings.HasPrefix(method, "prompts/") {
			mu.Lock()
			seen = append(seen, featureSeen{method, r.Header.Get("X-User-Key")})
			mu.Unlock()
		}
	}))
	e := start(t)
	cfg := remoteConfig("remote", url)
	cfg.Auth.PerPrincipal = true
	cfg.Enabled = true
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.waitState("remote", model.StateRunning)
	var keyA, keyB model.KeyCreateReply
	for _, k := range []*model.KeyCreateReply{&keyA, &keyB} {
		r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "user", Scopes: []string{model.KeyScopeCall}})
		r.decode(t, k)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { // the catalog reaches the gateway
		r := e.doKey(keyA.Key, "POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "remote__echo", Params: json.RawMessage(`{"message":"hi"}`)})
		return r.status != http.StatusNotFound, "echo is unknown to the gateway"
	})
	if r := e.doKey(keyA.Key, "PUT", "/api/v1/me/authorizations/remote", model.Credentials{Headers: map[string]string{"X-User-Key": "key-of-alice"}}); r.status != http.StatusOK {
		t.Fatalf("A's own secret: %d %s", r.status, r.body)
	}
	const uri = "mcpbus://remote/test:%2F%2Fgreeting"
	read := func(s *mcpSession) (string, error) {
		res, err := s.ReadResource(ctxT(t, 20*time.Second), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			return "", err
		}
		if len(res.Contents) != 1 {
			return "", fmt.Errorf("contents %+v", res.Contents)
		}
		return res.Contents[0].Text, nil
	}
	get := func(s *mcpSession) error {
		_, err := s.GetPrompt(ctxT(t, 20*time.Second), &mcp.GetPromptParams{Name: "remote__greet", Arguments: map[string]string{"who": "x"}})
		return err
	}
	lists := func(s *mcpSession) (resources, prompts int) {
		rs, err := s.ListResources(ctxT(t, 20*time.Second), nil)
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		ps, err := s.ListPrompts(ctxT(t, 20*time.Second), nil)
		if err != nil {
			t.Fatalf("prompts/list: %v", err)
		}
		return len(rs.Resources), len(ps.Prompts)
	}
	for _, version := range []string{"2025-11-25", ""} { // "": 2026-07-28
		era := version
		if era == "" {
			era = "2026-07-28"
		}
		a := connectMCPAt(t, e.url, keyA.Key, version)
		b := connectMCPAt(t, e.url, keyB.Key, version)
		if text, err := read(a); err != nil || text != "hello from remote" {
			t.Fatalf("%s: A's read: %q %v", era, text, err)
		}
		if err := get(a); err != nil {
			t.Fatalf("%s: A's prompts/get: %v", era, err)
		}
		if r, p := lists(a); r != 1 || p == 0 {
			t.Fatalf("%s: A lists %d resources, %d prompts", era, r, p)
		}
		// B has no credentials of its own: nothing of the server for it.
		if text, err := read(b); err == nil || !strings.Contains(err.Error(), model.MsgNotAuthorized) {
			t.Fatalf("%s: B's read without credentials: %q %v, want not authorized", era, text, err)
		}
		if err := get(b); err == nil || !strings.Contains(err.Error(), model.MsgNotAuthorized) {
			t.Fatalf("%s: B's prompts/get without credentials: %v, want not authorized", era, err)
		}
		if r, p := lists(b); r != 0 || p != 0 {
			t.Fatalf("%s: B lists %d resources, %d prompts of a server it has no credentials for", era, r, p)
		}
	}
	if r := e.doKey(keyB.Key, "PUT", "/api/v1/me/authorizations/remote", model.Credentials{Headers: map[string]string{"X-User-Key": "key-of-bob"}}); r.status != http.StatusOK {
		t.Fatalf("B's own secret: %d %s", r.status, r.body)
	}
	mu.Lock()
	before := len(seen)
	mu.Unlock()
	b := connectMCPAt(t, e.url, keyB.Key, "2025-11-25")
	if text, err := read(b); err != nil || text != "hello from remote" {
		t.Fatalf("B's read with its own credentials: %q %v", text, err)
	}
	if err := get(b); err != nil {
		t.Fatalf("B's prompts/get with its own credentials: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var users []string
	for i, s := range seen {
		switch {
		case s.method != "resources/read" && s.method != "prompts/get":
		case s.user == "":
			t.Errorf("%s went on the server's own session (the operator's credentials)", s.method)
		case i >= before && s.user != "key-of-bob":
			t.Errorf("B's %s carried %q", s.method, s.user)
		default:
			users = append(users, s.user)
		}
	}
	if len(users) == 0 || !contains(users, "key-of-alice") || !contains(users, "key-of-bob") {
		t.Errorf("reads and gets upstream carried %v, want alice's and bob's own keys", users)
	}
}
