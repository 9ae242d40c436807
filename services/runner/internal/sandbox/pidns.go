package sandbox

import (
	"errors"
	"os"
	"syscall"
)

// A child started in a PID namespace of its own is that namespace's init:
// when it dies, however it dies, the kernel kills every process left in
// the namespace. So nothing a server starts outlives it, not even a process
// that left its session and cleared the launch marker the runner's /proc
// search goes by (services/runner/internal/proctree), and a server cannot
// name, so cannot signal, any process outside its namespace (the runner,
// other servers). The runner keeps the /proc search too: it is all there is
// where the host refuses the namespace.
//
// A runner with root's rights (CAP_SYS_ADMIN) makes the namespace directly;
// any other makes it inside a new user namespace that maps no id. A map
// would be written by the thread that forks the child, and that thread is
// confined by Landlock, which denies it /proc/<child>/uid_map. Unmapped,
// the child keeps the runner's file rights (the kernel checks the real
// ids), sees itself and its files as uid and gid 65534, and its execve drops
// the capabilities the new user namespace gave it (a uid other than 0).
// Container runtimes' default seccomp profiles refuse both to a container
// without CAP_SYS_ADMIN; the probe finds that and the children start as
// before.

// pidNamespace is how children get their PID namespace: the clone flags.
type pidNamespace struct{ flags uintptr }

// newPIDNamespace returns how this process can start children in a PID
// namespace of their own, or why it cannot. switchUID: children change uid
// (--child-uid), which a user namespace that maps no id cannot do; root
// without CAP_SYS_ADMIN gets none either (in a user namespace a root child
// would keep every capability there).
func newPIDNamespace(switchUID bool) (ns pidNamespace, whyNot string) {
	switch caps, err := effectiveCaps(); {
	case err == nil && caps&(1<<capSysAdmin) != 0:
		ns.flags = syscall.CLONE_NEWPID
	case switchUID:
		return ns, "the uid switch (--child-uid) needs CAP_SYS_ADMIN for one"
	case os.Geteuid() == 0:
		return ns, "root without CAP_SYS_ADMIN"
	default:
		ns.flags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
	}
	if !ns.probe() {
		return ns, "the host refuses it"
	}
	return ns, ""
}

// probe starts a child with the namespace, exec'ing a path that does not
// exist: ENOENT comes from the child's execve, so the namespace was made;
// any other error is the host's refusal (EPERM under a seccomp profile,
// ENOSPC when user namespaces are off).
func (ns pidNamespace) probe() bool {
	_, err := syscall.ForkExec("/nonexistent/mcpbus-pid-namespace-probe", nil, &syscall.ProcAttr{Sys: ns.attr(&syscall.SysProcAttr{})})
	return errors.Is(err, syscall.ENOENT)
}

// attr adds the namespace to a child's attributes.
func (ns pidNamespace) attr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Cloneflags |= ns.flags
	return a
}
