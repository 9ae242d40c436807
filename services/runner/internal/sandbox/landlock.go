package sandbox

import (
	"errors"
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock
// (not built in, or not enabled by the lsm= boot list).
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 1 {
		return 0
	}
	return v
}

// Access right sets, by what they are for.
const (
	accessRead = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	// accessFile are the rights that apply to a file (not a directory):
	// a rule on a file may carry no others.
	accessFile = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	accessDev  = accessRead | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// handledAccess are the file system rights abi knows: the ruleset handles
// (denies unless granted) all of them.
func handledAccess(abi int) uint64 {
	h := uint64(ll.AccessFSMakeSym<<1 - 1) // ABI 1: execute … make_sym
	if abi >= 2 {
		h |= ll.AccessFSRefer
	}
	if abi >= 3 {
		h |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		h |= ll.AccessFSIoctlDev
	}
	return h
}

// ruleset builds the Landlock ruleset of plan and returns its fd (the
// caller closes it). From ABI 6 the child may also not signal processes
// outside its domain (the runner) nor reach their abstract unix sockets.
func ruleset(abi int, plan Plan) (int, error) {
	handled := handledAccess(abi)
	attr := ll.RulesetAttr{HandledAccessFS: handled}
	if abi >= 6 {
		attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	for _, g := range plan.Grants {
		if err := addRule(fd, g, handled); err != nil {
			_ = unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

func addRule(fd int, g Grant, handled uint64) error {
	f, err := unix.Open(g.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since the plan was made
		}
		return fmt.Errorf("landlock: open %s: %w", g.Path, err)
	}
	defer unix.Close(f)
	access := uint64(accessRead)
	switch {
	case g.Write:
		access = handled
	case g.Dev:
		access = accessDev
	}
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return fmt.Errorf("landlock: stat %s: %w", g.Path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= accessFile
	}
	access &= handled
	if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: access, ParentFd: f}, 0); err != nil {
		return fmt.Errorf("landlock: rule for %s: %w", g.Path, err)
	}
	return nil
}

// restrictThread confines the calling OS thread (the caller has locked
// its goroutine to it): no new privileges, then the ruleset. Both act on
// this thread only, never on the rest of the runner.
func restrictThread(fd int) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}
