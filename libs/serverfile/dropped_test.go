package serverfile_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// richConfig uses every setting a user can give a server.
func richConfig() model.McpConfig {
	c := conf("Everything", "everything", npm("@modelcontextprotocol/server-everything", "stdio"), model.Transport{Type: model.TransportStdio}, model.AuthAPIKey,
		map[string]model.EnvVar{"MODE": {Value: "demo"}, "DEMO_API_KEY": secretVar("DEMO_API_KEY")})
	c.Enabled = false
	c.Source = model.Source{Type: model.SourceOfficial, Name: "io.example/everything", Version: "1.2.0"}
	c.Config = json.RawMessage(`{"depth":2}`)
	c.Tools = model.ToolFilter{Allow: []string{"*"}, Deny: []string{"echo", "add"}}
	c.Runtime = model.Runtime{CallTimeout: model.Duration(45 * time.Second), StartTimeout: model.Duration(time.Minute), Eager: true,
		IdleTimeout: model.Duration(-1), MaxInflight: 4, Replicas: 2}
	return c
}

// Our own format keeps everything: export then import gives the same config.
func TestServersFormatRoundTripIsLossless(t *testing.T) {
	c := richConfig()
	if d := serverfile.Dropped(model.FormatServers, []model.McpConfig{c}); len(d) != 0 {
		t.Fatalf("the servers format drops %q", d)
	}
	data, err := serverfile.Render(model.FormatServers, []model.McpConfig{c})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := serverfile.Parse(model.FormatServers, data, map[string]string{"DEMO_API_KEY": "v"})
	if err != nil || len(entries) != 1 {
		t.Fatalf("import: %v %v", entries, err)
	}
	got := entries[0].Config
	got.Slug = c.Slug
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", got, c)
	}
}

// The client formats have no place for tool filters, timeouts and the rest:
// Dropped names them per server, and only what is really lost.
func TestClientFormatsSayWhatTheyDrop(t *testing.T) {
	rich, plain := richConfig(), conf("plain", "plain", npm("p"), model.Transport{Type: model.TransportStdio}, model.AuthNone, nil)
	for _, format := range []string{model.FormatMCPServers, model.FormatMCPYAML} {
		got := serverfile.Dropped(format, []model.McpConfig{rich, plain})
		t.Logf("%s: %q", format, got)
		if len(got) != 1 || !strings.HasPrefix(got[0], "everything: ") {
			t.Fatalf("%s: %q, want one line for everything", format, got)
		}
		for _, field := range []string{"tools", "runtime", "source", "config"} {
			if !strings.Contains(got[0], field) {
				t.Errorf("%s: %q does not name %s", format, got[0], field)
			}
		}
		if strings.Contains(got[0], "env_vars") || strings.Contains(got[0], "package") {
			t.Errorf("%s: %q names settings that survive", format, got[0])
		}
	}
}
