package runner

import "github.com/mcpbus/mcpbus/services/runner/internal/sandbox"

// SetRawCalls turns the raw tools/call path on or off, for tests and
// benchmarks that compare it with go-sdk's path in one process.
func SetRawCalls(on bool) { sdkOnly.Store(!on) }

// WithoutLandlock makes o's runner behave as on a kernel without Landlock
// (tests of the uid switch alone).
func WithoutLandlock(o *Options) { o.childNoLandlock = true }

// LandlockABI is the kernel's Landlock ABI (0: none).
func LandlockABI() int { return sandbox.LandlockABI() }
