package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// buildCLI builds tools/mcpbus into a temp dir.
func buildCLI(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build mcpbus: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mcpbus")
	cmd := exec.Command(gobin, "build", "-o", bin, "./tools/mcpbus")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./tools/mcpbus: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the test's environment without MCPBUS_* settings, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPBUS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// upProcess is a running `mcpbus up`.
type upProcess struct {
	cmd  *exec.Cmd
	logs *testkit.LogBuffer
	done chan error
}

// startUp runs `mcpbus up` with args and env; it is killed when the test ends
// if it is still running, and its log is shown when the test fails.
func startUp(t *testing.T, bin, dir string, env []string, args ...string) *upProcess {
	t.Helper()
	p := &upProcess{logs: &testkit.LogBuffer{}, done: make(chan error, 1)}
	if !slices.Contains(args, "--http-addr") {
		args = append(args, "--http-addr", "127.0.0.1:0") // tests run in parallel: no fixed port
	}
	rememberDataDir(dir, env, args)
	p.cmd = exec.Command(bin, append([]string{"up"}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("mcpbus up log:\n%s", p.logs.Tail(8000))
		}
	})
	return p
}

// dataDirs maps the NATS URL of each mcpbus up a test started to its data
// dir, where the CLI finds the operator identity (tests run one at a time).
var dataDirs = map[string]string{}

// rememberDataDir records the data dir and NATS URL of an mcpbus up started
// in dir with env and args.
func rememberDataDir(dir string, env, args []string) {
	port, data := "4222", ".mcpbus"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MCPBUS_NATS_PORT="); ok {
			port = v
		}
		if v, ok := strings.CutPrefix(kv, "MCPBUS_DATA_DIR="); ok {
			data = v
		}
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--nats-port":
			port = args[i+1]
		case "--data-dir":
			data = args[i+1]
		}
	}
	if !filepath.IsAbs(data) {
		data = filepath.Join(dir, data)
	}
	dataDirs["nats://127.0.0.1:"+port] = data
}

// terminate sends SIGTERM and returns the exit code, failing if it takes longer than within.
func (p *upProcess) terminate(t *testing.T, within time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("mcpbus up did not exit within %s of SIGTERM", within)
		return -1
	}
}

// cliResult is the outcome of one CLI command.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// cli runs one mcpbus client command against natsURL.
func cli(t *testing.T, bin, natsURL string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--nats", natsURL}, args...)...)
	cmd.Env = cleanEnv()
	if d, ok := dataDirs[natsURL]; ok {
		cmd.Env = append(cmd.Env, "MCPBUS_DATA_DIR="+d) // the operator identity of that mcpbus up
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("mcpbus %v: %v", args, err)
	}
	return r
}

// statusOf reads one server's status from `mcpbus status --json` (zero when
// the command fails or the server is not listed).
func statusOf(t *testing.T, bin, natsURL, server string) (model.Status, cliResult) {
	t.Helper()
	r := cli(t, bin, natsURL, "status", "--json")
	var reply model.RuntimeStatusReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &reply) != nil {
		return model.Status{}, r
	}
	for _, s := range reply.Servers {
		if s.Server == server {
			return s, r
		}
	}
	return model.Status{}, r
}

// waitCLIState polls `mcpbus status --json` until server is in state.
func waitCLIState(t *testing.T, bin, natsURL, server, state string, within time.Duration) model.Status {
	t.Helper()
	var st model.Status
	testkit.WaitFor(t, within, func() (bool, string) {
		var r cliResult
		st, r = statusOf(t, bin, natsURL, server)
		return st.State == state, fmt.Sprintf("%s is %q, want %q (last status command: %s)", server, st.State, state, r)
	})
	return st
}

// TestCLI drives a real `mcpbus up` subprocess with the mcpbus client commands.
func TestCLI(t *testing.T) {
	everything := npmBin(t, "mcp-server-everything")
	bin := buildCLI(t)

	t.Run("up", func(t *testing.T) {
		dir := t.TempDir()
		servers := filepath.Join(dir, "servers.yaml")
		yaml := fmt.Sprintf("servers:\n  - name: everything\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n", everything)
		if err := os.WriteFile(servers, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		port := testkit.FreePort(t)
		url := fmt.Sprintf("nats://127.0.0.1:%d", port)
		up := startUp(t, bin, dir, cleanEnv(), "--nats-port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"), "--config", servers)

		st := waitCLIState(t, bin, url, "everything", model.StateRunning, 30*time.Second)
		if !alive(st.PID) {
			t.Fatalf("status --json gives pid %d, but no such process", st.PID)
		}

		// tools --json lists the namespaced tools.
		r := cli(t, bin, url, "tools", "--json")
		var tools model.ToolsListReply
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &tools) != nil {
			t.Fatalf("tools --json: %s", r)
		}
		found := false
		for _, tool := range tools.Tools {
			found = found || (tool.Name == "everything__echo" && tool.Subject == "mcp.v1.call.everything.echo")
		}
		if !found {
			t.Errorf("tools --json does not list everything__echo: %s", r.stdout)
		}

		// call prints the text content.
		if r := cli(t, bin, url, "call", "everything.echo", `{"message":"hi"}`); r.code != 0 || strings.TrimSpace(r.stdout) != "Echo: hi" {
			t.Errorf("call everything.echo: %s, want stdout \"Echo: hi\"", r)
		}
		// runners --json: the one runner of `up`, owning the server, with the call counted.
		time.Sleep(2500 * time.Millisecond) // call counters reach the shared status every 2s
		r = cli(t, bin, url, "runners", "--json")
		var runners struct {
			Runners []struct {
				ID      string   `json:"id"`
				Servers []string `json:"servers"`
				Calls   int      `json:"calls"`
			} `json:"runners"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &runners) != nil || len(runners.Runners) != 1 ||
			len(runners.Runners[0].Servers) != 1 || runners.Runners[0].Servers[0] != "everything" || runners.Runners[0].ID != st.Runner || runners.Runners[0].Calls < 1 {
			t.Errorf("runners --json: %s (status runner %s)", r, st.Runner)
		}
		// rpc prints the MCP result as JSON.
		r = cli(t, bin, url, "rpc", "everything", "prompts/list")
		var prompts struct {
			Prompts []json.RawMessage `json:"prompts"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &prompts) != nil || len(prompts.Prompts) == 0 {
			t.Errorf("rpc everything prompts/list: %s", r)
		}

		// An unknown server: non-zero exit, the error contract as JSON.
		r = cli(t, bin, url, "--json", "call", "nosuch.echo", `{}`)
		var e struct{ Code, Message, Field string }
		if r.code == 0 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != "NOT_FOUND" || e.Message == "" {
			t.Errorf("--json call nosuch.echo: %s, want a non-zero exit and {\"code\":\"NOT_FOUND\",…}", r)
		}
		// Arguments that are not an object: VALIDATION_ERROR from the runner.
		if r := cli(t, bin, url, "call", "everything.echo", `[1]`); r.code == 0 || !strings.Contains(r.stderr, "VALIDATION_ERROR") {
			t.Errorf("call everything.echo '[1]': %s, want a non-zero exit and VALIDATION_ERROR", r)
		}

		// events --replay shows the stored status events of everything.
		checkStatusEvents(t, bin, url)

		// stop: status says stopped and the process group is gone.
		if r := cli(t, bin, url, "stop", "everything"); r.code != 0 || !strings.Contains(r.stdout, "everything: stopped") {
			t.Fatalf("stop everything: %s", r)
		}
		waitCLIState(t, bin, url, "everything", model.StateStopped, 10*time.Second)
		waitGroupGone(t, st.PID, 10*time.Second)

		// start again, then SIGTERM `up`: it exits 0 and takes the server with it.
		if r := cli(t, bin, url, "start", "everything"); r.code != 0 || !strings.Contains(r.stdout, "everything: running") {
			t.Fatalf("start everything: %s", r)
		}
		st2 := waitCLIState(t, bin, url, "everything", model.StateRunning, 30*time.Second)
		if st2.PID == st.PID || !alive(st2.PID) {
			t.Fatalf("after start, pid %d (before %d) is not a new live process", st2.PID, st.PID)
		}
		if code := up.terminate(t, 10*time.Second); code != 0 {
			t.Fatalf("mcpbus up exited %d after SIGTERM, want 0", code)
		}
		waitGroupGone(t, st2.PID, 5*time.Second)
		if r := cli(t, bin, url, "status"); r.code == 0 {
			t.Errorf("status still answers after up exited: %s", r)
		}
	})

	t.Run("env", func(t *testing.T) {
		cwd := t.TempDir()
		data := filepath.Join(t.TempDir(), "data")
		port := testkit.FreePort(t)
		url := fmt.Sprintf("nats://127.0.0.1:%d", port)
		up := startUp(t, bin, cwd, cleanEnv("MCPBUS_NATS_PORT="+strconv.Itoa(port), "MCPBUS_DATA_DIR="+data))
		testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
			r := cli(t, bin, url, "status", "--json")
			return r.code == 0, fmt.Sprintf("no answer on MCPBUS_NATS_PORT %d: %s", port, r)
		})
		if _, err := os.Stat(filepath.Join(data, "jetstream")); err != nil {
			t.Errorf("MCPBUS_DATA_DIR not used: %v", err)
		}
		if _, err := os.Stat(filepath.Join(cwd, ".mcpbus")); err == nil {
			t.Errorf("the default data dir .mcpbus was created although MCPBUS_DATA_DIR is set")
		}
		if code := up.terminate(t, 10*time.Second); code != 0 {
			t.Fatalf("mcpbus up exited %d after SIGTERM, want 0", code)
		}
	})
}

// checkStatusEvents runs `mcpbus events --json --kind status --replay` until
// it prints a status event of everything in state running, then interrupts it.
func checkStatusEvents(t *testing.T, bin, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--nats", url, "events", "--json", "--kind", "status", "--replay")
	cmd.Env = cleanEnv("MCPBUS_DATA_DIR=" + dataDirs[url])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found, readDone := make(chan struct{}), make(chan struct{})
	var lines []string // read only after readDone
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			var ev struct {
				Subject string       `json:"subject"`
				Time    string       `json:"time"`
				Data    model.Status `json:"data"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Subject == "mcp.v1.events.status.everything" &&
				ev.Data.Server == "everything" && ev.Data.State == model.StateRunning && ev.Time != "" {
				select {
				case <-found:
				default:
					close(found)
				}
			}
		}
	}()
	select {
	case <-found:
	case <-readDone: // ended on its own
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-readDone // EOF once it exits (the context kills it at the latest)
	werr := cmd.Wait()
	select {
	case <-found:
	default:
		t.Fatalf("events --json --kind status --replay printed no running status event of everything:\n%s\nstderr: %s",
			strings.Join(lines, "\n"), stderr.String())
	}
	if werr != nil {
		t.Errorf("events did not exit cleanly on SIGTERM: %v; stderr: %s", werr, stderr.String())
	}
}
