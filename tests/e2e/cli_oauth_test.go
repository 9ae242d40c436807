package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLIServersAuth: through `mcpbus up`, a remote server that wants OAuth
// is refused with the product's message until `mcpbus servers auth`, which
// prints the authorization URL and waits; the browser (here a plain HTTP
// client: the local authorization server approves at once) comes back to
// the gateway's callback, the command ends, and the server serves calls.
// A second server names a confidential client (transport.oauth.client_id)
// whose secret `mcpbus cred set --oauth-client-secret` reads from stdin; a
// server without a client id refuses one.
func TestCLIServersAuth(t *testing.T) {
	t.Parallel()
	const clientID, clientSecret = "cli-confidential", "cli-client-secret"
	as := oauthtest.Start(t, oauthtest.Options{Clients: map[string]string{clientID: clientSecret}})
	remote := testmcp.ServeProtected(t, "remote", as)
	bin := mcpbusBin
	dir := t.TempDir()
	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data")).NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.Code == 0, r.String()
	})
	if r := cli(t, bin, url, "servers", "add", "remote", "--url", remote); r.Code != 0 {
		t.Fatalf("servers add: %s", r)
	}
	if r := cli(t, bin, url, "servers", "enable", "remote"); r.Code == 0 || !strings.Contains(r.Stderr, "UNAUTHORIZED: "+model.MsgAuthFailed) {
		t.Fatalf("enable before auth: %s", r)
	}

	cliAuthorize(t, bin, url, as, "remote")

	if r := cli(t, bin, url, "servers", "enable", "remote"); r.Code != 0 {
		t.Fatalf("enable after auth: %s", r)
	}
	if r := cli(t, bin, url, "call", "remote.echo", `{"message":"over oauth"}`); r.Code != 0 || !strings.Contains(r.Stdout, "over oauth") {
		t.Fatalf("call: %s", r)
	}
	if r := cli(t, bin, url, "cred", "describe", "remote"); r.Code != 0 || strings.Contains(r.Stdout, "at-") || !strings.Contains(strings.ToLower(r.Stdout), "oauth") {
		t.Fatalf("cred describe: %s", r)
	}

	if r := cliIn(t, bin, url, clientSecret+"\n", nil, "cred", "set", "remote", "--oauth-client-secret"); r.Code == 0 || !strings.Contains(r.Stderr, "transport.oauth.client_id") {
		t.Fatalf("client secret of a server without a client id: %s", r)
	}
	file := filepath.Join(dir, "confidential.json")
	cfg := fmt.Sprintf(`{"name":"confidential","package":{"type":"http","identifier":%q},"transport":{"type":"http","url":%q,"oauth":{"client_id":%q}}}`, remote, remote, clientID)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, bin, url, "servers", "add", "confidential", "-f", file); r.Code != 0 {
		t.Fatalf("servers add -f: %s", r)
	}
	if r := cliIn(t, bin, url, clientSecret+"\n", nil, "cred", "set", "confidential", "--oauth-client-secret"); r.Code != 0 || strings.Contains(r.String(), clientSecret) {
		t.Fatalf("cred set --oauth-client-secret: %s", r)
	}
	cliAuthorize(t, bin, url, as, "confidential")
	if got := as.SecretAuth(); !slices.Contains(got, "authorization_code client_secret_post") {
		t.Fatalf("client authentications %v: the confidential client's code exchange did not send its secret", got)
	}
	if as.Registrations() != 1 {
		t.Fatalf("registrations %d, want 1 (remote's; confidential is registered beforehand)", as.Registrations())
	}
}

// cliAuthorize runs `mcpbus servers auth <server>` and follows the URL it
// prints like a browser, until the command reports the server authorized.
func cliAuthorize(t *testing.T, bin, url string, as *oauthtest.Server, server string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := cliFor(bin, url).Command(ctx, "servers", "auth", server)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, as.URL+"/authorize?") {
		_ = cmd.Process.Kill()
		t.Fatalf("servers auth printed %q (%v); stderr %s", line, err, stderr.String())
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Get(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("callback page: %d %s", resp.StatusCode, page)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(stderr.String(), "authorized") {
		t.Fatalf("servers auth: %v; stderr %s", err, stderr.String())
	}
}
