package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLIPerPrincipalSecrets: through `mcpbus up`, an operator manages one
// key's own header secret of a --per-principal server with the CLI: before
// `cred set --principal` the key's calls are refused with how to authorize;
// after it the upstream sees that key's header and no other; `cred describe
// --principal` names it without its value; `servers auth revoke
// --principal` refuses the key's calls again. A server without
// per_principal takes no principal's record.
func TestCLIPerPrincipalSecrets(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string // X-User-Key of every upstream request in a session
	remote := testmcp.ServeHTTP(t, "remote", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Mcp-Session-Id") != "" {
				mu.Lock()
				seen = append(seen, r.Header.Get("X-User-Key"))
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	bin := mcpbusBin
	dir := t.TempDir()
	up := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"))
	url, gw := up.NATSURL(), strings.TrimPrefix(up.HTTPURL(), "http://")
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.Code == 0, r.String()
	})
	if r := cli(t, bin, url, "servers", "add", "remote", "--url", remote, "--per-principal", "--enabled"); r.Code != 0 {
		t.Fatalf("servers add: %s", r)
	}
	if r := cli(t, bin, url, "servers", "add", "shared", "--url", remote); r.Code != 0 {
		t.Fatalf("servers add shared: %s", r)
	}
	r := cli(t, bin, url, "--json", "keys", "create", "user", "--scope", "call")
	var key model.KeyCreateReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &key) != nil || key.Key == "" {
		t.Fatalf("keys create: %s", r)
	}
	who := "key:" + key.ID

	invoke := func() (int, string) {
		body := `{"tool_name":"remote__echo","params":{"message":"hi"}}`
		req, err := http.NewRequest("POST", "http://"+gw+"/mcp/invoke", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	var status int
	var body string
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		status, body = invoke()
		return status != http.StatusNotFound, "remote__echo is not in the catalog yet: " + body
	})
	if status != http.StatusUnauthorized || !strings.Contains(body, model.MsgNotAuthorized+"remote") {
		t.Fatalf("call before the key's secret: %d %s", status, body)
	}

	if r := cliFor(bin, url).RunInput(t, "secret-of-the-user\n", "cred", "set", "remote", "X-User-Key", "--header", "--principal", who); r.Code != 0 || strings.Contains(r.String(), "secret-of-the-user") {
		t.Fatalf("cred set --principal: %s", r)
	}
	if status, body = invoke(); status != http.StatusOK || !strings.Contains(body, "hi") {
		t.Fatalf("call with the key's secret: %d %s", status, body)
	}
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if !strings.Contains(got, "secret-of-the-user") {
		t.Fatalf("the upstream saw X-User-Key %q, want the key's own", got)
	}
	if r := cli(t, bin, url, "cred", "describe", "remote", "--principal", who); r.Code != 0 || !strings.Contains(r.Stdout, "X-User-Key") || strings.Contains(r.Stdout, "secret-of-the-user") {
		t.Fatalf("cred describe --principal: %s", r)
	}
	// The server's own record is not the key's: it holds nothing.
	if r := cli(t, bin, url, "cred", "describe", "remote"); r.Code != 0 || strings.Contains(r.Stdout, "X-User-Key") {
		t.Fatalf("cred describe of the server: %s", r)
	}
	if r := cliFor(bin, url).RunInput(t, "x\n", "cred", "set", "shared", "X-User-Key", "--header", "--principal", who); r.Code == 0 || !strings.Contains(r.Stderr, "auth.per_principal") {
		t.Fatalf("cred set --principal on a shared server: %s", r)
	}

	if r := cli(t, bin, url, "servers", "auth", "revoke", "remote", "--principal", who); r.Code != 0 {
		t.Fatalf("servers auth revoke: %s", r)
	}
	if status, body = invoke(); status != http.StatusUnauthorized || !strings.Contains(body, model.MsgNotAuthorized) {
		t.Fatalf("call after the revoke: %d %s", status, body)
	}
	if r := cli(t, bin, url, "servers", "auth", "revoke", "remote"); r.Code == 0 || !strings.Contains(r.Stderr, "--principal") {
		t.Fatalf("revoke without --principal: %s", r)
	}
}
