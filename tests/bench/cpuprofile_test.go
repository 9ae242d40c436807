package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// cpuSpan is how long one of mcpbus up's CPU profiles runs: short enough
// that the one cut off when the benchmark ends loses little.
const cpuSpan = 10 * time.Second

// profileCPU takes mcpbus up's CPU profile (its /debug/pprof/profile) back
// to back, cpuSpan at a time, into dir/cpu-NNN.pb.gz, from now until the
// benchmark ends (MCPBUS_BENCH_UP_CPU=<dir>); `go tool pprof -proto
// dir/*.pb.gz` merges them into one.
func (e *gwEnv) profileCPU(b *testing.B, dir string) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", e.pprof, int(cpuSpan/time.Second))
		for i := 0; ctx.Err() == nil; i++ {
			err := saveProfile(ctx, url, filepath.Join(dir, fmt.Sprintf("cpu-%03d.pb.gz", i)))
			if err != nil && ctx.Err() == nil {
				b.Logf("mcpbus up's CPU profile %d: %v", i, err)
				return
			}
		}
	}()
	// Cleanups run last first: this one before up is stopped.
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// saveProfile writes what url answers to path; a profile cut off by ctx is
// not kept.
func saveProfile(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, cpuSpan+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
