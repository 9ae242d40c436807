package toolbuildtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
)

// helperEnv marks the helper process ChildDiesWithTestProcess runs, and pidPrefix starts the
// line in which the helper reports the tool's pid.
const (
	helperEnv = "TOOLBUILDTEST_DEATH_HELPER"
	pidPrefix = "TOOLBUILDTEST_CHILD_PID="
)

// ChildDiesWithTestProcess checks that a server from start dies with the test process that
// started it. It runs t's own test again in a helper process (this test binary, with helperEnv
// set), which starts the server, reports its pid and waits; then it kills the helper with SIGKILL,
// so that no cleanup runs and only the kernel's parent-death signal can end the server. wait
// bounds the helper's build and start; tool names the tool in messages, e.g. "jaeger".
func ChildDiesWithTestProcess(t *testing.T, tool string, wait time.Duration, start func(testing.TB) Child) {
	if os.Getenv(helperEnv) == "1" {
		c := start(t)
		fmt.Printf("%s%d\n", pidPrefix, c.Proc.Pid())
		time.Sleep(2 * time.Minute) // the parent kills us long before
		return
	}

	helper := exec.Command(os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1")
	helper.Env = append(os.Environ(), helperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	// The helper's other output (its test log, with the reason it failed) is kept to show.
	output := &toolbuild.TailBuffer{Max: 16 << 10}
	pidc := make(chan int, 1) // closed once the helper's output ends
	go func() {
		defer close(pidc)
		sent := false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), pidPrefix); ok && !sent {
				if pid, err := strconv.Atoi(v); err == nil {
					pidc <- pid
					sent = true
					continue
				}
			}
			fmt.Fprintln(output, sc.Text())
		}
	}()
	var pid int
	select {
	case p, ok := <-pidc:
		if !ok {
			t.Fatalf("helper ended without reporting a %s pid; its output:\n%s", tool, output)
		}
		pid = p
	case <-time.After(wait):
		t.Fatalf("helper never reported a %s pid; its output so far:\n%s", tool, output)
	}
	if !alive(pid) {
		t.Fatalf("%s %d not running while the helper lives", tool, pid)
	}

	// SIGKILL: no cleanup of the helper runs, only the kernel's parent-death signal can help.
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %d still running 10s after its test process was killed", tool, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runPattern is a -test.run pattern that selects the test (or subtest) named name alone.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// alive reports whether pid is a running (not zombie) process. A dead orphan may stay a zombie
// when the container's init does not reap, which counts as dead.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}
