// Package toolbuildtest holds the checks that the packages running a tool built by toolbuild
// (vaulttest, jaegertest) make in their own tests: the binary's place in the cache, Stop and Kill
// ending the server, and (on Linux) the server dying with the test process that started it.
package toolbuildtest

import (
	"cmp"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
)

// Child is a server a test started, as these checks see it.
type Child struct {
	// Proc is the server's process.
	Proc *toolbuild.Proc
	// Stop and Kill are the server's own (e.g. Server.Stop and Server.Kill).
	Stop, Kill func()
	// URL answers a GET with 200 OK while the server runs, e.g. a health or query endpoint.
	URL string
}

var client = &http.Client{Timeout: 10 * time.Second}

// StopAndKill checks, in a subtest each, that Stop and Kill end a server from start: within
// stopTimeout, Stop with a clean exit, so that its URL no longer takes connections; and that
// either may be called again. tool names the tool in messages, e.g. "jaeger".
func StopAndKill(t *testing.T, tool string, stopTimeout time.Duration, start func(testing.TB) Child) {
	for _, tc := range []struct {
		name string
		end  func(Child)
	}{
		{"stop", func(c Child) { c.Stop() }},
		{"kill", func(c Child) { c.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t)
			resp, err := client.Get(c.URL)
			if err != nil {
				t.Fatalf("%s before %s: %v", tool, tc.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s before %s: GET %s answered %s", tool, tc.name, c.URL, resp.Status)
			}
			begin := time.Now()
			tc.end(c)
			if d := time.Since(begin); d > stopTimeout {
				t.Fatalf("%s took %s: %s did not exit by itself", tc.name, d, tool)
			}
			select {
			case <-c.Proc.Done():
			default:
				t.Fatalf("process still running after %s", tc.name)
			}
			if err := c.Proc.Err(); tc.name == "stop" && err != nil {
				t.Fatalf("SIGTERM should be a clean exit, got %v; stderr:\n%s", err, c.Proc.Stderr)
			}
			if resp, err := client.Get(c.URL); err == nil {
				resp.Body.Close()
				t.Fatalf("GET %s after %s answered %d, want a connection error", c.URL, tc.name, resp.StatusCode)
			}
			tc.end(c) // idempotent
			c.Stop()
		})
	}
}

// BinaryIsCached checks that binary (a package's Binary, which builds spec within buildTimeout)
// puts the binary at <cache>/mcpbus/<Name>/<hash>/<Binary or Name>, and that further callers, at
// the same time, get the same file without a rebuild.
func BinaryIsCached(t *testing.T, spec toolbuild.Spec, buildTimeout time.Duration, binary func(context.Context) (string, error)) {
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	first, err := binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := toolbuild.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	file := cmp.Or(spec.Binary, spec.Name)
	if want := filepath.Join(cache, "mcpbus", spec.Name); filepath.Dir(filepath.Dir(first)) != want || filepath.Base(first) != file {
		t.Fatalf("binary at %s, want %s/<hash>/%s", first, want, file)
	}

	// Concurrent callers get the same, untouched file.
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = binary(ctx) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != first {
			t.Fatalf("call %d: %q, %v; want %q", i, paths[i], errs[i], first)
		}
	}
	again, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if !again.ModTime().Equal(fi.ModTime()) || !os.SameFile(fi, again) {
		t.Fatal("the cached binary was rebuilt although its sources did not change")
	}
}
