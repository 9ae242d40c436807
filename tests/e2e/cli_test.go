package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// dataDirs maps the NATS URL of each mcpbus up a test started to its data
// dir, where the CLI finds the operator identity (tests run side by side).
var dataDirs sync.Map

// startUp runs `mcpbus up` in dir with env and args (clitest.StartUp) and
// records its data dir for the commands cli runs against it.
func startUp(t *testing.T, bin, dir string, env []string, args ...string) *clitest.Up {
	t.Helper()
	up := clitest.StartUp(t, bin, clitest.UpOptions{Dir: dir, Env: env, Args: args})
	dataDirs.Store(up.NATSURL(), up.DataDir())
	t.Cleanup(func() { dataDirs.Delete(up.NATSURL()) })
	return up
}

// cliFor runs mcpbus client commands against natsURL, as the operator of the
// mcpbus up there when a test started one.
func cliFor(bin, natsURL string) clitest.CLI {
	dir, _ := dataDirs.Load(natsURL)
	s, _ := dir.(string)
	return clitest.CLI{Bin: bin, NATS: natsURL, DataDir: s}
}

// cli runs one mcpbus client command against natsURL.
func cli(t *testing.T, bin, natsURL string, args ...string) clitest.Result {
	t.Helper()
	return cliFor(bin, natsURL).Run(t, args...)
}

// statusOf reads one server's status from `mcpbus status --json` (zero when
// the command fails or the server is not listed).
func statusOf(t *testing.T, bin, natsURL, server string) (model.Status, clitest.Result) {
	t.Helper()
	r := cli(t, bin, natsURL, "status", "--json")
	var reply model.RuntimeStatusReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &reply) != nil {
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
		var r clitest.Result
		st, r = statusOf(t, bin, natsURL, server)
		return st.State == state, fmt.Sprintf("%s is %q, want %q (last status command: %s)", server, st.State, state, r)
	})
	return st
}

// TestCLI drives a real `mcpbus up` subprocess with the mcpbus client commands.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin

	t.Run("up", func(t *testing.T) {
		dir := t.TempDir()
		servers := everythingServersFile(t, dir)
		up := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"), "--config", servers)
		url := up.NATSURL()

		st := waitCLIState(t, bin, url, "everything", model.StateRunning, 30*time.Second)
		if !alive(st.PID) {
			t.Fatalf("status --json gives pid %d, but no such process", st.PID)
		}

		// tools --json lists the namespaced tools.
		r := cli(t, bin, url, "tools", "--json")
		var tools model.ToolsListReply
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &tools) != nil {
			t.Fatalf("tools --json: %s", r)
		}
		found := false
		for _, tool := range tools.Tools {
			found = found || (tool.Name == "everything__echo" && tool.Subject == "mcp.v1.call.everything.echo")
		}
		if !found {
			t.Errorf("tools --json does not list everything__echo: %s", r.Stdout)
		}

		// tools search ranks the catalog: the query's words, not the tool's name.
		r = cli(t, bin, url, "tools", "search", "echo", "back", "the", "message", "--limit", "3", "--json")
		var hits model.ToolsSearchReply
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &hits) != nil || len(hits.Tools) == 0 || len(hits.Tools) > 3 ||
			hits.Tools[0].Name != "everything__echo" || len(hits.Scores) != len(hits.Tools) {
			t.Errorf("tools search --json: %s", r)
		}
		if r := cli(t, bin, url, "tools", "search", "echo"); r.Code != 0 || !strings.Contains(r.Stdout, "everything__echo") {
			t.Errorf("tools search echo: %s", r)
		}

		// call prints the text content.
		if r := cli(t, bin, url, "call", "everything.echo", `{"message":"hi"}`); r.Code != 0 || strings.TrimSpace(r.Stdout) != "Echo: hi" {
			t.Errorf("call everything.echo: %s, want stdout \"Echo: hi\"", r)
		}
		// runners --json: the one runner of `up`, owning the server, with the call counted.
		// Call counters reach the shared status every 2 s (later on a loaded host).
		var runners struct {
			Runners []struct {
				ID      string   `json:"id"`
				Servers []string `json:"servers"`
				Calls   int      `json:"calls"`
			} `json:"runners"`
		}
		testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
			r = cli(t, bin, url, "runners", "--json")
			runners.Runners = nil
			counted := r.Code == 0 && json.Unmarshal([]byte(r.Stdout), &runners) == nil && len(runners.Runners) > 0 && runners.Runners[0].Calls > 0
			return counted, "no call counted: " + r.String()
		})
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &runners) != nil || len(runners.Runners) != 1 ||
			len(runners.Runners[0].Servers) != 1 || runners.Runners[0].Servers[0] != "everything" || runners.Runners[0].ID != st.Runner || runners.Runners[0].Calls < 1 {
			t.Errorf("runners --json: %s (status runner %s)", r, st.Runner)
		}
		// rpc prints the MCP result as JSON.
		r = cli(t, bin, url, "rpc", "everything", "prompts/list")
		var prompts struct {
			Prompts []json.RawMessage `json:"prompts"`
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &prompts) != nil || len(prompts.Prompts) == 0 {
			t.Errorf("rpc everything prompts/list: %s", r)
		}

		// An unknown server: non-zero exit, the error contract as JSON.
		r = cli(t, bin, url, "--json", "call", "nosuch.echo", `{}`)
		var e struct{ Code, Message, Field string }
		if r.Code == 0 || json.Unmarshal([]byte(r.Stdout), &e) != nil || e.Code != "NOT_FOUND" || e.Message == "" {
			t.Errorf("--json call nosuch.echo: %s, want a non-zero exit and {\"code\":\"NOT_FOUND\",…}", r)
		}
		// Arguments that are not an object: VALIDATION_ERROR from the runner.
		if r := cli(t, bin, url, "call", "everything.echo", `[1]`); r.Code == 0 || !strings.Contains(r.Stderr, "VALIDATION_ERROR") {
			t.Errorf("call everything.echo '[1]': %s, want a non-zero exit and VALIDATION_ERROR", r)
		}

		// events --replay shows the stored status events of everything.
		checkStatusEvents(t, bin, url)

		// stop: status says stopped and the process group is gone.
		if r := cli(t, bin, url, "stop", "everything"); r.Code != 0 || !strings.Contains(r.Stdout, "everything: stopped") {
			t.Fatalf("stop everything: %s", r)
		}
		waitCLIState(t, bin, url, "everything", model.StateStopped, 10*time.Second)
		waitGroupGone(t, st.PID, 10*time.Second)

		// start again, then SIGTERM `up`: it exits 0 and takes the server with it.
		if r := cli(t, bin, url, "start", "everything"); r.Code != 0 || !strings.Contains(r.Stdout, "everything: running") {
			t.Fatalf("start everything: %s", r)
		}
		st2 := waitCLIState(t, bin, url, "everything", model.StateRunning, 30*time.Second)
		if st2.PID == st.PID || !alive(st2.PID) {
			t.Fatalf("after start, pid %d (before %d) is not a new live process", st2.PID, st.PID)
		}
		up.Stop(t, 10*time.Second)
		waitGroupGone(t, st2.PID, 5*time.Second)
		if r := cli(t, bin, url, "status"); r.Code == 0 {
			t.Errorf("status still answers after up exited: %s", r)
		}
	})

	t.Run("env", func(t *testing.T) {
		cwd := t.TempDir()
		data := filepath.Join(t.TempDir(), "data")
		port := testkit.FreePort(t) // what this subtest checks: MCPBUS_NATS_PORT is the port
		url := fmt.Sprintf("nats://127.0.0.1:%d", port)
		up := startUp(t, bin, cwd, clitest.Env("MCPBUS_NATS_PORT="+strconv.Itoa(port), "MCPBUS_DATA_DIR="+data))
		testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
			r := cli(t, bin, url, "status", "--json")
			return r.Code == 0, fmt.Sprintf("no answer on MCPBUS_NATS_PORT %d: %s", port, r)
		})
		if _, err := os.Stat(filepath.Join(data, "jetstream")); err != nil {
			t.Errorf("MCPBUS_DATA_DIR not used: %v", err)
		}
		if _, err := os.Stat(filepath.Join(cwd, ".mcpbus")); err == nil {
			t.Errorf("the default data dir .mcpbus was created although MCPBUS_DATA_DIR is set")
		}
		up.Stop(t, 10*time.Second)
	})
}

// checkStatusEvents runs `mcpbus events --json --kind status --replay` until
// it prints a status event of everything in state running, then interrupts it.
func checkStatusEvents(t *testing.T, bin, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := cliFor(bin, url).Command(ctx, "events", "--json", "--kind", "status", "--replay")
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
