package secretscan_test

import (
	"runtime"
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// keep holds the last scanner built.
var keep *secretscan.Scanner

// heapAfterGC is the heap in use once garbage is collected.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkScannerHeap reports the heap a built scanner holds (HeapInuse
// after GC, with and without it) and what building one costs.
func BenchmarkScannerHeap(b *testing.B) {
	var held uint64
	for b.Loop() {
		before := heapAfterGC()
		s, err := secretscan.New()
		if err != nil {
			b.Fatal(err)
		}
		after := heapAfterGC()
		keep = s // held until the next build (the heap profile sees it)
		held = after - min(before, after)
	}
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
}
