package runnertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// BuildRunner builds the mcpbus-runner command into a temp dir and returns
// its path; call it from TestMain and run cleanup after m.Run.
func BuildRunner() (path string, cleanup func(), err error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", nil, errors.New("runnertest: cannot locate source")
	}
	dir, err := os.MkdirTemp("", "mcpbus-runner")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "mcpbus-runner")
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Dir = filepath.Join(filepath.Dir(self), "..", "cmd", "runner")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("runnertest: building mcpbus-runner: %w", err)
	}
	return path, func() { _ = os.RemoveAll(dir) }, nil
}

// ClusterEnv is a NATS cluster in this process, for runners that run as
// separate processes (StartRunner), the way a deployment runs them.
type ClusterEnv struct {
	Cluster *embednats.Cluster
	// NC is the callers' connection: TCP to every node, reconnecting forever.
	NC     *nats.Conn
	JS     jetstream.JetStream
	Client *client.Client
	Buckets
	// Replicas of the shared assets: one per node.
	Replicas int
}

// StartClusterEnv runs a cluster of nodes servers and creates the shared
// assets with one replica per node; all of it stops when the test ends.
func StartClusterEnv(t testing.TB, nodes int) *ClusterEnv {
	t.Helper()
	c, err := embednats.StartCluster(nodes, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return StartClusterEnvOn(t, c)
}

// StartClusterEnvOn is StartClusterEnv on a cluster started already; opts
// add to the callers' connection's options (nats.DontRandomize: node 0
// first).
func StartClusterEnvOn(t testing.TB, c *embednats.Cluster, opts ...nats.Option) *ClusterEnv {
	t.Helper()
	nodes := len(c.Nodes)
	nc, err := c.Connect(append([]nats.Option{nats.Name("runnertest"), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{Replicas: nodes})
	if err != nil {
		t.Fatal(err)
	}
	return &ClusterEnv{
		Cluster: c, NC: nc, JS: js, Buckets: Buckets{Assets: assets, Store: configstore.Store{KV: assets.Configs}}, Replicas: nodes,
		Client: client.New(nc, client.Options{Timeout: 20 * time.Second}),
	}
}

// RunnerProc is a runner running as a process of its own.
type RunnerProc struct {
	ID string
	// Node is the cluster node it connects to first.
	Node int
	// LogPath is the file with its output (JSON log lines on stderr).
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result, set before done is closed
	once sync.Once
	sig  error // the result of the first Stop or Kill
}

// StartRunner starts `bin --nats <node's URL,the other nodes' URLs>
// --runner-id id --log-level debug --replicas <nodes> --data-dir <temp>
// extraArgs...` and waits until it
// answers $SRV.PING (flags repeated in extraArgs win). Its output goes to a
// file whose last 50 lines are logged if the test fails; it is stopped
// (SIGTERM) when the test ends. It stays in the test's process group, so it
// can be killed alone; the MCP servers it spawns die with it by Pdeathsig.
func (e *ClusterEnv) StartRunner(t testing.TB, bin, id string, node int, extraArgs ...string) *RunnerProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "runner-"+id+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		// Runner i is pinned to node i, listed first.
		// The test cluster authenticates nobody: the runner is told so.
		"--nats", e.Cluster.URLsFrom(node), "--nats-keep-order", "--insecure-bus", "--runner-id", id, "--log-level", "debug",
		"--replicas", strconv.Itoa(e.Replicas), "--data-dir", t.TempDir(),
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Should this test process die, the runner goes too (and its children
	// after it): no runner left reconnecting forever.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("starting runner %s: %v", id, err)
	}
	p := &RunnerProc{ID: id, Node: node, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	// Cleanups run last first: the log tail is printed after the stop, so
	// it shows the shutdown too.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner %s (pid %d) log, last 60 lines of %s but its setup steps:\n%s", id, p.PID(), logPath, p.TailWithout(60, `"setup step done"`))
		}
	})
	t.Cleanup(func() {
		if p.Exited() {
			return
		}
		if err := p.Stop(); err != nil {
			t.Errorf("runner %s: %v", id, err)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for !slices.Contains(e.pingRunners(id), id) {
		if p.Exited() {
			t.Fatalf("runner %s exited at start: %v", id, p.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner %s does not answer $SRV.PING.%s after 15s", id, runner.ServiceName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// RunnerIDs are the ids of the runners that answer $SRV.PING within 250ms.
func (e *ClusterEnv) RunnerIDs() []string { return e.pingRunners("") }

// pingRunners collects the runners answering $SRV.PING for 250ms, or until
// runner until answers.
func (e *ClusterEnv) pingRunners(until string) []string {
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := e.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.NC.PublishRequest("$SRV.PING."+runner.ServiceName, inbox, nil); err != nil {
		return nil
	}
	var ids []string
	timeout := time.After(250 * time.Millisecond)
	for {
		select {
		case m := <-ch:
			var ping struct {
				Metadata map[string]string `json:"metadata"`
			}
			if json.Unmarshal(m.Data, &ping) == nil && ping.Metadata["runner"] != "" {
				ids = append(ids, ping.Metadata["runner"])
				if until != "" && ping.Metadata["runner"] == until {
					return ids
				}
			}
		case <-timeout:
			slices.Sort(ids)
			return ids
		}
	}
}

// PID is the runner's process id.
func (p *RunnerProc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *RunnerProc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *RunnerProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is how the process ended (nil: exit code 0), once it has.
func (p *RunnerProc) ExitErr() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM (a graceful stop: the runner hands its servers over)
// and waits up to 15s; then it kills the process and reports the timeout. It
// returns an error too when the runner exits other than with code 0. Calls
// after the first Stop or Kill return its result.
func (p *RunnerProc) Stop() error {
	p.once.Do(func() {
		if p.Exited() {
			p.sig = p.err
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.err != nil {
				p.sig = fmt.Errorf("runner %s exited after SIGTERM: %w", p.ID, p.err)
			}
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			p.sig = fmt.Errorf("runner %s did not stop within 15s of SIGTERM: killed", p.ID)
		}
	})
	return p.sig
}

// Kill sends SIGKILL (a crash: no handover, no cleanup) and waits for the
// process to end.
func (p *RunnerProc) Kill() {
	p.once.Do(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
		}
		<-p.done
	})
	<-p.done
}

// Logs is the runner's output so far.
func (p *RunnerProc) Logs() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail is the last n lines of the runner's output.
func (p *RunnerProc) Tail(n int) string { return p.TailWithout(n, "") }

// TailWithout is Tail of the lines that do not hold skip (none skipped when
// empty): a failure's log shows what the runner did, not its routine steps.
func (p *RunnerProc) TailWithout(n int, skip string) string {
	lines := bytes.Split(bytes.TrimRight([]byte(p.Logs()), "\n"), []byte("\n"))
	if skip != "" {
		lines = slices.DeleteFunc(lines, func(l []byte) bool { return bytes.Contains(l, []byte(skip)) })
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// RecordPID is a shell command that runs cmd through launcher (a command
// taking a script, such as "setsid sh -c"), the new process first writing
// its pid to file (whole, at once): its pid as this host sees it, from its
// own /proc/self/stat. $! and $$ give a pid in the server's PID namespace.
func RecordPID(file, launcher, cmd string) string {
	return launcher + ` 'read -r p _ < /proc/self/stat; echo "$p" > "` + file + `.tmp"; mv "` + file + `.tmp" "` + file + `"; exec ` + cmd + `'`
}

// Alive reports whether process pid exists; a zombie counts as gone.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// WaitGone waits until process pid is gone, failing the test after within.
func WaitGone(t testing.TB, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
