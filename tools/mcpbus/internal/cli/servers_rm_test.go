package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// stubConfig answers mcp.v1.config.{get,delete} for one server and counts
// the deletes, as the config service would.
func stubConfig(t *testing.T, cfg model.McpConfig) (url string, deletes *atomic.Int32) {
	t.Helper()
	deletes = &atomic.Int32{}
	get, _ := json.Marshal(cfg)
	del, _ := json.Marshal(model.ConfigDeleteReply{ID: cfg.ID, Server: cfg.Slug})
	url, _, _ = stubBus(t, "config-stub", map[string]micro.HandlerFunc{
		"mcp.v1.config.get":    func(r micro.Request) { _ = r.Respond(get) },
		"mcp.v1.config.delete": func(r micro.Request) { deletes.Add(1); _ = r.Respond(del) },
	})
	return url, deletes
}

// `servers rm` deletes a server and its stored credentials only when told
// to: y at the terminal's [y/N] question (seeds/002 §1.8's "Delete "X"?
// This will remove the MCP and its stored credentials."), or --yes where
// there is no terminal to ask at. It deleted at once, unasked.
func TestServersRmAsksFirst(t *testing.T) {
	url, deletes := stubConfig(t, model.McpConfig{ID: "id1", Slug: "github", Name: "GitHub"})

	var out, errOut bytes.Buffer
	code := Main([]string{"--nats", url, "servers", "rm", "github"}, strings.NewReader("y\n"), &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "--yes") || deletes.Load() != 0 {
		t.Fatalf("rm without --yes and no terminal: code %d, %d deletes, %q %q", code, deletes.Load(), out.String(), errOut.String())
	}

	// At a terminal: anything but y keeps the server.
	for _, answer := range []string{"\n", "n\n", "yess\n"} {
		master, pts := testkit.OpenPTY(t)
		tty, err := os.OpenFile(pts, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := master.WriteString(answer); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		errOut.Reset()
		code = Main([]string{"--nats", url, "servers", "rm", "github"}, tty, &out, &errOut)
		_ = tty.Close()
		if code == 0 || deletes.Load() != 0 {
			t.Fatalf("rm answered %q: code %d, %d deletes, %q %q", answer, code, deletes.Load(), out.String(), errOut.String())
		}
		if want := `Delete "GitHub"? This will remove the MCP and its stored credentials. [y/N] `; !strings.Contains(errOut.String(), want) {
			t.Fatalf("question: %q, want %q", errOut.String(), want)
		}
	}
	master, pts := testkit.OpenPTY(t)
	tty, err := os.OpenFile(pts, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if _, err := master.WriteString("y\n"); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code = Main([]string{"--nats", url, "servers", "rm", "github"}, tty, &out, &errOut); code != 0 || deletes.Load() != 1 || !strings.Contains(out.String(), "removed github") {
		t.Fatalf("rm answered y: code %d, %d deletes, %q %q", code, deletes.Load(), out.String(), errOut.String())
	}

	// --yes: no question.
	out.Reset()
	errOut.Reset()
	if code = Main([]string{"--nats", url, "servers", "rm", "github", "--yes"}, strings.NewReader(""), &out, &errOut); code != 0 || deletes.Load() != 2 || strings.Contains(errOut.String(), "[y/N]") {
		t.Fatalf("rm --yes: code %d, %d deletes, %q %q", code, deletes.Load(), out.String(), errOut.String())
	}
}

// `servers edit <server>` with only global flags (--json, --nats,
// --timeout) has nothing to change: without a terminal and $EDITOR it is
// refused and nothing is sent. --json counted as an edit flag, so the
// config went back unchanged as a new version.
func TestServersEditGlobalFlagsChangeNothing(t *testing.T) {
	cfg := model.McpConfig{ID: "id1", Slug: "github", Name: "GitHub", Revision: 1,
		Package: model.Package{Type: model.PackageNPM, Identifier: "p"}, Transport: model.Transport{Type: model.TransportStdio}}
	url, _ := stubConfig(t, cfg)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var updates atomic.Int32
	saved, _ := json.Marshal(cfg)
	if _, err := nc.Subscribe("mcp.v1.config.update", func(m *nats.Msg) { updates.Add(1); _ = m.Respond(saved) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDITOR", "true")
	for _, global := range [][]string{{"--json"}, {"--timeout", "5s"}, {}} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats", url, "servers", "edit", "github"}, global...), strings.NewReader(""), &out, &errOut)
		if code != 1 || !strings.Contains(out.String()+errOut.String(), "nothing to change") {
			t.Errorf("edit with %v: exit %d, %q %q", global, code, out.String(), errOut.String())
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := updates.Load(); n != 0 {
		t.Fatalf("%d config updates sent for edits that changed nothing", n)
	}
	// An edit flag, with --json or not, is an edit.
	for _, args := range [][]string{{"--deny-tool", "echo", "--json"}, {"--name", "GH"}} {
		var out, errOut bytes.Buffer
		if code := Main(append([]string{"--nats", url, "servers", "edit", "github"}, args...), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Errorf("edit %v: exit %d, %q %q", args, code, out.String(), errOut.String())
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := updates.Load(); n != 2 {
		t.Fatalf("%d config updates for 2 edits", n)
	}
}
