package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
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
func TestCLIServersAuth(t *testing.T) {
	as := oauthtest.Start(t, oauthtest.Options{})
	remote := testmcp.ServeProtected(t, "remote", as)
	bin := clitest.Build(t)
	dir := t.TempDir()
	port := testkit.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	startUp(t, bin, dir, clitest.Env(), "--nats-port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"))
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

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := cliFor(bin, url).Command(ctx, "servers", "auth", "remote")
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

	if r := cli(t, bin, url, "servers", "enable", "remote"); r.Code != 0 {
		t.Fatalf("enable after auth: %s", r)
	}
	if r := cli(t, bin, url, "call", "remote.echo", `{"message":"over oauth"}`); r.Code != 0 || !strings.Contains(r.Stdout, "over oauth") {
		t.Fatalf("call: %s", r)
	}
	if r := cli(t, bin, url, "cred", "describe", "remote"); r.Code != 0 || strings.Contains(r.Stdout, "at-") || !strings.Contains(strings.ToLower(r.Stdout), "oauth") {
		t.Fatalf("cred describe: %s", r)
	}
}
