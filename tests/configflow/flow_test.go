package configflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// callText calls a tool and returns the text of its first content item.
func (e *env) callText(t *testing.T, server, tool, args string) string {
	t.Helper()
	raw, err := e.Client.Call(ctxFor(t, 30*time.Second), server, tool, json.RawMessage(args), nil)
	if err != nil {
		t.Fatalf("call %s.%s: %v", server, tool, err)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("call %s.%s: %s (%v)", server, tool, raw, err)
	}
	if res.IsError {
		t.Fatalf("call %s.%s: tool error %s", server, tool, res.Content[0].Text)
	}
	return res.Content[0].Text
}

// The whole life of a server with secrets — add with a secret, set another,
// update with a third, import a second server whose secret comes as a
// ${VAR}, enable, call, delete — while every log line, bus message (requests,
// replies, KV writes, events) and file is captured: the secret values reach
// the child process and appear nowhere else, not even in the writers' own
// requests (they are sealed to the credential service's key both ways).
func TestSecretsNeverLeak(t *testing.T) {
	e := startStack(t)
	const apiKey = "sk-live-4f9c2a7e1d-SECRET-ONE"
	const extra = "xtra-77b1e0c3-SECRET-TWO"
	const third = "thrd-5a1c9e22-SECRET-THREE"
	const imported = "imp-0c4d7b19-SECRET-FOUR"
	secrets := []string{apiKey, extra, third, imported}
	rec := captureAll(t, e.super)
	ctx := ctxFor(t, 2*time.Minute)

	// 1. add: the secret comes inline as an env value marked secret.
	cfg := binary("Leak Check")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: apiKey, IsSecret: true, Required: true}, "MODE": {Value: "plain"}}
	saved, err := e.Client.CreateConfig(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := saved.EnvVars["API_KEY"]; v.Value != "" || !v.IsSecret {
		t.Fatalf("stored config keeps the secret: %+v", v)
	}
	// 2. set another secret through the credential service.
	creds := credclient.New(e.Conn, "")
	desc, err := creds.Set(ctx, model.CredSetRequest{ServerID: saved.ID, Credentials: model.Credentials{Env: map[string]string{"EXTRA_TOKEN": extra}}})
	if err != nil {
		t.Fatal(err)
	}
	if !desc.Has("API_KEY") || !desc.Has("EXTRA_TOKEN") {
		t.Fatalf("describe after set: %+v", desc)
	}
	// 2b. update with a third secret given apart from the config.
	if saved, err = e.Client.UpdateConfig(ctx, saved, &model.Credentials{Env: map[string]string{"THIRD_TOKEN": third}}); err != nil {
		t.Fatal(err)
	}
	// 2c. import a second server from a Claude Desktop file whose secret is a ${VAR}.
	imp, err := e.Client.ImportConfigs(ctx, model.ConfigImportRequest{
		Content: `{"mcpServers": {"leak-import": {"command": "` + testServer + `", "env": {"IMPORT_TOKEN": "${IMPORT_TOKEN}"}}}}`,
		Vars:    map[string]string{"IMPORT_TOKEN": imported}})
	if err != nil || len(imp.Created) != 1 {
		t.Fatalf("import: %+v %v", imp, err)
	}
	if d, err := creds.Describe(ctx, model.CredDescribeRequest{ServerID: imp.Created[0].ID}); err != nil || !d.Has("IMPORT_TOKEN") {
		t.Fatalf("imported secret: %+v %v", d, err)
	}
	// 3. enable: starts it.
	if saved, err = e.Client.SetEnabled(ctx, saved.Slug, true); err != nil || !saved.Enabled {
		t.Fatalf("enable: %+v %v", saved, err)
	}
	e.waitState(t, saved.Slug, model.StateRunning, 20*time.Second)
	// 4. call: the child has both secrets (checked by hash, so no reply carries them).
	if got := e.callText(t, saved.Slug, "env_sha256", `{"name":"API_KEY"}`); got != sha(apiKey) {
		t.Fatalf("API_KEY in the child has hash %s", got)
	}
	if got := e.callText(t, saved.Slug, "env_sha256", `{"name":"EXTRA_TOKEN"}`); got != sha(extra) {
		t.Fatalf("EXTRA_TOKEN in the child has hash %s", got)
	}
	if got := e.callText(t, saved.Slug, "env_sha256", `{"name":"THIRD_TOKEN"}`); got != sha(third) {
		t.Fatalf("THIRD_TOKEN in the child has hash %s", got)
	}
	if got := e.callText(t, saved.Slug, "env", `{"name":"MODE"}`); got != "plain" {
		t.Fatalf("MODE = %q", got)
	}
	credFile := filepath.Join(e.dataDir, "secrets", "server", saved.ID+".cred")
	if _, err := os.Stat(credFile); err != nil {
		t.Fatalf("no credential file: %v", err)
	}
	// 5. delete: stops it, deletes its secrets.
	if _, err := e.Client.DeleteConfig(ctx, saved.Slug); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(credFile); !os.IsNotExist(err) {
		t.Fatalf("credential file still there after delete: %v", err)
	}
	if d, err := creds.Describe(ctx, model.CredDescribeRequest{ServerID: saved.ID}); err != nil || len(d.Env) != 0 {
		t.Fatalf("secrets after delete: %+v %v", d, err)
	}
	// The runner forgets the server when it sees the delete (asynchronously).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := e.Client.Runtime(ctx, "status", saved.Slug)
		if apierr.Of(err) == apierr.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after delete: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Every captured message, in both directions: no secret at all. The
	// writers' requests carry them sealed.
	subj := bus.NewSubjects("")
	msgs := rec.all()
	if len(msgs) < 20 {
		t.Fatalf("captured only %d messages: the capture is not working", len(msgs))
	}
	sealedOn := map[string]int{}
	for _, m := range msgs {
		for _, s := range secrets {
			if testkit.MsgContains(m, s) {
				t.Errorf("secret found in a message on %s: %.300s", m.Subject, m.Data)
			}
		}
		var body struct {
			Sealed        []byte `json:"sealed"`
			SealedSecrets []byte `json:"sealed_secrets"`
			Entries       []struct {
				SealedSecrets []byte `json:"sealed_secrets"`
			} `json:"entries"`
			Secrets json.RawMessage `json:"secrets"`
			Vars    json.RawMessage `json:"vars"`
		}
		if json.Unmarshal(m.Data, &body) != nil {
			continue
		}
		if len(body.Secrets) > 0 || len(body.Vars) > 0 {
			t.Errorf("clear secrets field on %s: %.300s", m.Subject, m.Data)
		}
		if len(body.Sealed) > 0 || len(body.SealedSecrets) > 0 || (len(body.Entries) > 0 && len(body.Entries[0].SealedSecrets) > 0) {
			sealedOn[m.Subject]++
		}
	}
	// The capture saw the sealed traffic: create, update and import; each
	// forwarded to cred.set twice (check, write), plus the user's own set;
	// the runner's resolve replies (in its inbox) sealed the other way.
	for subject, want := range map[string]int{subj.Service("config", "create"): 1, subj.Service("config", "update"): 1,
		subj.Service("config", "import"): 1, subj.Service("cred", "set"): 7} {
		if sealedOn[subject] != want {
			t.Errorf("%d sealed messages on %s, want %d: the capture misses traffic (%v)", sealedOn[subject], subject, want, sealedOn)
		}
	}
	// The event stream and the KV buckets, read back.
	js, err := jetstream.New(e.super) // the superuser: KV history
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := stream.Info(ctx)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		for _, s := range secrets {
			if strings.Contains(string(m.Data), s) {
				t.Errorf("secret in event %s", m.Subject)
			}
		}
	}
	kv, err := js.KeyValue(ctx, bus.BucketConfigs)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := kv.History(ctx, saved.ID)
	if err != nil || len(hist) < 2 {
		t.Fatalf("config history: %d entries, %v", len(hist), err)
	}
	for _, h := range hist {
		for _, s := range secrets {
			if strings.Contains(string(h.Value()), s) {
				t.Errorf("secret in config revision %d", h.Revision())
			}
		}
	}
	// Every log line, at debug level.
	logs := e.logs.String()
	if !strings.Contains(logs, saved.ID) {
		t.Fatal("the captured log does not mention the server: the capture is not working")
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("secret in the service log")
		}
	}
	// Every file under the data dir (JetStream store, secrets, pid files).
	_ = filepath.Walk(e.dataDir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, s := range secrets {
			if strings.Contains(string(data), s) {
				t.Errorf("secret in clear text in %s", path)
			}
		}
		return nil
	})
}

// The toggle flow with a real runner: a server that cannot start
// is enabled, fails, and is disabled again with the start's error; one that
// can start is running when enable returns.
func TestToggleRevertsWhenStartFails(t *testing.T) {
	e := startStack(t)
	ctx := ctxFor(t, time.Minute)
	bad := binary("Broken")
	bad.Package.Identifier = "/nonexistent/mcpbus-no-such-server"
	saved, err := e.Client.CreateConfig(ctx, bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Client.SetEnabled(ctx, saved.Slug, true)
	if apierr.Of(err) != apierr.NotFound || !strings.Contains(err.Error(), "Package not found") {
		t.Fatalf("enable of a missing binary: %v", err)
	}
	got, err := e.Client.GetConfig(ctx, saved.Slug)
	if err != nil || got.Enabled {
		t.Fatalf("enabled not reverted: %+v %v", got.Enabled, err)
	}
	good, err := e.Client.CreateConfig(ctx, binary("Good"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if good, err = e.Client.SetEnabled(ctx, good.Slug, true); err != nil || !good.Enabled {
		t.Fatalf("enable: %v", err)
	}
	if st, _ := e.Client.Runtime(ctx, "status", good.Slug); st.State != model.StateRunning {
		t.Fatalf("after enable: %+v", st)
	}
	// Disable stops it.
	if _, err := e.Client.SetEnabled(ctx, good.Slug, false); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, good.Slug, model.StateDisabled, 10*time.Second)
}

// The four negative cases against the real services.
func TestNegativeCases(t *testing.T) {
	e := startStack(t)
	ctx := ctxFor(t, time.Minute)
	// Start a disabled MCP → CONFLICT, status unchanged.
	off, err := e.Client.CreateConfig(ctx, binary("Off"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, off.Slug, model.StateDisabled, 5*time.Second)
	if _, err := e.Client.Runtime(ctx, "start", off.Slug); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("MC-NT1: %v", err)
	}
	e.waitState(t, off.Slug, model.StateDisabled, time.Second)
	// call_tool with an unknown server → NOT_FOUND, nothing executed.
	if _, err := e.Client.Call(ctx, "nosuchserver", "echo", json.RawMessage(`{}`), nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("MC-NT2: %v", err)
	}
	// Create with a missing name → VALIDATION_ERROR, nothing saved.
	noName := binary("   ")
	_, err = e.Client.CreateConfig(ctx, noName, nil)
	if e := apierr.From(err); e.Code != apierr.Validation || e.Message != "Name is required" || e.Field != "name" {
		t.Fatalf("MC-NT3: %v", err)
	}
	// A registry-required secret not provided → VALIDATION_ERROR, save blocked.
	needs := binary("Needs Key")
	needs.Source = model.Source{Type: model.SourceOfficial, Name: "io.example/needs-key", Version: "1.0.0"}
	needs.EnvVars = map[string]model.EnvVar{"EXAMPLE_API_KEY": {IsSecret: true, Required: true, SecretRef: "EXAMPLE_API_KEY"}}
	_, err = e.Client.CreateConfig(ctx, needs, nil)
	if e := apierr.From(err); e.Code != apierr.Validation || e.Message != "Missing required credentials" || e.Field != "env_vars.EXAMPLE_API_KEY" {
		t.Fatalf("MC-NT4: %v", err)
	}
	list, err := e.Client.ListConfigs(ctx)
	if err != nil || len(list) != 1 || list[0].Slug != off.Slug {
		t.Fatalf("after the refused creates the list is %+v (%v)", list, err)
	}
	_ = filepath.WalkDir(filepath.Join(e.dataDir, "secrets"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".cred") {
			t.Fatalf("a refused create stored a secret: %s", path)
		}
		return nil
	})
	// With the secret given, the same create succeeds and the server starts with it.
	saved, err := e.Client.CreateConfig(ctx, needs, &model.Credentials{Env: map[string]string{"EXAMPLE_API_KEY": "given-later-123"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.SetEnabled(ctx, saved.Slug, true); err != nil {
		t.Fatal(err)
	}
	if got := e.callText(t, saved.Slug, "env_sha256", `{"name":"EXAMPLE_API_KEY"}`); got != sha("given-later-123") {
		t.Fatalf("MC-T7: the secret did not reach the child")
	}
}

// A Claude Desktop file as people write it, imported and used: the server
// runs, its secret went to the credential store, the export shows ${VAR}.
func TestImportClaudeDesktopFile(t *testing.T) {
	e := startStack(t)
	ctx := ctxFor(t, time.Minute)
	file := `{
  "mcpServers": {
    "test-tools": {
      "command": "` + testServer + `",
      "args": [],
      "env": {"GREETING": "hello", "SERVICE_API_KEY": "${SERVICE_API_KEY}"}
    }
  }
}`
	res, err := e.Client.ImportConfigs(ctx, model.ConfigImportRequest{Content: file, Vars: map[string]string{"SERVICE_API_KEY": "imported-secret-42"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 1 || !res.Created[0].Enabled || res.Created[0].Slug != "test-tools" {
		t.Fatalf("import: %+v", res)
	}
	slug := res.Created[0].Slug
	// import does not wait for a runner (enable does): a server never seen is
	// started once to learn its tools.
	e.waitState(t, slug, model.StateRunning, 20*time.Second)
	if got := e.callText(t, slug, "env_sha256", `{"name":"SERVICE_API_KEY"}`); got != sha("imported-secret-42") {
		t.Fatal("the imported secret did not reach the child")
	}
	if got := e.callText(t, slug, "env", `{"name":"GREETING"}`); got != "hello" {
		t.Fatalf("GREETING = %q", got)
	}
	out, err := e.Client.ExportConfigs(ctx, model.ConfigExportRequest{Format: model.FormatMCPServers})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.Content, "imported-secret-42") || !strings.Contains(out.Content, "${SERVICE_API_KEY}") || !strings.Contains(out.Content, `"hello"`) {
		t.Fatalf("export:\n%s", out.Content)
	}
	// A malformed file is refused with its line, and nothing changes.
	_, err = e.Client.ImportConfigs(ctx, model.ConfigImportRequest{Content: "{\n  \"mcpServers\": {\n    \"x\": {\"command\": a}\n  }\n}"})
	if ae := apierr.From(err); ae.Code != apierr.Validation || !strings.Contains(ae.Message, "line 3") {
		t.Fatalf("malformed import: %v", err)
	}
	if list, _ := e.Client.ListConfigs(ctx); len(list) != 1 {
		t.Fatalf("a failed import changed the list: %d configs", len(list))
	}
}

// A tool filter set through the config service is enforced by the runner.
func TestToolFilterThroughConfig(t *testing.T) {
	e := startStack(t)
	ctx := ctxFor(t, time.Minute)
	cfg := binary("Filtered")
	cfg.Enabled = true
	cfg.Runtime.Eager = true
	cfg.Tools = model.ToolFilter{Deny: []string{"crash", "env*"}}
	saved, err := e.Client.CreateConfig(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, saved.Slug, model.StateRunning, 20*time.Second)
	tools, err := e.Client.ListTools(ctx, saved.Slug)
	if err != nil || len(tools) == 0 {
		t.Fatalf("tools: %v", err)
	}
	for _, tl := range tools {
		if tl.Tool == "crash" || strings.HasPrefix(tl.Tool, "env") {
			t.Fatalf("filtered tool %s listed", tl.Tool)
		}
	}
	if _, err := e.Client.Call(ctx, saved.Slug, "crash", nil, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("call of a denied tool: %v", err)
	}
	if st := e.waitState(t, saved.Slug, model.StateRunning, time.Second); st.Restarts != 0 {
		t.Fatal("the denied crash tool ran")
	}
}

// TestEnableCrashingServerNoStorm: enabling a server that crashes during its
// handshake spawns it a few times at most (never a storm of starts), and the
// enable answers with the crash within the caller's time, reverted.
func TestEnableCrashingServerNoStorm(t *testing.T) {
	e := startStack(t)
	ctx := ctxFor(t, time.Minute)
	starts := filepath.Join(t.TempDir(), "starts")
	cfg := binary("Crashy")
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_FAIL_START": {Value: "boom"}, "TESTMCP_START_LOG": {Value: starts}}
	saved, err := e.Client.CreateConfig(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	enableCtx, cancel := context.WithTimeout(ctx, 35*time.Second)
	defer cancel()
	began := time.Now()
	_, err = e.Client.SetEnabled(enableCtx, saved.Slug, true)
	took := time.Since(began)
	if err == nil {
		t.Fatal("a server that crashes at start was enabled")
	}
	if code := apierr.Of(err); code != apierr.ServiceUnavailable && code != apierr.Network {
		t.Fatalf("enable error %v: want the crash as SERVICE_UNAVAILABLE or NETWORK_ERROR", err)
	}
	if took > 30*time.Second {
		t.Fatalf("enable answered after %s, past the caller's 35 s less a margin", took)
	}
	if got, err := e.Client.GetConfig(ctx, saved.Slug); err != nil || got.Enabled {
		t.Fatalf("enabled not reverted: %+v %v", got.Enabled, err)
	}
	// The backoff would restart it after 1, 2 and 4 s: wait past that.
	time.Sleep(8 * time.Second)
	data, _ := os.ReadFile(starts)
	if n := strings.Count(string(data), "\n"); n < 1 || n > 3 {
		t.Fatalf("the crashing server was spawned %d times (want 1 to 3)", n)
	}
	t.Logf("enable answered in %s: %v", took.Round(time.Millisecond), err)
}
