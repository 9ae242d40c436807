package vaulttest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const helperEnv = "VAULTTEST_DEATH_HELPER"

// TestDeathHelper is not a test: TestChildDiesWithTestProcess runs this test binary with it to get
// a test process that starts vaultdev and is then killed.
func TestDeathHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestChildDiesWithTestProcess")
	}
	s := Start(t)
	fmt.Printf("VAULTDEV_PID=%d\n", s.cmd.Process.Pid)
	time.Sleep(2 * time.Minute) // the parent kills us long before
}

func TestChildDiesWithTestProcess(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^TestDeathHelper$", "-test.count=1")
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

	pidc := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VAULTDEV_PID="); ok {
				if pid, err := strconv.Atoi(v); err == nil {
					pidc <- pid
				}
			}
		}
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(BuildTimeout + StartTimeout):
		t.Fatal("helper never reported a vaultdev pid")
	}
	if !alive(pid) {
		t.Fatalf("vaultdev %d not running while the helper lives", pid)
	}

	// SIGKILL: no cleanup of the helper runs, only the kernel's parent-death signal can help.
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("vaultdev %d still running 10s after its test process was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
