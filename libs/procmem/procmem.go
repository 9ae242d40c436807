// Package procmem is what a long-running mcpbus process does about its own
// memory: once started, it drops the pages of its executable that only
// start-up touched; after a load, once quiet, it returns the free heap to the
// OS instead of holding the load's heap goal for minutes.
package procmem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpbus/mcpbus/libs/settings"
)

// DefaultIdleRelease is how long a process waits, quiet after a load, before
// it returns its free memory to the OS. It is longer than JetStream's
// file-store cache expiry (10 s), so the cache of a stream's last block is
// free by then.
const DefaultIdleRelease = 15 * time.Second

// errNotOwner: the kernel pages out an executable's pages only for a process
// that owns the file or may write it (the container images run as a user that
// does neither, so there the pages stay).
var errNotOwner = errors.New("the kernel drops an executable's pages only for a process that owns the file or may write it")

// Options are the memory settings of a process (mcpbus up, mcpbus serve).
type Options struct {
	// IdleRelease: quiet this long after a load, return the free heap to the
	// OS (0: never; leave it to the Go runtime).
	IdleRelease time.Duration
	// StartupPages: once ready, drop the executable's pages from memory so
	// only those the process goes on using come back (Linux).
	StartupPages bool
}

// Register adds --idle-release and --release-startup-pages.
func (o *Options) Register(s *settings.Set) {
	s.Duration(&o.IdleRelease, "idle-release", "", DefaultIdleRelease,
		"return free memory to the OS once the process has been quiet this long after a load (0: leave it to the Go runtime, which keeps the load's heap goal until its next collection)")
	s.Bool(&o.StartupPages, "release-startup-pages", "", true,
		"once ready, drop the pages of the executable that only start-up used (Linux; those still in use come back on their next use; only when the process owns its executable, may write it, or runs as root)")
}

// Validate checks the settings.
func (o Options) Validate() error {
	if o.IdleRelease < 0 {
		return fmt.Errorf("--idle-release %s: must not be negative (0 turns it off)", o.IdleRelease)
	}
	return nil
}

// Start begins the idle release (until ctx ends); call Ready once the
// process serves.
func (o Options) Start(ctx context.Context, log *slog.Logger) {
	startIdleRelease(ctx, o.IdleRelease, log)
}

// Ready drops the start-up pages when StartupPages is set.
func (o Options) Ready(log *slog.Logger) {
	if !o.StartupPages {
		return
	}
	before, after, err := releaseStartupPages()
	if errors.Is(err, errNotOwner) {
		log.Debug("start-up pages kept", "reason", err.Error())
		return
	}
	if err != nil {
		log.Warn("could not release the start-up pages of the executable", "error", err)
		return
	}
	if before == 0 {
		return // not on Linux
	}
	log.Debug("released the start-up pages of the executable", "file_rss_before", before, "file_rss_after", after)
}
