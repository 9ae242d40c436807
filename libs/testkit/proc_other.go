//go:build !linux

package testkit

import "syscall"

// deathSig: only Linux ties a child's life to its parent's; elsewhere the
// test's cleanup kills it.
func deathSig() *syscall.SysProcAttr { return nil }
