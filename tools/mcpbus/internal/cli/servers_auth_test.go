package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/model"
)

// `servers auth` ends saying what happens next: the gateway restarts an
// enabled server with its new tokens, a disabled one waits for `servers
// enable` (it said "restarts with its new tokens" of a disabled server too).
func TestServersAuthSaysWhatRestarts(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		cfg, _ := json.Marshal(model.McpConfig{ID: "id1", Slug: "notion", Name: "Notion", Enabled: enabled})
		start, _ := json.Marshal(model.OAuthStartReply{Server: "notion", AuthorizationURL: "https://as.example/authorize?x=1", ExpiresAt: time.Now().Add(time.Minute)})
		authorized, _ := json.Marshal(model.OAuthEvent{Type: model.OAuthAuthorized, Server: "notion", At: time.Now()})
		var url string
		var nc *nats.Conn // the stub's connection, set before any request
		url, nc, _ = stubBus(t, "gateway-stub", map[string]micro.HandlerFunc{
			"mcp.v1.config.get": func(r micro.Request) { _ = r.Respond(cfg) },
			// The flow ends at once, as if the browser came back.
			"mcp.v1.oauth.start": func(r micro.Request) {
				_ = r.Respond(start)
				_ = nc.Publish("mcp.v1.events.oauth.notion", authorized)
			},
		})
		var out, errOut bytes.Buffer
		if code := Main([]string{"--nats", url, "servers", "auth", "notion"}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("enabled %t: code %d, %q %q", enabled, code, out.String(), errOut.String())
		}
		want := "authorized: notion restarts with its new tokens"
		if !enabled {
			want = "authorized: notion has its new tokens; it is disabled, so nothing restarts: start it with `mcpbus servers enable notion`"
		}
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("enabled %t: stderr %q, want %q", enabled, errOut.String(), want)
		}
	}
}
