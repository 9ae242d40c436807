package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// shellServer writes an executable shell script into a temp dir: a server
// (or a wrapper around the test server, given as its first argument).
func shellServer(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A server whose process exits while a helper it started (a browser, a
// language server) keeps its stdout and stderr open is gone all the same:
// its calls in flight fail at once, its status says so, and the helper is
// not left behind. Before, stdout never reached EOF, so nothing noticed
// until the health pings failed (minutes) and each call waited out its
// timeout.
func TestServerExitWithHelperHoldingItsOutput(t *testing.T) {
	// The helper inherits stdout and stderr; exec makes the server the leader.
	script := shellServer(t, "sleep 300 &\nexec \"$1\"\n")
	e := runnertest.Start(t, quickOpts())
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary("alpha", script, testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	group := groupMembers(st.PID)
	if len(group) != 2 {
		t.Fatalf("process group %d has %v, want the server and its helper", st.PID, group)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, e, "alpha", "sleep", `{"ms":20000}`)
		errc <- err
	}()
	waitRuns(t, runs, 1)
	killed := time.Now()
	if err := syscallKill(st.PID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantCode(t, err, apierr.ServiceUnavailable)
		if d := time.Since(killed); d > 5*time.Second {
			t.Fatalf("in-flight call failed after %s, want < 5s", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("in-flight call hung after the server exited (its helper holds stdout)")
	}
	st = e.WaitState(t, "alpha", model.StateError, 5*time.Second)
	if st.Code != string(apierr.ServiceUnavailable) {
		t.Fatalf("status after the exit: %+v", st)
	}
	for _, pid := range group {
		waitGone(t, pid, 5*time.Second)
	}
	// A restart by hand brings it back.
	if _, err := e.Client.Runtime(context.Background(), "restart", "alpha"); err != nil {
		t.Fatal(err)
	}
	if res, err := call(t, e, "alpha", "echo", `{"message":"up"}`); err != nil || text(t, res) != "up" {
		t.Fatalf("after restart: %v", err)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: comm may hold spaces, so after its ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// A server that answers the handshake, but wrongly (a protocol version
// mcpbus does not speak, an error), did not exit: its status says what
// went wrong rather than "server exited during the handshake", and its
// restarts stay bounded.
func TestHandshakeRefusedSaysWhy(t *testing.T) {
	opts := quickOpts()
	opts.RestartBackoff, opts.MaxRestarts = 50*time.Millisecond, 2
	e := runnertest.Start(t, opts)
	// Answers server/discover with "method not found" (go-sdk then sends
	// initialize) and initialize with answer, the request's id in place of
	// ID; exits when its stdin closes.
	handshake := func(answer string) string {
		return `while read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\),.*/\1/p')
  case "$line" in
  *'"method":"server/discover"'*) echo '{"jsonrpc":"2.0","id":'$id',"error":{"code":-32601,"message":"no"}}' ;;
  *'"method":"initialize"'*) echo '` + strings.ReplaceAll(answer, "ID", "'$id'") + `' ;;
  esac
done`
	}
	for name, tc := range map[string]struct {
		script string
		want   string
	}{
		"version": {handshake(`{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"1999-01-01","capabilities":{},"serverInfo":{"name":"x","version":"1"}}}`),
			`unsupported protocol version: "1999-01-01"`},
		"error": {handshake(`{"jsonrpc":"2.0","id":ID,"error":{"code":-32603,"message":"not today"}}`),
			"not today"},
		// One that did exit still says so.
		"exits": {"read -r line; exit 1", "server exited during the handshake"},
	} {
		e.Put(t, runnertest.Binary(name, shellServer(t, tc.script+"\n")))
		st := e.WaitState(t, name, model.StateError, 10*time.Second)
		if st.Code != string(apierr.ServiceUnavailable) || !strings.Contains(st.Message, tc.want) {
			t.Errorf("%s: status %+v, want %q in the message", name, st, tc.want)
		}
		t.Logf("%s: %s", name, st.Message)
	}
}

// A server that stops reading its input (frozen, or reading no more) while
// the runner writes to it: once the pipe is full a write blocks. The call
// still ends at its timeout, later calls too, and the health pings still
// find the server frozen and restart it.
func TestServerThatStopsReadingDoesNotHoldCalls(t *testing.T) {
	opts := quickOpts()
	opts.CallTimeout = time.Second
	opts.MaxArgsBytes = 1 << 20
	opts.HealthInterval = 200 * time.Millisecond
	opts.HealthTimeout = 200 * time.Millisecond
	opts.HealthFailures = 2
	opts.TickInterval = 20 * time.Millisecond
	opts.StopTimeout = 300 * time.Millisecond
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if err := syscall.Kill(first.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(first.PID, syscall.SIGKILL) }()
	big := `{"message":"` + strings.Repeat("x", 512<<10) + `"}` // past the pipe's 64 KiB
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := call(t, e, "alpha", "echo", big)
			errc <- err
		}()
	}
	for range 2 {
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("a call to a frozen server succeeded")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call blocked writing to a server that reads no more outlived its 1s timeout")
		}
	}
	testkitWaitRestarted(t, e, first.PID)
}

func testkitWaitRestarted(t *testing.T, e *runnertest.Env, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Status("alpha")
		if st.State == model.StateRunning && st.PID != pid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("frozen server not restarted: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A server that writes a message over the line limit (16 MiB) ends its
// connection, and its status says why rather than that its process exited
// (it had not: the runner stopped reading it).
func TestOversizedMessageSaysWhy(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	_, err := call(t, e, "alpha", "large", `{"bytes":17000000}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	st := e.WaitState(t, "alpha", model.StateError, 10*time.Second)
	if !strings.Contains(st.Message, "over the limit") || strings.Contains(st.Message, "exited") {
		t.Fatalf("status message %q, want the line limit named", st.Message)
	}
}

// Helpers a server starts that leave its process group end with it all the
// same, whether the server is stopped or exits: one started under setsid
// (puppeteer starts Chrome detached so), one in a group of its own in the
// server's session, and one double-forked under setsid, whose parent is gone
// (it is init's child). Before, the runner killed the process group only,
// and the three lived on.
// Under the uid switch too: the runner reads the environments of the
// children's uid.
func TestEscapedHelpersEndWithTheServer(t *testing.T) {
	t.Run("runner-uid", func(t *testing.T) { escapedHelpers(t, quickOpts(), testServer) })
	t.Run("child-uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the uid switch needs root (CI runs as root)")
		}
		opts := quickOpts()
		opts.ChildUID = 65534
		escapedHelpers(t, opts, worldReadableServer(t))
	})
	// Where the host refuses PID namespaces the runner finds them through
	// /proc: all but one that also cleared the launch marker.
	t.Run("no-pid-namespace", func(t *testing.T) {
		opts := quickOpts()
		opts.ChildPIDNamespace = "off"
		escapedHelpers(t, opts, testServer)
	})
}

// escapedHelpers: a server starts helpers that leave its process group
// (setsid, setpgid, a double fork) and, in its own PID namespace, one that
// also clears its environment (the launch marker with it); each ends when
// the server is stopped or exits.
func escapedHelpers(t *testing.T, opts runner.Options, server string) {
	e := runnertest.Start(t, opts)
	names := []string{"setsid", "setpgid", "orphan"}
	if e.Runner.PIDNamespaces() {
		names = append(names, "cleared")
	} else if opts.ChildPIDNamespace != "off" {
		t.Log("this host refuses PID namespaces: the helper that clears its marker is not tried")
	}
	for _, how := range []string{"stop", "exit"} {
		t.Run(how, func(t *testing.T) {
			// Open to the child's uid, and named in its environment (the sandbox grants it).
			dir, err := os.MkdirTemp("", "mcpbus-helpers-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			script := filepath.Join(dir, "server.sh")
			if err := os.WriteFile(script, []byte(`#!/bin/sh
`+runnertest.RecordPID("$HELPERS/setsid", "setsid sh -c", "sleep 600")+` </dev/null >/dev/null 2>&1 &
`+runnertest.RecordPID("$HELPERS/setpgid", `perl -e 'setpgrp(0, 0); exec @ARGV' sh -c`, "sleep 601")+` </dev/null >/dev/null 2>&1 &
( `+runnertest.RecordPID("$HELPERS/orphan", "setsid sh -c", "sleep 602")+` </dev/null >/dev/null 2>&1 & )
( env -i HELPERS="$HELPERS" `+runnertest.RecordPID("$HELPERS/cleared", "setsid /bin/sh -c", "sleep 603")+` </dev/null >/dev/null 2>&1 & )
exec "$1"
`), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := runnertest.Binary(how, script, server)
			cfg.EnvVars = map[string]model.EnvVar{"HELPERS": {Value: dir}}
			e.Put(t, cfg)
			st := e.WaitState(t, how, model.StateRunning, 10*time.Second)
			var helpers []int
			defer func() {
				for _, pid := range helpers {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}()
			for _, name := range names {
				pid := waitPIDFile(t, filepath.Join(dir, name))
				if !alive(pid) {
					t.Fatalf("%s helper %d: not running", name, pid)
				}
				if slices.Contains(groupMembers(st.PID), pid) {
					t.Fatalf("%s helper %d is in the server's group", name, pid)
				}
				helpers = append(helpers, pid)
			}
			if how == "stop" {
				if _, err := e.Client.Runtime(context.Background(), "stop", how); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := syscallKill(st.PID); err != nil {
					t.Fatal(err)
				}
				e.WaitState(t, how, model.StateError, 5*time.Second)
			}
			for _, pid := range helpers {
				waitGone(t, pid, 5*time.Second)
			}
		})
	}
}

// waitPIDFile reads the pid a helper wrote (runnertest.RecordPID), waiting
// for it up to 10 s.
func waitPIDFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no pid after 10s (%v)", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stdinCloser is a server (perl, the leader) that relays its input to the
// test server it starts (its first argument) and, on SIGUSR1, closes that
// input but runs on, holding the test server's input open: a server that
// closed its stdin and reads no more.
const stdinCloser = `use IO::Handle;
pipe(my $r, my $w) or die "pipe: $!";
my $pid = fork();
die "fork: $!" unless defined $pid;
if ($pid == 0) { close $w; open(STDIN, "<&", $r) or die; close $r; exec @ARGV or die "exec: $!"; }
close $r;
$w->autoflush(1);
my $closed = 0;
$SIG{USR1} = sub { $closed = 1 };
while (!$closed) {
  my $n = sysread(STDIN, my $buf, 65536);
  next if !defined $n;
  last if $n == 0;
  print $w $buf;
}
close STDIN;
sleep 600;
`

// A server that closes its stdin but keeps running fails at once: the
// write that finds its input closed (EPIPE) ends the connection, so the
// status says so and the restart with backoff runs. Before, calls failed
// but the server stayed "running" until the health pings failed (minutes).
func TestServerThatClosesItsInputFailsAtOnce(t *testing.T) {
	opts := quickOpts()
	opts.RestartBackoff = 2 * time.Second // the error status stays a while
	e := runnertest.Start(t, opts)
	relay := filepath.Join(t.TempDir(), "relay.pl")
	if err := os.WriteFile(relay, []byte(stdinCloser), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Put(t, runnertest.Binary("alpha", "perl", relay, testServer))
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if res, err := call(t, e, "alpha", "echo", `{"message":"up"}`); err != nil || text(t, res) != "up" {
		t.Fatalf("before: %v", err)
	}
	if err := syscall.Kill(first.PID, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// The relay reads on until the signal lands; the first call after it
	// to find the input closed fails.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := call(t, e, "alpha", "echo", `{"message":"x"}`); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still succeed after the server closed its input")
		}
		time.Sleep(50 * time.Millisecond)
	}
	closed := time.Now()
	st := e.WaitState(t, "alpha", model.StateError, 3*time.Second)
	t.Logf("error status %s after the failed call: %s", time.Since(closed).Round(time.Millisecond), st.Message)
	waitGone(t, first.PID, 5*time.Second)
	st = e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if st.PID == first.PID {
		t.Fatalf("not restarted: %+v", st)
	}
}

// A server that answers the handshake with an error and runs on (it does
// not exit when its input closes) is ended at once: its start's error
// status comes promptly. Before, go-sdk's close of the failed session waited
// 5 s for the process to exit before it signalled it.
func TestRefusedHandshakeEndsTheProcessAtOnce(t *testing.T) {
	opts := quickOpts()
	opts.RestartBackoff = time.Minute
	e := runnertest.Start(t, opts)
	dir := t.TempDir() // named in its environment: the sandbox lets it write there
	script := shellServer(t, `read -r p _ < /proc/self/stat; echo "$p" > "$PIDS/pid"
while read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\),.*/\1/p')
  case "$line" in
  *'"method":"server/discover"'*) echo '{"jsonrpc":"2.0","id":'$id',"error":{"code":-32601,"message":"no"}}' ;;
  *'"method":"initialize"'*) echo '{"jsonrpc":"2.0","id":'$id',"error":{"code":-32603,"message":"not today"}}' ;;
  esac
done
exec sleep 600
`)
	cfg := runnertest.Binary("alpha", script)
	cfg.EnvVars = map[string]model.EnvVar{"PIDS": {Value: dir}}
	put := time.Now()
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateError, 10*time.Second)
	took := time.Since(put)
	t.Logf("error status after %s: %s", took.Round(time.Millisecond), st.Message)
	if !strings.Contains(st.Message, "not today") {
		t.Fatalf("status %+v, want the server's refusal", st)
	}
	if took > 3*time.Second {
		t.Fatalf("the start's error took %s, want well under go-sdk's 5 s close delay", took)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid, time.Second)
}

// A stop asked for while a server is stuck in its handshake ends that start
// at once. Before, the stop queued behind the start and waited out the
// whole start timeout (60 s by default), longer than `mcpbus stop` waits
// (35 s), so the operator could not stop a server that never answers.
func TestStopEndsAStartThatHangs(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	hang := runnertest.Binary("hang", testServer, "-hang")
	hang.Runtime.StartTimeout = model.Duration(30 * time.Second)
	e.Put(t, hang)
	e.WaitState(t, "hang", model.StateStarting, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // into the handshake
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	st, err := e.Client.Runtime(ctx, "stop", "hang")
	took := time.Since(began)
	if err != nil {
		t.Fatalf("stop after %s: %v", took, err)
	}
	if took > 5*time.Second {
		t.Fatalf("the stop waited %s behind a start that hangs", took)
	}
	if st.State != model.StateStopped || st.Code != "" {
		t.Fatalf("status after the stop: %+v", st)
	}
	// The interrupted start arms no automatic restart and leaves no error.
	time.Sleep(1500 * time.Millisecond)
	if st := e.Status("hang"); st.State != model.StateStopped || st.Code != "" || !st.RetryAt.IsZero() {
		t.Fatalf("status a while after the stop: %+v", st)
	}
}

// An operator's restart while a server is stuck in its handshake ends that
// start, as a stop does, and starts the server once, answering within the
// caller's bound. Before, the restart queued behind the start for its
// whole start timeout and then ran a start of its own: the caller got
// NETWORK_ERROR at its bound and the restart happened later.
func TestRestartEndsAStartThatHangs(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	dir := t.TempDir() // named in its environment: the sandbox lets it write there
	// The first process never answers initialize; the next ones serve (a
	// copy of the test server beside the script: the sandbox lets the
	// script run what is in its own directory).
	script := shellServer(t, `if [ ! -e "$MARK/first" ]; then : > "$MARK/first"; exec sleep 600; fi
exec "${0%/*}/testserver"
`)
	b, err := os.ReadFile(testServer)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(script), "testserver"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := runnertest.Binary("hang", script)
	cfg.EnvVars = map[string]model.EnvVar{"MARK": {Value: dir}}
	cfg.Runtime.StartTimeout = model.Duration(30 * time.Second)
	e.Put(t, cfg)
	e.WaitState(t, "hang", model.StateStarting, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for { // into the handshake
		if _, err := os.Stat(filepath.Join(dir, "first")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first process never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	st, err := e.Client.Runtime(ctx, "restart", "hang")
	took := time.Since(began)
	if err != nil {
		t.Fatalf("restart after %s: %v", took.Round(time.Millisecond), err)
	}
	if st.State != model.StateRunning || st.Code != "" {
		t.Fatalf("status after the restart (%s): %+v", took.Round(time.Millisecond), st)
	}
	if took > 5*time.Second {
		t.Fatalf("the restart waited %s behind a start that hangs", took)
	}
}
