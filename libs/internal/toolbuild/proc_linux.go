package toolbuild

import "syscall"

// sysProcAttr makes the kernel kill the child when the test process dies, so a crashed or killed
// test run leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
