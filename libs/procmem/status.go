package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status is a kB field of /proc/<pid>/status (VmRSS, RssAnon, RssFile …) in
// bytes; pid is a number or "self" (Linux).
func Status(pid, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/%s/status: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%s/status %q: %w", pid, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%s/status", field, pid)
}
