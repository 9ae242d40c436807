package procmem

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestExecutableRanges(t *testing.T) {
	maps := []byte(`00400000-01851000 r-xp 00000000 fe:00 123 /opt/mcp bus/mcpbus
01851000-030b1000 r--p 01451000 fe:00 123 /opt/mcp bus/mcpbus
030b1000-03173000 rw-p 02cb1000 fe:00 123 /opt/mcp bus/mcpbus
03173000-031d0000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r-xp 00000000 fe:00 9 /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
`)
	got, err := executableRanges(maps, "/opt/mcp bus/mcpbus")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0x1851000}, {0x1851000, 0x30b1000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ranges %x, want %x", got, want)
	}
	if _, err := executableRanges(maps, "/other"); err == nil {
		t.Fatal("no mapping of the executable, and no error")
	}
	if _, err := executableRanges([]byte("zz-00 r-xp 0 fe:00 1 /x\n"), "/x"); err == nil {
		t.Fatal("a bad address range, and no error")
	}
}

// TestReleaseStartupPages drops this test binary's pages: the executable's
// resident memory must fall, and the process must go on running. It counts
// the executable's own mappings (smaps), not RssFile, which also holds the
// shared libraries a -race binary links (never paged out: other processes
// map them too). The kernel skips pages it cannot isolate at that moment (a
// busy machine: CI saw 3.1 MB -> 2.4 MB three times running), so a release
// gets three tries to halve them and passes with a fifth gone after the
// third; a release that does nothing fails.
func TestReleaseStartupPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("MADV_PAGEOUT is Linux's")
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	var exeBefore, exeAfter int64
	fifth := false // some try released at least a fifth
	for try := 1; try <= 3; try++ {
		exeBefore = executableRSS(t, exe)
		before, after, err := releaseStartupPages()
		if err != nil {
			t.Fatal(err)
		}
		exeAfter = executableRSS(t, exe)
		t.Logf("try %d: file-backed RSS %d KiB -> %d KiB; the executable's %d KiB -> %d KiB", try, before>>10, after>>10, exeBefore>>10, exeAfter>>10)
		if before <= 0 || after <= 0 {
			t.Fatalf("file-backed RSS %d -> %d bytes: want both measured", before, after)
		}
		if exeBefore > 0 && exeAfter < exeBefore/2 {
			break
		}
		fifth = fifth || (exeBefore > 0 && exeAfter <= exeBefore*4/5)
		if try == 3 && !fifth {
			t.Fatalf("the executable's resident memory %d -> %d bytes: want it at least halved (a fifth gone in one of three tries)", exeBefore, exeAfter)
		}
	}
	// The code it dropped still runs.
	if _, err := os.ReadFile("/proc/self/status"); err != nil {
		t.Fatal(err)
	}
	now, err := fileRSS()
	if err != nil || now <= 0 {
		t.Fatalf("RssFile after: %d, %v", now, err)
	}
}

// executableRSS sums the resident bytes of this process's read-only
// mappings of exe, from /proc/self/smaps.
func executableRSS(t *testing.T, exe string) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && strings.Join(f[5:], " ") == exe && (f[1] == "r-xp" || f[1] == "r--p")
			continue
		}
		if in && len(f) == 3 && f[0] == "Rss:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps %q: %v", line, err)
			}
			total += kb << 10
		}
	}
	return total
}

// TestMayPageOutNotOwner runs this test binary again as user nobody, on a
// root-owned executable it may not write: the kernel would skip its pages,
// and mayPageOut must say so (as root, with the file, it says yes).
func TestMayPageOutNotOwner(t *testing.T) {
	if os.Getenv("PROCMEM_HELPER") == "1" {
		if mayPageOut(os.Args[0]) {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	// t.TempDir's parent is 0700: nobody could not reach a file in it.
	dir, err := os.MkdirTemp("", "procmem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "procmem.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if !mayPageOut(bin) {
		t.Fatal("root may page out any file, but mayPageOut says no")
	}
	cmd := exec.Command(bin, "-test.run", "^TestMayPageOutNotOwner$")
	cmd.Env = append(os.Environ(), "PROCMEM_HELPER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody, on a root-owned executable: %v (exit 3: mayPageOut said yes)\n%s", err, out)
	}
}
