package testkit

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// BuildFunc builds a binary for a package's tests and returns its path and a
// cleanup that removes it (runnertest.BuildRunner is one).
type BuildFunc func() (path string, cleanup func(), err error)

// MainOption adds a step to Main.
type MainOption func(*mainSetup)

type mainSetup struct {
	builds []mainBuild
}

type mainBuild struct {
	path *string
	fn   BuildFunc
}

// WithBinary makes Main also run fn, beside the test server's build (the
// builds run at once) and before any test, and store the binary's path in
// *path. Main removes it once the tests have run.
func WithBinary(path *string, fn BuildFunc) MainOption {
	return func(s *mainSetup) { s.builds = append(s.builds, mainBuild{path: path, fn: fn}) }
}

// Main is the TestMain of packages that run the go-sdk test MCP server
// (libs/testmcp): it builds the mcpbus-testserver command into a temporary
// directory and stores its path in *testServer, runs the builds opts add,
// runs the tests, removes every build and exits with the tests' code. A build
// that fails is reported on stderr and ends the process with code 1 before
// any test runs.
//
//	var testServer string
//
//	func TestMain(m *testing.M) { testkit.Main(m, &testServer) }
func Main(m *testing.M, testServer *string, opts ...MainOption) {
	os.Exit(runMain(m, testServer, opts))
}

func runMain(m *testing.M, testServer *string, opts []MainOption) int {
	s := mainSetup{builds: []mainBuild{{path: testServer, fn: BuildTestServer}}}
	for _, o := range opts {
		o(&s)
	}
	cleanup, err := buildAll(s.builds)
	defer cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// buildAll runs the builds at once (each is mostly a link, one core's work,
// and a package's tests wait for all of them) and stores each path. The
// cleanup removes every build that succeeded; err joins the failures.
func buildAll(builds []mainBuild) (cleanup func(), err error) {
	cleanups := make([]func(), len(builds))
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		wg.Go(func() {
			var path string
			path, cleanups[i], errs[i] = b.fn()
			if errs[i] == nil {
				*b.path = path
			}
		})
	}
	wg.Wait()
	return func() {
		for _, c := range cleanups {
			if c != nil {
				c()
			}
		}
	}, errors.Join(errs...)
}

// BuildTestServer builds the go-sdk test server (libs/testmcp) into a new
// temporary directory and returns its path and a cleanup that removes the
// directory. Main calls it; a TestMain with steps of its own can too.
func BuildTestServer() (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "mcpbus-testserver")
	if err != nil {
		return "", nil, err
	}
	path, err = testmcp.Build(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { _ = os.RemoveAll(dir) }, nil
}
