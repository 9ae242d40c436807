package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// testServer is the path of the go-sdk test server, built once in TestMain.
var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

func quickOpts() runner.Options {
	return runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

func text(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var r callResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result is not a CallToolResult: %v: %s", err, raw)
	}
	if len(r.Content) == 0 {
		t.Fatalf("result has no content: %s", raw)
	}
	return r.Content[0].Text
}

func call(t *testing.T, e *runnertest.Env, server, tool, args string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.Client.Call(ctx, server, tool, json.RawMessage(args), nil)
}

func wantCode(t *testing.T, err error, code apierr.Code) *apierr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *apierr.Error %s, got %T %v", code, err, err)
	}
	if e.Code != code {
		t.Fatalf("want code %s, got %s: %s", code, e.Code, e.Message)
	}
	return e
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start spawns the process (in its own process group).
func TestStartSpawnsProcess(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if !alive(st.PID) {
		t.Fatalf("status says pid %d but no such process", st.PID)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
	if err != nil || !strings.Contains(string(cmdline), "mcpbus-testserver") {
		t.Fatalf("pid %d runs %q, want the test server", st.PID, cmdline)
	}
	pgid, err := syscall.Getpgid(st.PID)
	if err != nil || pgid != st.PID {
		t.Fatalf("child pgid %d, want its own group %d", pgid, st.PID)
	}
	if st.Runner != e.Runner.ID() || st.StartedAt.IsZero() {
		t.Fatalf("status lacks runner or start time: %+v", st)
	}
}

// Stop terminates the process, and the status follows.
func TestStopTerminatesProcess(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	got, err := e.Client.Runtime(context.Background(), "stop", "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != model.StateStopped {
		t.Fatalf("stop replied state %s", got.State)
	}
	waitGone(t, st.PID, 3*time.Second)
	e.WaitState(t, "alpha", model.StateStopped, time.Second)
	_, err = call(t, e, "alpha", "echo", `{"message":"x"}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	tools, err := e.Client.ListTools(context.Background(), "alpha")
	if err != nil || len(tools) != 0 {
		t.Fatalf("a stopped server must have no tools listed, got %d (%v)", len(tools), err)
	}
	// And start brings it back.
	if got, err = e.Client.Runtime(context.Background(), "start", "alpha"); err != nil || got.State != model.StateRunning {
		t.Fatalf("start: %+v %v", got, err)
	}
	res, err := call(t, e, "alpha", "echo", `{"message":"back"}`)
	if err != nil || text(t, res) != "back" {
		t.Fatalf("call after restart: %s %v", res, err)
	}
}

// The tool list is populated after start, with namespaced names and subjects.
func TestToolsAfterStart(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	tools, err := e.Client.ListTools(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]model.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	echo, ok := byName["alpha__echo"]
	if !ok {
		t.Fatalf("alpha__echo missing from %v", tools)
	}
	if echo.Subject != "mcp.v1.call.alpha.echo" || echo.Server != "alpha" || echo.Tool != "echo" || len(echo.InputSchema) == 0 {
		t.Fatalf("catalog entry incomplete: %+v", echo)
	}
	for _, want := range []string{"sleep", "crash", "env", "large", "progress"} {
		if _, ok := byName["alpha__"+want]; !ok {
			t.Errorf("tool %s missing", want)
		}
	}
	st := e.Status("alpha")
	if len(st.Tools) != len(tools) {
		t.Fatalf("status lists %d tools, catalog %d", len(st.Tools), len(tools))
	}
}

// A call returns the tool's result; a tool error comes back as isError.
func TestCallReturnsResult(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	res, err := call(t, e, "alpha", "echo", `{"message":"hello bus"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "hello bus" {
		t.Fatalf("echo returned %q", got)
	}
	res, err = call(t, e, "alpha", "fail", `{"message":"boom"}`)
	if err != nil {
		t.Fatal(err)
	}
	var r callResult
	_ = json.Unmarshal(res, &r)
	if !r.IsError || !strings.Contains(r.Content[0].Text, "boom") {
		t.Fatalf("tool error not carried as isError: %s", res)
	}
	// No arguments at all is an empty object.
	if _, err := call(t, e, "alpha", "echo", ``); err != nil {
		t.Fatalf("empty arguments: %v", err)
	}
	// Large output crosses the bus whole.
	res, err = call(t, e, "alpha", "large", `{"bytes":1000000}`)
	if err != nil || len(text(t, res)) != 1000000 {
		t.Fatalf("large result: %v", err)
	}
}

// A failing server (missing binary, hanging handshake) does not block others.
func TestFailedServerDoesNotBlockOthers(t *testing.T) {
	opts := quickOpts()
	e := runnertest.Start(t, opts)
	hang := runnertest.Binary("hang", testServer, "-hang")
	hang.Runtime.StartTimeout = model.Duration(3 * time.Second)
	e.Put(t, hang)
	e.Put(t, runnertest.Binary("broken", "/nonexistent/mcp-server"))
	start := time.Now()
	e.Put(t, runnertest.Binary("good", testServer))
	e.WaitState(t, "good", model.StateRunning, 10*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("good server waited %s behind the failing ones", d)
	}
	res, err := call(t, e, "good", "echo", `{"message":"ok"}`)
	if err != nil || text(t, res) != "ok" {
		t.Fatalf("good server call: %v", err)
	}
	st := e.WaitState(t, "broken", model.StateError, 5*time.Second)
	if st.Code != string(apierr.NotFound) || st.Message != "Package not found" {
		t.Fatalf("missing binary: %+v", st)
	}
	st = e.WaitState(t, "hang", model.StateError, 10*time.Second)
	if st.Code != string(apierr.Network) || st.Message != "Handshake timed out" {
		t.Fatalf("hanging handshake: %+v", st)
	}
	tools, _ := e.Client.ListTools(context.Background(), "")
	for _, tool := range tools {
		if tool.Server != "good" {
			t.Fatalf("tool list includes failed server's tool %s", tool.Name)
		}
	}
}

// Env vars of the config are set; the runner's own environment is not passed on.
func TestEnvironmentVariables(t *testing.T) {
	t.Setenv("MCPBUS_TEST_RUNNER_SECRET", "must-not-leak")
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{
		"API_KEY": {Value: "k-123", IsSecret: true},
		"EMPTY":   {},
	}
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for name, want := range map[string]string{"API_KEY": "k-123", "EMPTY": ""} {
		res, err := call(t, e, "alpha", "env", fmt.Sprintf(`{"name":%q}`, name))
		if err != nil || text(t, res) != want {
			t.Fatalf("%s = %s (%v), want %s", name, res, err, want)
		}
	}
	res, err := call(t, e, "alpha", "env", `{"name":"MCPBUS_TEST_RUNNER_SECRET"}`)
	if err != nil {
		t.Fatal(err)
	}
	var r callResult
	_ = json.Unmarshal(res, &r)
	if !r.IsError {
		t.Fatalf("the runner's own environment leaked into the child: %s", res)
	}
	if res, err := call(t, e, "alpha", "env", `{"name":"PATH"}`); err != nil || text(t, res) == "" {
		t.Fatalf("PATH should be inherited: %s %v", res, err)
	}
}

// A required secret reference that nothing resolves fails the start clearly.
func TestMissingRequiredCredentials(t *testing.T) {
	opts := quickOpts()
	opts.Resolver = staticResolver{}
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", Required: true, IsSecret: true}}
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateError, 5*time.Second)
	if st.Code != string(apierr.Validation) || st.Message != "Missing required credentials" {
		t.Fatalf("status %+v", st)
	}
}

// A server that needs credentials on a runner without a credential service
// fails with SERVICE_UNAVAILABLE, not with an empty variable.
func TestCredentialsWithoutResolver(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true}}
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateError, 5*time.Second)
	if st.Code != string(apierr.ServiceUnavailable) || !strings.Contains(st.Message, "credential service") {
		t.Fatalf("status %+v", st)
	}
}

// staticResolver hands out fixed credentials per server id (the credential
// service's own tests and tests/ cover the real one).
type staticResolver map[string]model.ResolvedCredentials

func (s staticResolver) Resolve(_ context.Context, id string) (model.ResolvedCredentials, error) {
	return s[id], nil
}

// Secret references, extra stored secrets and keyfiles reach the
// child's environment; the values appear in no status.
func TestResolvedCredentialsReachTheChild(t *testing.T) {
	dir := t.TempDir()
	keyfile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyfile, []byte("  keyfile-secret-9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := runnertest.Binary("alpha", testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.SecretScan.Results = model.SecretsOff // it reads its secrets back through the env tool
	cfg.EnvVars = map[string]model.EnvVar{
		"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true},
		"KEY":   {KeyfilePath: keyfile},
		"PLAIN": {Value: "plain-value"},
	}
	opts := quickOpts()
	opts.KeyfilePrefixes = []string{dir}
	opts.Resolver = staticResolver{cfg.ID: {Env: map[string]string{"TOKEN": "resolved-secret-1", "EXTRA": "extra-secret-2"}}}
	e := runnertest.Start(t, opts)
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for name, want := range map[string]string{"TOKEN": "resolved-secret-1", "EXTRA": "extra-secret-2", "KEY": "keyfile-secret-9", "PLAIN": "plain-value"} {
		res, err := call(t, e, "alpha", "env", fmt.Sprintf(`{"name":%q}`, name))
		if err != nil || text(t, res) != want {
			t.Fatalf("%s = %s (%v), want %s", name, res, err, want)
		}
	}
	raw, _ := json.Marshal(st)
	for _, secret := range []string{"resolved-secret-1", "extra-secret-2", "keyfile-secret-9"} {
		if strings.Contains(string(raw), secret) {
			t.Fatalf("status leaks %s: %s", secret, raw)
		}
	}
}

// A world-readable or missing keyfile is a clear status error at spawn.
func TestBadKeyfile(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := quickOpts()
	opts.KeyfilePrefixes = []string{dir}
	e := runnertest.Start(t, opts)
	for name, tc := range map[string]struct{ path, want string }{
		"a": {open, "world-readable"},
		"b": {filepath.Join(dir, "missing"), "cannot be read"},
		"c": {dir, "not a regular file"},
	} {
		cfg := runnertest.Binary(name, testServer)
		cfg.EnvVars = map[string]model.EnvVar{"KEY": {KeyfilePath: tc.path}}
		e.Put(t, cfg)
		st := e.WaitState(t, name, model.StateError, 5*time.Second)
		if st.Code != string(apierr.Validation) || !strings.Contains(st.Message, tc.want) || strings.Contains(st.Message, dir) {
			t.Fatalf("%s: status %+v, want %q without the path", name, st, tc.want)
		}
	}
}

// Keyfiles are read only under --keyfile-prefixes, after resolving
// symlinks, and never from the data dir outside its keyfiles folder (issue
// 27: the operator's nkey seed came back through a server's environment).
func TestKeyfilePolicy(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	write := func(path string) string {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("seed-secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secret := write(filepath.Join(outside, "secret"))
	link := filepath.Join(allowed, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(allowed, "data")
	seed := write(filepath.Join(dataDir, "nats", "operator.nk"))
	good := write(filepath.Join(dataDir, runner.KeyfilesDir, "k"))
	opts := quickOpts()
	opts.KeyfilePrefixes = []string{allowed}
	opts.DataDir = dataDir
	e := runnertest.Start(t, opts)
	for name, tc := range map[string]struct{ path, want string }{
		"outside": {secret, "not under an allowed path"},
		"link":    {link, "resolves to a path that is not under an allowed path"},
		"seed":    {seed, "is in the data dir"},
		"dotdot":  {filepath.Join(allowed, "..", filepath.Base(outside), "secret"), "not under an allowed path"},
	} {
		cfg := runnertest.Binary(name, testServer)
		cfg.EnvVars = map[string]model.EnvVar{"KEY": {KeyfilePath: tc.path}}
		e.Put(t, cfg)
		st := e.WaitState(t, name, model.StateError, 5*time.Second)
		if st.Code != string(apierr.Validation) || st.Field != "env_vars.KEY.keyfile_path" || !strings.Contains(st.Message, tc.want) {
			t.Fatalf("%s: status %+v, want %q", name, st, tc.want)
		}
	}
	cfg := runnertest.Binary("good", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"KEY": {KeyfilePath: good}}
	e.Put(t, cfg)
	e.WaitState(t, "good", model.StateRunning, 10*time.Second)
}

// A tool filter hides tools from the catalog and refuses calls to them; a
// changed filter applies without a restart.
func TestToolFilter(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	cfg.Tools = model.ToolFilter{Allow: []string{"e*", "sleep"}, Deny: []string{"env"}}
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if !slices.Contains(st.Tools, "echo") || slices.Contains(st.Tools, "env") || slices.Contains(st.Tools, "crash") || !slices.Contains(st.Tools, "sleep") {
		t.Fatalf("status tools %v", st.Tools)
	}
	tools, err := e.Client.ListTools(context.Background(), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if !cfg.Tools.Allows(tl.Tool) {
			t.Fatalf("catalog lists filtered tool %s", tl.Tool)
		}
	}
	if _, err := call(t, e, "alpha", "env", `{"name":"PATH"}`); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("filtered tool call: %v", err)
	}
	if res, err := call(t, e, "alpha", "echo", `{"message":"x"}`); err != nil {
		t.Fatalf("allowed tool: %s %v", res, err)
	}
	pid := st.PID
	cfg.Tools = model.ToolFilter{}
	e.Put(t, cfg)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := call(t, e, "alpha", "env", `{"name":"PATH"}`); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("filter removal not applied: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e.Status("alpha").PID != pid {
		t.Fatal("a filter change restarted the server")
	}
}

// Stopping the runner stops every server.
func TestShutdownAllStopsEverything(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	var pids []int
	for _, name := range []string{"a", "b", "c"} {
		e.Put(t, runnertest.Binary(name, testServer))
	}
	for _, name := range []string{"a", "b", "c"} {
		pids = append(pids, e.WaitState(t, name, model.StateRunning, 10*time.Second).PID)
	}
	start := time.Now()
	e.StopRunner(t)
	for _, pid := range pids {
		waitGone(t, pid, 3*time.Second)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	for _, name := range []string{"a", "b", "c"} {
		if st := e.Status(name); st.State != model.StateStopped {
			t.Fatalf("%s: state %s after shutdown", name, st.State)
		}
	}
}

// The stop sequence escalates: a child that ignores stdin closing and SIGTERM is killed.
func TestStopEscalatesToSIGKILL(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "stubborn.sh")
	// Handshakes through the real test server, but the wrapper shell ignores SIGTERM
	// and keeps the group alive after the server exits.
	// (The server's path is an argument, which the sandbox grants.)
	body := "#!/bin/sh\ntrap '' TERM\n\"$1\"\nsleep 300\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := quickOpts()
	opts.StopTimeout = 500 * time.Millisecond
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("stubborn", script, testServer))
	st := e.WaitState(t, "stubborn", model.StateRunning, 10*time.Second)
	start := time.Now()
	if _, err := e.Client.Runtime(context.Background(), "stop", "stubborn"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, st.PID, 3*time.Second)
	if d := time.Since(start); d < opts.StopTimeout {
		t.Fatalf("stubborn group gone after %s: SIGKILL came before the SIGTERM wait", d)
	}
}

// Status tracks a process killed from outside; calls then fail fast.
func TestKilledDuringCall(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, e, "alpha", "sleep", `{"ms":20000}`)
		errc <- err
	}()
	waitRuns(t, runs, 1) // the call is in flight at the server
	killed := time.Now()
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantCode(t, err, apierr.ServiceUnavailable)
		// Far sooner than the call's 20 s (a loaded host delays the reap).
		if d := time.Since(killed); d > 5*time.Second {
			t.Fatalf("in-flight call failed after %s, want < 5s", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("in-flight call hung after the server was killed")
	}
	st = e.WaitState(t, "alpha", model.StateError, 10*time.Second)
	if st.Code != string(apierr.ServiceUnavailable) {
		t.Fatalf("status after kill: %+v", st)
	}
	begin := time.Now()
	_, err := call(t, e, "alpha", "echo", `{"message":"x"}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	if d := time.Since(begin); d > 5*time.Second { // refused, not timed out (20 s)
		t.Fatalf("a call to a crashed server was slow: %s", d)
	}
	// A manual restart recovers it.
	if _, err := e.Client.Runtime(context.Background(), "restart", "alpha"); err != nil {
		t.Fatal(err)
	}
	if res, err := call(t, e, "alpha", "echo", `{"message":"up"}`); err != nil || text(t, res) != "up" {
		t.Fatalf("after restart: %v", err)
	}
}

func TestCrashingToolSetsError(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	_, err := call(t, e, "alpha", "crash", `{}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	e.WaitState(t, "alpha", model.StateError, 2*time.Second)
}

func TestBadInput(t *testing.T) {
	opts := quickOpts()
	opts.MaxArgsBytes = 1024
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	begin := time.Now()
	_, err := call(t, e, "nosuch", "echo", `{}`)
	wantCode(t, err, apierr.NotFound)
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("unknown server took %s to answer", d)
	}
	_, err = call(t, e, "alpha", "nosuch", `{}`)
	wantCode(t, err, apierr.NotFound)
	for _, bad := range []string{`[1,2]`, `"text"`, `42`, `{"message":`, `null`, "\x00"} {
		_, err = call(t, e, "alpha", "echo", bad)
		wantCode(t, err, apierr.Validation)
	}
	_, err = call(t, e, "alpha", "echo", `{"message":"`+strings.Repeat("x", 2000)+`"}`)
	if e := wantCode(t, err, apierr.Validation); !strings.Contains(e.Message, "over the limit") {
		t.Fatalf("oversized: %s", e.Message)
	}
	// Arguments of the wrong type are refused by the MCP server's schema check:
	// go-sdk servers answer with an isError result, others with invalid params.
	res, err := call(t, e, "alpha", "sleep", `{"ms":"soon"}`)
	if err == nil {
		var r callResult
		_ = json.Unmarshal(res, &r)
		if !r.IsError {
			t.Fatalf("wrong argument type accepted: %s", res)
		}
	} else {
		wantCode(t, err, apierr.Validation)
	}
	// The runner survived all of it.
	if res, err := call(t, e, "alpha", "echo", `{"message":"still here"}`); err != nil || text(t, res) != "still here" {
		t.Fatalf("runner hurt by bad input: %v", err)
	}
}

func TestRuntimeRequests(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	disabled := runnertest.Binary("off", testServer)
	disabled.Enabled = false
	e.Put(t, disabled)
	e.WaitState(t, "off", model.StateDisabled, 5*time.Second)
	ctx := context.Background()
	// Start of a disabled server → CONFLICT, status unchanged.
	_, err := e.Client.Runtime(ctx, "start", "off")
	wantCode(t, err, apierr.Conflict)
	if st := e.Status("off"); st.State != model.StateDisabled {
		t.Fatalf("status changed to %s", st.State)
	}
	_, err = e.Client.Runtime(ctx, "start", "nosuch")
	wantCode(t, err, apierr.NotFound)
	_, err = e.Client.Runtime(ctx, "start", "Bad Slug")
	wantCode(t, err, apierr.Validation)
	_, err = e.Client.Runtime(ctx, "start", "")
	wantCode(t, err, apierr.Validation)
	all, err := e.Client.Status(ctx)
	if err != nil || len(all) != 1 || all[0].Server != "off" {
		t.Fatalf("status of all: %+v %v", all, err)
	}
}

func TestEnableDisableDelete(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := e.Put(t, runnertest.Binary("alpha", testServer))
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	cfg.Enabled = false
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateDisabled, 5*time.Second)
	waitGone(t, st.PID, 3*time.Second)
	_, err := call(t, e, "alpha", "echo", `{}`)
	wantCode(t, err, apierr.NotFound) // nobody serves a disabled server's subjects
	cfg.Enabled = true
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.Delete(t, cfg.ID)
	deadline := time.Now().Add(5 * time.Second)
	for e.Status("alpha").State != "" {
		if time.Now().After(deadline) {
			t.Fatal("status of a deleted server remains")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tools, _ := e.Client.ListTools(context.Background(), "alpha"); len(tools) != 0 {
		t.Fatal("catalog of a deleted server remains")
	}
}

// A config change that affects the launch restarts the server with it.
func TestConfigUpdateRestarts(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"MODE": {Value: "one"}}
	cfg = e.Put(t, cfg)
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	cfg.EnvVars = map[string]model.EnvVar{"MODE": {Value: "two"}}
	e.Put(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.Status("alpha")
		if st.State == model.StateRunning && st.PID != first.PID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not restarted with the new config: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := call(t, e, "alpha", "env", `{"name":"MODE"}`); err != nil || text(t, res) != "two" {
		t.Fatalf("MODE after update: %s %v", res, err)
	}
}

func TestCallTimeoutCancelsAtServer(t *testing.T) {
	opts := quickOpts()
	// Long enough that a loaded host has the call at the server before it
	// times out (else there is nothing there to cancel).
	opts.CallTimeout = 1500 * time.Millisecond
	e := runnertest.Start(t, opts)
	marker := filepath.Join(t.TempDir(), "cancelled")
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_CANCEL_FILE": {Value: marker}}
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	begin := time.Now()
	_, err := call(t, e, "alpha", "sleep", `{"ms":10000}`)
	if e := wantCode(t, err, apierr.Network); !strings.Contains(e.Message, "timed out") {
		t.Fatalf("timeout message: %s", e.Message)
	}
	if d := time.Since(begin); d > 8*time.Second { // of a 10 s sleep
		t.Fatalf("timeout took %s", d)
	}
	waitFile(t, marker, 30*time.Second)
	// The connection is still good for the next call.
	if res, err := call(t, e, "alpha", "echo", `{"message":"after"}`); err != nil || text(t, res) != "after" {
		t.Fatalf("call after the timeout: %s %v", res, err)
	}
}

// A caller that gives up cancels the call at the MCP server (notifications/cancelled).
func TestCallerGivingUpCancels(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	marker := filepath.Join(t.TempDir(), "cancelled")
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary("alpha", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_CANCEL_FILE": {Value: marker}, "TESTMCP_RUN_FILE": {Value: runs}}
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel() // once the call is at the server: before, there is nothing to cancel there
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if runCount(runs) > 0 {
				return
			}
		}
	}()
	_, err := e.Client.Call(ctx, "alpha", "sleep", json.RawMessage(`{"ms":20000}`), nil)
	if err == nil {
		t.Fatal("cancelled call succeeded")
	}
	waitFile(t, marker, 30*time.Second)
}

// A call ended because its server left the runner (deleted, handed over,
// a shutdown) says so, with 503, not that its caller cancelled it.
func TestCallEndedByTheServerLeaving(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	runs := filepath.Join(t.TempDir(), "runs")
	bin := runnertest.Binary("alpha", testServer)
	bin.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	cfg := e.Put(t, bin)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := e.Client.Call(context.Background(), "alpha", "sleep", json.RawMessage(`{"ms":20000}`), nil)
		done <- err
	}()
	waitRuns(t, runs, 1) // the call is in flight at the server
	e.Delete(t, cfg.ID)
	select {
	case err := <-done:
		if ae := apierr.From(err); ae.Code != apierr.ServiceUnavailable || strings.Contains(ae.Message, "by the caller") {
			t.Fatalf("a call whose server was deleted: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call outlived its server")
	}
}

func waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server never saw the cancellation (%s missing)", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRuns waits until the test server has started n sleeps (the lines its
// sleep appends to TESTMCP_RUN_FILE, runs): what a test does to a call in
// flight at the server waits for this rather than for a fixed time.
func waitRuns(t *testing.T, runs string, n int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		got := runCount(runs)
		return got >= n, fmt.Sprintf("the server started %d sleeps, want %d", got, n)
	})
}

func TestProgressForwarded(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	var mu sync.Mutex
	var got []model.ProgressEvent
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.Client.Call(ctx, "alpha", "progress", json.RawMessage(`{"steps":3}`), &client.CallOptions{
		RequestID: "req-progress-1",
		OnProgress: func(ev model.ProgressEvent) {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
		},
	})
	if err != nil || text(t, res) != "done 3 steps" {
		t.Fatalf("progress call: %s %v", res, err)
	}
	// Every notification is delivered before Call returns, even when the
	// server sends them back to back with its result.
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("got %d progress events before the result, want 3", len(got))
	}
	if got[2].Progress != 3 || got[2].Total != 3 || got[0].RequestID != "req-progress-1" {
		t.Fatalf("progress events: %+v", got)
	}
}

func TestToolListChangedRefreshesCatalog(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if _, err := call(t, e, "alpha", "add_tool", `{"message":"late.tool"}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		tools, _ := e.Client.ListTools(context.Background(), "alpha")
		for _, tool := range tools {
			if tool.Tool == "late.tool" {
				// A dotted name gets a subject-safe token, and calls reach it by original name.
				if strings.Count(tool.Subject, ".") != 4 {
					t.Fatalf("subject %s is not subject-safe", tool.Subject)
				}
				res, err := call(t, e, "alpha", "late.tool", `{}`)
				if err != nil || text(t, res) != "added tool" {
					t.Fatalf("calling the new tool: %v", err)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("catalog not refreshed after tools/list_changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCallsRunConcurrently(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(t, e, "alpha", "sleep", `{"ms":400}`)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(begin); d > 1500*time.Millisecond {
		t.Fatalf("8 calls of 400ms took %s: they ran serially", d)
	}
}

func TestRPC(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	var resources struct {
		Resources []struct{ URI string } `json:"resources"`
	}
	if err := e.Client.RPC(ctx, "alpha", "resources/list", nil, &resources); err != nil || len(resources.Resources) != 1 {
		t.Fatalf("resources/list: %+v %v", resources, err)
	}
	var read struct {
		Contents []struct{ Text string } `json:"contents"`
	}
	if err := e.Client.RPC(ctx, "alpha", "resources/read", map[string]string{"uri": "test://greeting"}, &read); err != nil || read.Contents[0].Text != "hello from mcpbus-testserver" {
		t.Fatalf("resources/read: %+v %v", read, err)
	}
	var prompt struct {
		Messages []struct {
			Content struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	if err := e.Client.RPC(ctx, "alpha", "prompts/get", map[string]any{"name": "greet", "arguments": map[string]string{"who": "ada"}}, &prompt); err != nil || prompt.Messages[0].Content.Text != "Hello, ada" {
		t.Fatalf("prompts/get: %+v %v", prompt, err)
	}
	// Cache hints a server did not give are not sent (go-sdk's client
	// decodes them as "ttlMs":0,"cacheScope":"": TestRPCReplyCacheHints);
	// those it gave are, whatever its era (a go-sdk server gives a scope
	// even on 2025-11-25).
	e.Put(t, runnertest.Binary("old", testServer, "-protocols", "2025-11-25"))
	e.WaitState(t, "old", model.StateRunning, 10*time.Second)
	for _, server := range []string{"alpha", "old"} {
		for _, m := range []string{"ping", "prompts/list", "resources/templates/list", "tools/list", "resources/list", "resources/read", "prompts/get"} {
			params := map[string]any{"uri": "test://greeting", "name": "greet", "arguments": map[string]string{"who": "ada"}}
			var out json.RawMessage
			if err := e.Client.RPC(ctx, server, m, params, &out); err != nil {
				t.Fatalf("%s %s: %v", server, m, err)
			}
			hinted := bytes.Contains(out, []byte(`"cacheScope"`))
			if bytes.Contains(out, []byte(`"cacheScope":""`)) || bytes.Contains(out, []byte(`"ttlMs"`)) != hinted {
				t.Errorf("%s %s: cache hints %s", server, m, out)
			}
		}
	}
	wantCode(t, e.Client.RPC(ctx, "alpha", "sampling/createMessage", nil, nil), apierr.Validation)
	wantCode(t, e.Client.RPC(ctx, "alpha", "prompts/get", "not an object", nil), apierr.Validation)
	wantCode(t, e.Client.RPC(ctx, "nosuch", "ping", nil, nil), apierr.NotFound)
	// The server's own errors keep what they say: no such resource (MCP's
	// -32002) is NOT_FOUND on its uri, no such prompt (-32602) a bad
	// parameter, neither a tool's failure nor an outage.
	err := e.Client.RPC(ctx, "alpha", "resources/read", map[string]string{"uri": "test://nope"}, nil)
	if ae := apierr.From(err); ae.Code != apierr.Validation || ae.Field != "params" || strings.Contains(ae.Message, "tool") {
		t.Errorf("resources/read of an unknown uri, -32602 (go-sdk since v1.7): %v", err)
	}
	legacy := runnertest.Binary("legacy", testServer) // -32002 for it, as before 2025-11-25
	legacy.EnvVars = map[string]model.EnvVar{"MCPGODEBUG": {Value: "customresnotfounderrcode=1"}}
	e.Put(t, legacy)
	e.WaitState(t, "legacy", model.StateRunning, 10*time.Second)
	err = e.Client.RPC(ctx, "legacy", "resources/read", map[string]string{"uri": "test://nope"}, nil)
	if ae := apierr.From(err); ae.Code != apierr.NotFound || ae.Field != "uri" || strings.Contains(ae.Message, "tool") {
		t.Errorf("resources/read of an unknown uri, -32002: %v", err)
	}
	err = e.Client.RPC(ctx, "alpha", "prompts/get", map[string]any{"name": "nope"}, nil)
	if ae := apierr.From(err); ae.Code != apierr.Validation || ae.Field != "params" {
		t.Errorf("prompts/get of an unknown prompt: %v", err)
	}
}

// runtime.start racing the takeover of a just-enabled server (what
// config.enable does): it is answered, and the server stays running (the
// boot that follows must not turn it idle). A monitoring subscriber on ">"
// hides NATS's "no responders", so that cannot be what detects "not owned yet".
func TestStartRacesTakeover(t *testing.T) {
	opts := quickOpts()
	opts.MaxServers = 64
	opts.IdleTimeout = -1
	e := runnertest.Start(t, opts)
	monitor, err := e.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer monitor.Close()
	if _, err := monitor.Subscribe(">", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := monitor.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 15; i++ {
		name := fmt.Sprintf("race%d", i)
		cfg := runnertest.Binary(name, testServer)
		cfg.Enabled = false
		saved := e.Put(t, cfg)
		e.WaitState(t, name, model.StateDisabled, 5*time.Second)
		saved.Enabled = true
		e.Put(t, saved)
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
			began := time.Now()
			st, err := e.Client.Runtime(ctx, "start", name)
			if took := time.Since(began); took > 5*time.Second {
				t.Fatalf("%s: start took %s", name, took)
			}
			cancel()
			if err == nil {
				if st.State != model.StateRunning {
					t.Fatalf("%s: start answered %s", name, st.State)
				}
				break
			}
			if c := apierr.Of(err); (c != apierr.ServiceUnavailable && c != apierr.Conflict) || time.Now().After(deadline) {
				t.Fatalf("%s: start: %v", name, err)
			}
		}
		time.Sleep(50 * time.Millisecond) // a boot queued behind the start has run by now
		if st, _ := e.Client.Runtime(context.Background(), "status", name); st.State != model.StateRunning {
			t.Fatalf("%s: %s after a successful start", name, st.State)
		}
	}
}

// A server in error after a start that is not retried (its binary does not
// exist) starts again once its config is fixed, without a manual restart.
func TestFixedConfigLeavesError(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", "/nonexistent/mcp-server")
	cfg.Runtime.Eager = true
	cfg = e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateError, 10*time.Second)
	cfg.Package.Identifier = testServer
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if _, err := call(t, e, "alpha", "echo", `{"message":"fixed"}`); err != nil {
		t.Fatalf("a call after the fix: %v", err)
	}
}
