// Package threadcpu reads a thread's CPU time for benchmarks that time
// their own work on a shared machine. A leaf package: the packages it
// measures (the secret scanner) may be below everything testkit imports.
package threadcpu

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is the calling thread's CPU time (lock the goroutine to its
// thread around what it times). It reads CLOCK_THREAD_CPUTIME_ID, which is
// exact: getrusage(RUSAGE_THREAD) is only brought up to date at the
// scheduler's ticks (4 ms), so an interval shorter than that reads 0 or a
// whole tick of work done before it.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic("threadcpu: clock_gettime(CLOCK_THREAD_CPUTIME_ID): " + err.Error())
	}
	return time.Duration(ts.Nano())
}
