package natsconn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/mcpbus/mcpbus/libs/access"
)

// Claim takes one identity of a directory of seeds (runner-1.nk … runner-N.nk,
// made by mcpbus identities --per-role --runners N) that no other process
// holds: an exclusive flock on the seed file, held until release or the
// process ends. Replicas started from one image and one mount (docker
// compose --scale) thus each get an identity of their own. The lock needs
// only read access, so the mount may be read-only.
func Claim(dir string) (seedFile string, release func(), err error) {
	// Instance identities are <role>-<i>.nk; a <role>.nk beside them (an
	// older layout) is no instance's.
	files, err := filepath.Glob(filepath.Join(dir, "*-*"+access.SeedExt))
	if err != nil {
		return "", nil, fmt.Errorf("nats identity: %w", err)
	}
	slices.Sort(files)
	for _, f := range files {
		fd, err := os.Open(f)
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = fd.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another instance holds it
			}
			return "", nil, fmt.Errorf("nats identity: locking %s: %w", f, err)
		}
		return f, func() { _ = fd.Close() }, nil
	}
	return "", nil, fmt.Errorf("nats identity: every seed in %s (%d) is held by another instance: make more with mcpbus identities --per-role --runners N", dir, len(files))
}
