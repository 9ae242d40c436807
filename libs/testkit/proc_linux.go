package testkit

import "syscall"

// deathSig has the kernel kill the child when the test process dies.
func deathSig() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
