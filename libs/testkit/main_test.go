package testkit

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBuildAll: the builds run at once (each waits until all have started),
// every path is stored, a failure is reported with the others' builds still
// cleaned up.
func TestBuildAll(t *testing.T) {
	const n = 3
	var started sync.WaitGroup
	started.Add(n)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	var mu sync.Mutex
	cleaned := map[int]bool{}
	paths := make([]string, n)
	var builds []mainBuild
	for i := range n {
		builds = append(builds, mainBuild{path: &paths[i], fn: func() (string, func(), error) {
			started.Done()
			select {
			case <-allStarted:
			case <-time.After(30 * time.Second):
				return "", nil, fmt.Errorf("build %d: the other builds did not start beside it", i)
			}
			if i == 1 {
				return "", nil, errors.New("build 1 failed")
			}
			return fmt.Sprintf("/bin/%d", i), func() { mu.Lock(); cleaned[i] = true; mu.Unlock() }, nil
		}})
	}
	cleanup, err := buildAll(builds)
	if err == nil || err.Error() != "build 1 failed" {
		t.Fatalf("err = %v, want build 1's failure only", err)
	}
	if paths[0] != "/bin/0" || paths[1] != "" || paths[2] != "/bin/2" {
		t.Errorf("paths %q", paths)
	}
	cleanup()
	if !cleaned[0] || !cleaned[2] || len(cleaned) != 2 {
		t.Errorf("cleaned %v, want builds 0 and 2", cleaned)
	}
}
