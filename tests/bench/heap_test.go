package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// saveHeap writes mcpbus up's heap profile (its /debug/pprof/heap, no forced
// collection: what it holds now) to <heapDir>/<row>.pb.gz, when the
// benchmark was asked for them (MCPBUS_BENCH_UP_HEAP). Sampled at Go's
// default rate (one per 512 KiB) unless up runs with GODEBUG=memprofilerate=…
// (MCPBUS_BENCH_UP_ENV).
func (e *gwEnv) saveHeap(b *testing.B) {
	b.Helper()
	if e.heapDir == "" || e.pprof == "" {
		return
	}
	name := strings.NewReplacer("/", "_", "=", "-").Replace(b.Name()) + ".pb.gz"
	if err := saveProfile(context.Background(), "http://"+e.pprof+"/debug/pprof/heap", filepath.Join(e.heapDir, name)); err != nil {
		b.Fatalf("mcpbus up's heap profile: %v", err)
	}
}
