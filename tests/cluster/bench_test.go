package cluster

import (
	"testing"
	"time"
)

// BenchmarkFailover: each repetition SIGKILLs the runner owning the most
// servers and measures until all its servers answered from other runners
// (lease TTL 2s); a new runner with the same id then replaces it, untimed.
// It reports the mean as failover-ms (and the worst as max-failover-ms).
// A repetition takes several seconds: run it with a fixed count,
//
//	go test ./cluster/ -run '^$' -bench Failover -benchtime 3x
func BenchmarkFailover(b *testing.B) {
	f := newFixture(b)
	var total, worst time.Duration
	n := 0
	for b.Loop() {
		d, v, _ := f.killAndWait(f.waitAllRunning(10 * time.Second))
		total += d
		worst = max(worst, d)
		n++
		b.StopTimer()
		b.Logf("repetition %d: SIGKILL of %s → its servers answered elsewhere in %s", n, v, d.Round(time.Millisecond))
		f.startRunner(v, f.procs[v].Node)
		f.waitBeats(runnerIDs, 10*time.Second)
		b.StartTimer()
	}
	if n > 0 {
		b.ReportMetric(float64(total.Milliseconds())/float64(n), "failover-ms")
		b.ReportMetric(float64(worst.Milliseconds()), "max-failover-ms")
	}
}
