package testkit

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// errs records what StopAll fails a test with, so a failure can be the
// expected outcome.
type errs struct {
	testing.TB
	got []string
}

func (e *errs) Errorf(format string, args ...any) {
	e.got = append(e.got, fmt.Sprintf(format, args...))
}

func TestStopAll(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	start := func(name, onTerm string) *Proc {
		p := StartProc(t, ProcOptions{Name: name, Bin: sh, Args: []string{"-c",
			"trap '" + onTerm + "' TERM; echo ready; while :; do sleep 0.05; done"}})
		p.WaitLog(t, "ready", 10*time.Second)
		return p
	}
	ok, failing := start("ok", "exit 0"), start("failing", "exit 3")
	// Each of two late ones is given up on at the deadline, the second too.
	late1, late2 := start("late1", ""), start("late2", "")
	e := &errs{TB: t}
	took := StopAll(e, []*Proc{ok, failing, late1, late2}, 500*time.Millisecond)
	if took[0] == 0 || took[1] == 0 || took[2] != 0 || took[3] != 0 {
		t.Errorf("took %v, want the first two only", took)
	}
	want := []string{"failing exited 3 after SIGTERM, want 0",
		"late1 did not exit within 500ms of SIGTERM", "late2 did not exit within 500ms of SIGTERM"}
	if strings.Join(e.got, "\n") != strings.Join(want, "\n") {
		t.Errorf("StopAll failed the test with %q, want %q", e.got, want)
	}
	if ok.Err() != nil || !strings.Contains(ok.Output(), "ready") {
		t.Errorf("ok: %v, log %q", ok.Err(), ok.Output())
	}
}

func TestTailLines(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{{"a\nb\nc\n", 2, "b\nc"}, {"a\nb\nc", 5, "a\nb\nc"}, {"a\nb\n", 0, ""}, {"", 3, ""}} {
		if got := TailLines(c.s, c.n); got != c.want {
			t.Errorf("TailLines(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
