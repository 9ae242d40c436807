package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// notDumpable keeps a same-uid child out of the runner through /proc and
// ptrace: its environment (/proc/<runner>/environ and each thread's: what
// the runner was started with, which ChildEnv never hands on) and its
// memory. Landlock's path rules grant /proc, and a confined child read the
// runner's environment there (TestChildReadsNoRunnerEnviron). A
// non-dumpable process is reachable only with CAP_SYS_PTRACE, which a
// non-root child has not; a child running as root (a root runner without
// --child-uid) reads it regardless.
func notDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	return nil
}
