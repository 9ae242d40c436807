package sandbox

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The raw Landlock system calls, each on the calling thread only. Not
// github.com/landlock-lsm/go-landlock: its syscall package links libcap's
// psx (C code under cgo) into every binary holding the runner, for
// all-thread calls the runner must never make.

func landlockCreateRuleset(attr *unix.LandlockRulesetAttr, size uintptr, flags int) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, uintptr(flags))
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func landlockAddPathBeneath(fd int, attr *unix.LandlockPathBeneathAttr) error {
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(attr)), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// landlockRestrictSelf confines the calling thread (no TSYNC flag: never
// the other threads of the runner).
func landlockRestrictSelf(fd int) error {
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

// rulesetAttrSize is the size of the ruleset attribute up to scoped (ABI
// 6), the last field the runner sets.
const rulesetAttrSize = unsafe.Offsetof(unix.LandlockRulesetAttr{}.Scoped) + 8

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock
// (not built in, or not enabled by the lsm= boot list).
func LandlockABI() int {
	v, err := landlockCreateRuleset(nil, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if err != nil || v < 1 {
		return 0
	}
	return v
}

// Access right sets, by what they are for.
const (
	accessRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// accessFile are the rights that apply to a file (not a directory):
	// a rule on a file may carry no others.
	accessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	accessDev = accessRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// handledAccess are the file system rights abi knows: the ruleset handles
// (denies unless granted) all of them.
func handledAccess(abi int) uint64 {
	h := uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1 - 1) // ABI 1: execute … make_sym
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return h
}

// ruleset builds the Landlock ruleset of plan and returns its fd (the
// caller closes it). From ABI 6 the child may also not signal processes
// outside its domain (the runner) nor reach their abstract unix sockets.
func ruleset(abi int, plan Plan) (int, error) {
	handled := handledAccess(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	size := rulesetAttrSize
	if abi < 6 {
		size = unsafe.Offsetof(attr.Scoped) // before ABI 6 the struct ends there
	}
	fd, err := landlockCreateRuleset(&attr, size, 0)
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
	if err := landlockAddPathBeneath(fd, &unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(f)}); err != nil {
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
	if err := landlockRestrictSelf(fd); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}
