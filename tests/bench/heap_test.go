package bench

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.pprof+"/debug/pprof/heap", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("mcpbus up's heap profile: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("mcpbus up's heap profile: %s", resp.Status)
	}
	name := strings.NewReplacer("/", "_", "=", "-").Replace(b.Name()) + ".pb.gz"
	f, err := os.Create(filepath.Join(e.heapDir, name))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Fatal(err)
	}
}
