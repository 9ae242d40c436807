package vaulttest

import "syscall"

// sysProcAttr makes the kernel kill vaultdev when the test process dies, so a crashed or killed
// test run leaves no Vault behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
