//go:build !linux

package toolbuild

import "syscall"

// sysProcAttr: only Linux can tie the child's life to the parent's; elsewhere the test cleanup
// stops it.
func sysProcAttr() *syscall.SysProcAttr { return nil }
