package procmem

import (
	"os"
	"runtime"
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

// TestReleaseStartupPages drops this test binary's pages: its file-backed
// resident memory must fall, and the process must go on running.
func TestReleaseStartupPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("MADV_PAGEOUT is Linux's")
	}
	before, after, err := releaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file-backed RSS %d KiB -> %d KiB", before>>10, after>>10)
	if before <= 0 || after >= before/2 {
		t.Fatalf("file-backed RSS %d -> %d bytes: want it at least halved", before, after)
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
