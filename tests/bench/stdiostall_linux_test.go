package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// pipeQueues reports how many bytes wait unread in the pipes that are the
// child pid's stdin and stdout (FIONREAD on this process's end of each): bytes
// waiting at a stall would mean a reader was not woken, not a lost message.
func pipeQueues(pid int) string {
	var b strings.Builder
	ents, _ := os.ReadDir("/proc/self/fd")
	for fd, name := range []string{"stdin", "stdout"} {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		if err != nil {
			fmt.Fprintf(&b, "server %s: %v\n", name, err)
			continue
		}
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != target {
				continue
			}
			n, _ := strconv.Atoi(e.Name())
			var queued int32
			_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(n), syscall.TIOCINQ, uintptr(unsafe.Pointer(&queued)))
			fmt.Fprintf(&b, "server %s (%s): %d bytes unread (errno %d)\n", name, target, queued, errno)
		}
	}
	return b.String()
}
