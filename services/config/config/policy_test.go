package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// fakeRunner answers $SRV.INFO.mcpbus-runner with a runner's metadata, as
// services/runner publishes it (without md[exec_types]: a runner that
// publishes no policy).
func (e *env) fakeRunner(md map[string]string) {
	e.t.Helper()
	nc, err := e.srv.Connect()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: "mcpbus-runner", Version: "0.1.0", Metadata: md})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = svc.Stop() })
	// The discovery request comes on another connection: the server must
	// have this one's subscriptions first.
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

func binary(name, path string) model.McpConfig {
	return model.McpConfig{Name: name, Package: model.Package{Type: model.PackageBinary, Identifier: path},
		Transport: model.Transport{Type: model.TransportStdio}}
}

// The only runner refuses the package type: create is refused, nothing saved.
func TestRunnerPolicyRefusesType(t *testing.T) {
	e := newEnv(t)
	e.fakeRunner(map[string]string{"runner": "r1", model.MetaExecTypes: "npm,docker,http", model.MetaExecBinaryPrefixes: ""})
	err := e.call("create", model.ConfigCreateRequest{Config: binary("Local", "/usr/local/bin/mcp-local")}, nil)
	wantErr(t, err, apierr.Validation, "package.type", "package type binary is not allowed on runner r1 (--exec-types npm,docker,http)")
	nothingSaved(t, e)
	if evs := e.events(); len(evs) != 0 {
		t.Fatalf("events published: %v", eventTypes(evs))
	}
	// Enabled or not, the same.
	cfg := binary("Local", "/usr/local/bin/mcp-local")
	cfg.Enabled = true
	err = e.call("create", model.ConfigCreateRequest{Config: cfg}, nil)
	wantErr(t, err, apierr.Validation, "package.type", "")
	nothingSaved(t, e)

	// What it runs is accepted.
	e.mustCreate(stdio("Everything"), nil)
	remote := model.McpConfig{Name: "Remote", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://example.com/mcp"}}
	e.mustCreate(remote, nil)

	// An update to a refused package changes nothing.
	before, _ := e.get("everything")
	changed := before
	changed.Package = model.Package{Type: model.PackageBinary, Identifier: "/opt/mcp/x"}
	err = e.call("update", model.ConfigUpdateRequest{Config: changed}, nil)
	wantErr(t, err, apierr.Validation, "package.type", "")
	if after, _ := e.get("everything"); after.Revision != before.Revision || after.Package.Type != model.PackageNPM {
		t.Fatalf("refused update changed the config: %+v", after)
	}

	// An import with one refused entry writes nothing.
	file := `{"servers": [
	  {"name": "Alpha", "package": {"type": "npm", "identifier": "alpha-mcp"}, "transport": {"type": "stdio"}},
	  {"name": "Beta", "package": {"type": "binary", "identifier": "/opt/beta"}, "transport": {"type": "stdio"}}
	]}`
	err = e.call("import", model.ConfigImportRequest{Content: file}, nil)
	wantErr(t, err, apierr.Validation, "servers[1].package.type", "")
	if got := slugsOf(e.list()); !slices.Equal(got, []string{"everything", "remote"}) {
		t.Fatalf("list after refused import: %v", got)
	}
}

func TestRunnerPolicyRefusesBinaryPath(t *testing.T) {
	e := newEnv(t)
	e.fakeRunner(map[string]string{"runner": "r1", model.MetaExecTypes: "npm,docker,binary,http", model.MetaExecBinaryPrefixes: "/opt/mcp,/usr/local/libexec/mcp"})
	for _, path := range []string{"/usr/bin/sh", "/opt/mcpx/tool", "/opt/mcp/../../bin/sh"} {
		err := e.call("create", model.ConfigCreateRequest{Config: binary("Local", path)}, nil)
		e2 := wantErr(t, err, apierr.Validation, "package.identifier", "")
		if !strings.Contains(e2.Message, "is not under an allowed path on runner r1 (--exec-binary-prefixes /opt/mcp,/usr/local/libexec/mcp)") {
			t.Fatalf("%s: message %q", path, e2.Message)
		}
		nothingSaved(t, e)
	}
	e.mustCreate(binary("In Opt", "/opt/mcp/bin/tool"), nil)
	e.mustCreate(binary("Libexec", "/usr/local/libexec/mcp/tool"), nil)
	// A bare name is resolved on the runner's PATH: only the runner can tell.
	e.mustCreate(binary("On Path", "mcp-tool"), nil)
}

// One runner that accepts the config is enough; when all refuse, the error
// names each.
func TestRunnerPolicyAnyRunnerAccepts(t *testing.T) {
	e := newEnv(t)
	e.fakeRunner(map[string]string{"runner": "r1", model.MetaExecTypes: "npm,docker,http"})
	e.fakeRunner(map[string]string{"runner": "r2", model.MetaExecTypes: "npm,binary", model.MetaExecBinaryPrefixes: "/opt/mcp"})
	e.mustCreate(binary("In Opt", "/opt/mcp/tool"), nil)
	err := e.call("create", model.ConfigCreateRequest{Config: binary("Elsewhere", "/usr/bin/tool")}, nil)
	got := wantErr(t, err, apierr.Validation, "package.type", "")
	for _, want := range []string{"no runner would launch it", "not allowed on runner r1", "not under an allowed path on runner r2"} {
		if !strings.Contains(got.Message, want) {
			t.Fatalf("message %q should contain %q", got.Message, want)
		}
	}
}

// A runner that publishes no policy launches everything.
func TestRunnerPolicyUnpublished(t *testing.T) {
	e := newEnv(t)
	e.fakeRunner(map[string]string{"runner": "old"})
	e.mustCreate(binary("Local", "/usr/bin/tool"), nil)
}

// With no runner answering, the policy is unknown: accepted, without waiting.
func TestRunnerPolicyNoRunner(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	e.mustCreate(binary("Local", "/usr/bin/tool"), nil)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("create took %s", d)
	}
}
