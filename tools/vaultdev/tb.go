package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// fatalError is the panic value of adapterTB.FailNow; startCore recovers it into an error.
type fatalError struct{ msg string }

// adapterTB lets vault's test helpers (which take a testing.TB) run in a plain program: logs go
// to a writer, Fatal unwinds with a fatalError panic, Cleanup functions run at runCleanups.
//
// The embedded interface is nil; it only supplies testing.TB's unexported method. Every exported
// method is implemented below, so it is never called through.
type adapterTB struct {
	testing.TB

	name   string
	out    io.Writer
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	failed   bool
	cleanups []func()
}

var _ testing.TB = (*adapterTB)(nil)

func newTB(name string, out io.Writer) *adapterTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &adapterTB{name: name, out: out, ctx: ctx, cancel: cancel}
}

// runCleanups cancels Context and runs the registered cleanups last-in first-out, like testing.
func (t *adapterTB) runCleanups() {
	t.cancel()
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}

func (t *adapterTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *adapterTB) Log(args ...any) { t.write(fmt.Sprintln(args...)) }

func (t *adapterTB) Logf(format string, args ...any) { t.write(fmt.Sprintf(format, args...) + "\n") }

func (t *adapterTB) write(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.out, s)
}

func (t *adapterTB) Error(args ...any) { t.Log(args...); t.Fail() }

func (t *adapterTB) Errorf(format string, args ...any) { t.Logf(format, args...); t.Fail() }

func (t *adapterTB) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *adapterTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *adapterTB) FailNow() {
	t.Fail()
	panic(fatalError{msg: "test helper failed (see log above)"})
}

func (t *adapterTB) Fatal(args ...any) {
	t.Fail()
	panic(fatalError{msg: fmt.Sprint(args...)})
}

func (t *adapterTB) Fatalf(format string, args ...any) {
	t.Fail()
	panic(fatalError{msg: fmt.Sprintf(format, args...)})
}

// Skip has no meaning here: a helper that wants to skip cannot do its job, so it is fatal.
func (t *adapterTB) Skip(args ...any) { t.Fatal(append([]any{"skip:"}, args...)...) }

func (t *adapterTB) SkipNow() { t.Fatal("skip") }

func (t *adapterTB) Skipf(format string, args ...any) { t.Fatalf("skip: "+format, args...) }

func (t *adapterTB) Skipped() bool { return false }

func (t *adapterTB) Helper() {}

func (t *adapterTB) Name() string { return t.name }

func (t *adapterTB) Attr(key, value string) { t.Logf("attr %s=%s", key, value) }

func (t *adapterTB) Context() context.Context { return t.ctx }

func (t *adapterTB) Output() io.Writer { return t.out }

func (t *adapterTB) TempDir() string {
	dir, err := os.MkdirTemp("", t.name+"-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (t *adapterTB) ArtifactDir() string { return t.TempDir() }

func (t *adapterTB) Setenv(key, value string) {
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		t.Fatalf("Setenv %s: %v", key, err)
	}
	t.Cleanup(func() {
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

func (t *adapterTB) Chdir(dir string) {
	prev, err := os.Getwd()
	if err != nil {
		t.Fatalf("Chdir: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatalf("Chdir %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = os.Chdir(prev) })
}
