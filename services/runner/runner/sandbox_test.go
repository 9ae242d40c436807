package runner_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// sandboxSecrets are the files a hostile server goes after: a seed in an
// identities dir outside the data dir, a file in the data dir, another
// server's keyfile (all 0600, the runner's own), and the runner's own
// environment (whatever tokens it was started with): /proc/<runner>/environ,
// and that of each of its threads, among them the one that forked the
// server and shares its Landlock domain.
type sandboxSecrets struct {
	dataDir, seed, dataFile, keyfile, environ, threads string
}

// files are the runner's files the probe tries; all adds its environment.
func (s sandboxSecrets) files() []string { return []string{s.seed, s.dataFile, s.keyfile} }
func (s sandboxSecrets) all() []string   { return append(s.files(), s.environ, s.threads) }

func makeSecrets(t *testing.T) sandboxSecrets {
	t.Helper()
	pid := os.Getpid() // the runner runs in this process
	s := sandboxSecrets{dataDir: t.TempDir(), environ: fmt.Sprintf("/proc/%d/environ", pid), threads: fmt.Sprintf("/proc/%d/task/*/environ", pid)}
	ids, keys := t.TempDir(), t.TempDir()
	s.seed = filepath.Join(ids, "runner.nk")
	s.dataFile = filepath.Join(s.dataDir, "admin.key")
	s.keyfile = filepath.Join(keys, "other.key")
	for _, f := range []string{s.seed, s.dataFile, s.keyfile} {
		if err := os.WriteFile(f, []byte("SUAFAKESEED-"+filepath.Base(f)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// worldReadableServer copies the test server into a directory others may
// enter: a switched child cannot run it from a 0700 temp dir.
func worldReadableServer(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpbus-sandbox-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(testServer)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(dir, "mcpbus-testserver")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

type startReads struct {
	UID      int               `json:"uid"`
	Reads    map[string]string `json:"reads"`
	TmpWrite string            `json:"tmp_write"`
}

// probeSecrets runs a server that first tries to read every secret through
// a runner with opts, beside another server whose keyfile it goes after,
// and returns what it got.
func probeSecrets(t *testing.T, opts runner.Options, server string, s sandboxSecrets) startReads {
	t.Helper()
	opts.DataDir = s.dataDir
	opts.ChildProtect = []string{filepath.Dir(s.seed), s.seed} // what the host passes for --nats-nkey
	opts.KeyfilePrefixes = []string{filepath.Dir(s.keyfile)}   // the exec policy allows no keyfile otherwise
	e := runnertest.Start(t, opts)
	other := runnertest.Binary("other", server)
	other.EnvVars = map[string]model.EnvVar{"OTHER_KEY": {KeyfilePath: s.keyfile}}
	e.Put(t, other)
	e.WaitState(t, "other", model.StateRunning, 15*time.Second)

	probe := runnertest.Binary("probe", server)
	// The leading comma hides the paths from the runner, as a server that
	// guesses them would: a config that names them is refused (below).
	probe.EnvVars = map[string]model.EnvVar{"TESTMCP_TRY_READ": {Value: "," + strings.Join(s.all(), ",")}}
	e.Put(t, probe)
	st := e.WaitState(t, "probe", model.StateRunning, 15*time.Second)
	if fds := inheritedFDs(t, st.PID); len(fds) > 0 {
		t.Errorf("the server holds descriptors of the runner: %v", fds)
	}
	res, err := call(t, e, "probe", "start_reads", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	var got startReads
	if err := json.Unmarshal([]byte(text(t, res)), &got); err != nil {
		t.Fatal(err)
	}
	// The runner itself is not confined: it still reads all of them.
	for _, f := range s.files() {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatalf("the runner lost access to %s: %v", f, err)
		}
	}
	return got
}

// inheritedFDs lists the descriptors past stdio of process pid (a server)
// that lead to a socket or a file: what it would hold had it inherited the
// runner's (the bus connection, JetStream's files, a seed read).
func inheritedFDs(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the server's descriptors: %v", err)
	}
	var out []string
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err != nil || n <= 2 {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		// Its own: /dev, and the cgroup limits Go's runtime keeps open.
		if err == nil && (strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "/dev/") && !strings.HasPrefix(target, "/sys/fs/cgroup/")) {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out
}

// wantNothingRead checks the server read none of the runner's files and,
// with environ, nothing of its environment (a child running as root reads
// it whatever the runner does: only --child-uid keeps a root runner's).
func wantNothingRead(t *testing.T, got startReads, s sandboxSecrets, environ bool) {
	t.Helper()
	if !environ {
		for f := range got.Reads {
			if !slices.Contains(s.files(), f) {
				delete(got.Reads, f)
			}
		}
		t.Log("a root child: the runner's environment is not checked")
	}
	threads := 0
	for f := range got.Reads {
		if ok, _ := filepath.Match(s.threads, f); ok {
			threads++
		}
	}
	if threads == 0 && environ {
		t.Fatalf("the server found no thread of the runner to try: %+v", got)
	}
	for _, f := range s.files() {
		if _, ok := got.Reads[f]; !ok {
			t.Fatalf("the server did not try %s: %+v", f, got)
		}
	}
	for f, r := range got.Reads { // every path and every thread's environment
		thread, _ := filepath.Match(s.threads, f)
		switch {
		case strings.HasPrefix(r, "read "):
			t.Errorf("the server read %s: %s", f, r)
		case strings.Contains(r, "permission denied"), thread && strings.Contains(r, "no such file"): // a thread that ended meanwhile
		default:
			t.Errorf("reading %s failed, but not as denied: %s", f, r)
		}
	}
	if got.TmpWrite != "ok" {
		t.Errorf("the server cannot write its TMPDIR: %s", got.TmpWrite)
	}
}

// A hostile server reads none of the runner's secrets: under Landlock,
// under the uid switch, and under both; with the sandbox off it reads them
// all (the probe works).
func TestSandboxChildReadsNoSecrets(t *testing.T) {
	abi := runner.LandlockABI()
	root := os.Geteuid() == 0
	t.Run("off", func(t *testing.T) {
		s := makeSecrets(t)
		opts := quickOpts()
		opts.ChildSandbox = "off"
		got := probeSecrets(t, opts, testServer, s)
		for _, f := range s.files() {
			if !strings.HasPrefix(got.Reads[f], "read ") {
				t.Errorf("with the sandbox off the server should read %s: %s", f, got.Reads[f])
			}
		}
	})
	t.Run("landlock", func(t *testing.T) {
		if abi == 0 {
			t.Skip("the kernel has no Landlock")
		}
		s := makeSecrets(t)
		got := probeSecrets(t, quickOpts(), testServer, s)
		wantNothingRead(t, got, s, !root)
		if got.UID != os.Getuid() {
			t.Errorf("uid %d, want the runner's %d", got.UID, os.Getuid())
		}
	})
	t.Run("uid", func(t *testing.T) {
		if !root {
			t.Skip("the uid switch needs root (CI runs as root)")
		}
		s := makeSecrets(t)
		opts := quickOpts()
		opts.ChildUID = 65534
		runner.WithoutLandlock(&opts)
		got := probeSecrets(t, opts, worldReadableServer(t), s)
		wantNothingRead(t, got, s, true)
		if got.UID != 65534 {
			t.Errorf("uid %d, want 65534", got.UID)
		}
	})
	t.Run("uid+landlock", func(t *testing.T) {
		if !root || abi == 0 {
			t.Skip("needs root and Landlock")
		}
		s := makeSecrets(t)
		opts := quickOpts()
		opts.ChildUID = 65534
		got := probeSecrets(t, opts, worldReadableServer(t), s)
		wantNothingRead(t, got, s, true)
		if got.UID != 65534 {
			t.Errorf("uid %d, want 65534", got.UID)
		}
	})
}

// A config whose own arguments or environment name a protected path (or a
// directory holding one) is refused before anything is spawned.
func TestSandboxRefusesProtectedArguments(t *testing.T) {
	if runner.LandlockABI() == 0 && os.Geteuid() != 0 {
		t.Skip("no sandbox on this host: the kernel has no Landlock and the test is not root")
	}
	dataDir := t.TempDir()
	opts := quickOpts()
	opts.DataDir = dataDir
	e := runnertest.Start(t, opts)

	cfg := runnertest.Binary("files", testServer, "--root", filepath.Dir(dataDir))
	e.Put(t, cfg)
	st := e.WaitState(t, "files", model.StateError, 10*time.Second)
	if st.Code != string(apierr.Validation) || !strings.Contains(st.Message, "may not read") || !strings.Contains(st.Message, "data dir") {
		t.Fatalf("status %+v, want VALIDATION_ERROR naming the data dir", st)
	}

	cfg = runnertest.Binary("envdir", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"STORE": {Value: filepath.Join(dataDir, "jetstream")}}
	e.Put(t, cfg)
	st = e.WaitState(t, "envdir", model.StateError, 10*time.Second)
	if st.Code != string(apierr.Validation) || !strings.Contains(st.Message, "STORE=") {
		t.Fatalf("status %+v, want VALIDATION_ERROR naming STORE", st)
	}
}

// A runner killed outright (SIGKILL, OOM, a host crash) leaves its servers'
// private temp dirs: the next runner on the host removes them at start,
// and not those of a runner still running.
func TestStartRemovesTempDirsOfAKilledRunner(t *testing.T) {
	tmp, err := os.MkdirTemp("", "mcpbus-shared-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	childDirs := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(tmp, "mcpbus-child-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// A live runner's server, with its temp dir.
	e := runnertest.Start(t, runner.Options{})
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 15*time.Second)
	live := childDirs()
	if len(live) != 1 {
		t.Fatalf("temp dirs of a running server: %v", live)
	}
	// One a killed runner left, as it made it: its lock ended with it.
	dead := filepath.Join(tmp, "mcpbus-child-4242")
	if err := os.MkdirAll(filepath.Join(dead, "npm"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "npm", "token"), []byte("left by a server"), 0o600); err != nil {
		t.Fatal(err)
	}

	runnertest.Start(t, runner.Options{})
	if got := childDirs(); !slices.Equal(got, live) {
		t.Fatalf("temp dirs after another runner's start: %v, want only the live server's %v", got, live)
	}
}
