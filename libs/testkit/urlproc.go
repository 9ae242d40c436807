package testkit

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// StartURLServer runs bin with args, a server that prints the URL it serves
// on its first line of stdout (the test server's -http mode), and returns
// that URL and the process id. The process is killed when tb ends.
func StartURLServer(tb testing.TB, bin string, args ...string) (url string, pid int) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("%s printed no URL: %v", bin, err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}
