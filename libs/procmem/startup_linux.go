package procmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseStartupPages asks the kernel to reclaim the pages of this process's
// executable (its code and read-only data; MADV_PAGEOUT, Linux 5.4+). Start-up
// runs every package's initialisation, and each fault maps up to 64 KiB of
// neighbouring code (the kernel's fault-around), so most of a large binary is
// resident though little of it runs afterwards; the pages the process goes on
// using fault back in from the page cache or the file. It returns the
// process's file-backed resident bytes before and after.
func releaseStartupPages() (before, after int64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, 0, fmt.Errorf("finding the executable: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the mappings: %w", err)
	}
	if !mayPageOut(exe) {
		return 0, 0, errNotOwner
	}
	before, err = fileRSS()
	if err != nil {
		return 0, 0, err
	}
	ranges, err := executableRanges(maps, exe)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_PAGEOUT); errno != 0 {
			if errors.Is(errno, unix.EINVAL) {
				return 0, 0, fmt.Errorf("madvise(MADV_PAGEOUT): %w (it needs Linux 5.4 or later)", errno)
			}
			return 0, 0, fmt.Errorf("madvise(MADV_PAGEOUT): %w", errno)
		}
	}
	after, err = fileRSS()
	return before, after, err
}

// mayPageOut tells whether the kernel pages out this file's pages for this
// process: only for a process that owns the file, may write it, or is
// privileged (otherwise MADV_PAGEOUT skips file pages without an error, lest
// it become a side channel on shared files).
func mayPageOut(exe string) bool {
	var st unix.Stat_t
	if unix.Stat(exe, &st) != nil {
		return false
	}
	euid := unix.Geteuid()
	return euid == 0 || int(st.Uid) == euid || unix.Access(exe, unix.W_OK) == nil
}

// executableRanges are the read-only mappings (code, read-only data) of the
// file exe in a /proc/<pid>/maps listing. Writable ones are left alone: their
// touched pages are private copies, not the file's.
func executableRanges(maps []byte, exe string) ([][2]uintptr, error) {
	var out [][2]uintptr
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// address perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || strings.Join(f[5:], " ") != exe || (f[1] != "r-xp" && f[1] != "r--p") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("mapping %q: no address range", f[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err := errors.Join(err1, err2); err != nil || end <= start {
			return nil, fmt.Errorf("mapping %q: bad address range", f[0])
		}
		out = append(out, [2]uintptr{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no read-only mapping of %s in /proc/self/maps", exe)
	}
	return out, nil
}

// fileRSS is this process's RssFile, in bytes.
func fileRSS() (int64, error) { return Status("self", "RssFile") }
