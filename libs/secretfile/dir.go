//go:build unix

package secretfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// PrivateDir makes dir (0700, with its missing parents) or checks the one
// there, for keeping secrets in: a directory that only this user can have
// made or swapped. It refuses a directory another user owns or could
// replace — one whose owner is not this user, that others may write, a
// symlink another user owns, or a path through a directory a user other
// than this one and root owns or that others may write without its sticky
// bit (/tmp's) — since whoever did could read what is put in it or plant
// what is read from it (seeds, stream files, pid files naming processes to
// kill). Write access of a group counts as others' unless the group is this
// user's primary one (user private groups, where umask 002 makes every
// directory group-writable). A directory of this user that others may read
// is made 0700.
func PrivateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return err
	}
	me := os.Geteuid()
	lst, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	if lst.Mode()&fs.ModeSymlink != 0 {
		if uid := ownerOf(lst); uid != me && uid != 0 {
			return fmt.Errorf("%s is a symlink owned by uid %d: another user could point it elsewhere; use a directory of your own", abs, uid)
		}
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", abs)
	}
	if uid := ownerOf(st); uid != me {
		return fmt.Errorf("%s is owned by uid %d, not by this user (uid %d): its owner could read and replace what is kept there; use a directory of your own", abs, uid, me)
	}
	if perm := st.Mode().Perm(); othersWrite(st) {
		return fmt.Errorf("%s is writable by others (mode %04o): they may have planted files in it; check it, then chmod 700 %s", abs, perm, abs)
	} else if perm&0o077 != 0 {
		if err := os.Chmod(real, 0o700); err != nil {
			return fmt.Errorf("restricting %s to its owner: %w", abs, err)
		}
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		if err := safeParent(p, me); err != nil {
			return fmt.Errorf("%s: %w", abs, err)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// safeParent refuses a directory through which another user (not root)
// could swap what it holds: one they own, or may write without the
// sticky bit (which keeps them from renaming others' entries).
func safeParent(p string, me int) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if uid := ownerOf(st); uid != me && uid != 0 {
		return fmt.Errorf("it lies in %s, owned by uid %d, who could replace it", p, uid)
	}
	if othersWrite(st) && st.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("it lies in %s, which others may write (mode %04o, no sticky bit): they could replace it", p, st.Mode().Perm())
	}
	return nil
}

// othersWrite reports whether a user other than the file's owner may write
// it: others, or a group other than this user's primary one.
func othersWrite(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	if perm&0o002 != 0 {
		return true
	}
	if perm&0o020 == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || int(st.Gid) != os.Getegid()
}

// ownerOf is the uid owning fi's file (-1 when unknown).
func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
