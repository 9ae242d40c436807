package runner_test

import (
	"net"
	"net/netip"
	neturl "net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard/netguardtest"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestRegistryRemoteResolvingInside: a remote server installed from a
// registry whose URL names a public-looking host that resolves to
// loopback (as a registry entry's DNS may point at cloud metadata or the
// NATS port) is refused on the address the runner dials, and its start
// fails saying which address and what kind; the same server added by
// hand (source manual) connects, a private MCP server being a normal case.
func TestRegistryRemoteResolvingInside(t *testing.T) {
	// go-sdk refuses a Host that is not localhost on a loopback listener
	// (its DNS rebinding protection): off, so that the by-hand server shows
	// the name reaches it.
	target, err := neturl.Parse(testmcp.ServeHTTP(t, "web", &mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}, nil))
	if err != nil {
		t.Fatal(err)
	}
	const host = "mcp.example.test"
	url := "http://" + net.JoinHostPort(host, target.Port()) + target.Path
	opts := lifecycleOpts()
	opts.Launch.Resolver = netguardtest.Resolver(map[string][]netip.Addr{host: {netip.MustParseAddr("127.0.0.1")}})
	e := runnertest.Start(t, opts)

	remote := func(name string, src model.Source) model.McpConfig {
		return model.McpConfig{ID: uuid.NewString(), Name: name, Enabled: true, Source: src,
			Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
			Transport: model.Transport{Type: model.TransportHTTP, URL: url},
			Runtime:   model.Runtime{Eager: true}}
	}
	e.Put(t, remote("from-registry", model.Source{Type: model.SourceOfficial, Name: "io.github.example/web", Version: "1.0.0"}))
	e.Put(t, remote("from-smithery", model.Source{Type: model.SourceSmithery, QualifiedName: "example/web"}))
	e.Put(t, remote("by-hand", model.Source{Type: model.SourceManual}))

	for _, name := range []string{"from-registry", "from-smithery"} {
		st := e.WaitState(t, name, model.StateError, 10*time.Second)
		want := "transport.url reaches an internal address, 127.0.0.1:" + target.Port() + " (loopback): " + model.MsgRegistryRemoteInternal
		if st.Code != string(apierr.Validation) || st.Message != want {
			t.Fatalf("%s: %s %q, want %s %q", name, st.Code, st.Message, apierr.Validation, want)
		}
	}
	if st := e.WaitState(t, "by-hand", model.StateRunning, 10*time.Second); st.State != model.StateRunning {
		t.Fatalf("by-hand: %+v", st)
	}
}
