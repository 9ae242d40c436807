package configflow

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

func countLines(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func wantAPIError(t *testing.T, err error, code apierr.Code, field, contains string) {
	t.Helper()
	e := apierr.From(err)
	if err == nil || e.Code != code || e.Field != field || !strings.Contains(e.Message, contains) {
		t.Fatalf("got %v (code %s, field %q); want %s on %q containing %q", err, e.Code, e.Field, code, field, contains)
	}
}

// A deployment's runner (npm,docker,http): the config service refuses a
// binary config when it is saved, because the only runner would refuse it.
func TestExecPolicyRefusesTypeAtSave(t *testing.T) {
	e := startStack(t, func(o *stack.Options) {
		o.Runner.ID = "r1"
		o.Runner.ExecTypes = []string{model.PackageNPM, model.PackageDocker, model.PackageHTTP}
	})
	ctx := ctxFor(t, time.Minute)
	starts := filepath.Join(t.TempDir(), "starts")
	cfg := binary("Local Tool")
	cfg.Enabled = true
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_START_LOG": {Value: starts}}
	_, err := e.Client.CreateConfig(ctx, cfg, nil)
	wantAPIError(t, err, apierr.Validation, "package.type", "package type binary is not allowed on runner r1 (--exec-types npm,docker,http)")
	if all, err := e.Client.ListConfigs(ctx); err != nil || len(all) != 0 {
		t.Fatalf("configs after a refused create: %+v %v", all, err)
	}
	if n := countLines(t, starts); n != 0 {
		t.Fatalf("spawned %d times", n)
	}
}

// Binary prefixes: a path outside them is refused at save; a symlink under a
// prefix that leads out passes the config service (it cannot resolve paths on
// the runner's host) but the runner refuses it, so enable fails, is reverted
// and nothing is spawned; a binary under the prefix runs.
func TestExecPolicyBinaryPrefixes(t *testing.T) {
	allowed := t.TempDir()
	e := startStack(t, func(o *stack.Options) {
		o.Runner.ID = "r1"
		o.Runner.ExecBinaryPrefixes = []string{allowed}
	})
	ctx := ctxFor(t, 2*time.Minute)

	outside := binary("Outside")
	_, err := e.Client.CreateConfig(ctx, outside, nil)
	wantAPIError(t, err, apierr.Validation, "package.identifier", "is not under an allowed path on runner r1 (--exec-binary-prefixes "+allowed+")")

	link := filepath.Join(allowed, "link")
	if err := os.Symlink(testServer, link); err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(t.TempDir(), "starts")
	linked := binary("Linked")
	linked.Package.Identifier = link
	linked.EnvVars = map[string]model.EnvVar{"TESTMCP_START_LOG": {Value: starts}}
	saved, err := e.Client.CreateConfig(ctx, linked, nil)
	if err != nil {
		t.Fatalf("the config service cannot tell a symlink: %v", err)
	}
	_, err = e.Client.SetEnabled(ctx, saved.Slug, true)
	wantAPIError(t, err, apierr.Validation, "package.identifier", "resolves to "+testServer)
	if got, err := e.Client.GetConfig(ctx, saved.Slug); err != nil || got.Enabled {
		t.Fatalf("enable not reverted: %+v %v", got.Enabled, err)
	}
	if n := countLines(t, starts); n != 0 {
		t.Fatalf("a refused binary was spawned %d times", n)
	}

	inside := filepath.Join(allowed, "mcpbus-testserver")
	copyExecutable(t, testServer, inside)
	ok := binary("Inside")
	ok.Package.Identifier = inside
	ok.Enabled = true
	if _, err := e.Client.CreateConfig(ctx, ok, nil); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, "inside", model.StateRunning, 30*time.Second)
	if got := e.callText(t, "inside", "echo", `{"message":"allowed"}`); !strings.Contains(got, "allowed") {
		t.Fatalf("echo: %q", got)
	}
}

// A stored config the policy refuses (written before the runner came, or
// while no runner answered) ends in error on the runner, unspawned.
func TestExecPolicyRunnerRefusesStoredConfig(t *testing.T) {
	e := startStack(t, func(o *stack.Options) {
		o.Runner.ID = "r1"
		o.Runner.ExecTypes = []string{model.PackageHTTP}
	})
	ctx := ctxFor(t, time.Minute)
	starts := filepath.Join(t.TempDir(), "starts")
	cfg := binary("Stored")
	cfg.Enabled = true
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_START_LOG": {Value: starts}}
	js, err := jetstream.New(e.super)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketConfigs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (configstore.Store{KV: kv}).Upsert(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st := e.waitState(t, "stored", model.StateError, 20*time.Second)
	if st.Code != string(apierr.Validation) || st.Message != "package type binary is not allowed on runner r1 (--exec-types http)" {
		t.Fatalf("status %+v", st)
	}
	_, err = e.Client.Runtime(ctx, "start", "stored")
	wantAPIError(t, err, apierr.Validation, "package.type", "--exec-types http")
	time.Sleep(500 * time.Millisecond)
	if n := countLines(t, starts); n != 0 {
		t.Fatalf("a refused server was spawned %d times", n)
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
