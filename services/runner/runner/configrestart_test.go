package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// configCutMessage is what a call in flight when a config change restarts
// its server is told (docs/servers.md, Lifecycle).
const configCutMessage = "was restarted for a config change during the call"

// A config change that restarts a running server does not fail what meets
// the restart with misleading errors: calls that arrive meanwhile wait for
// the new session (no "server alpha is running", no NOT_FOUND for a tool
// that exists), the catalog stays listed throughout, every task completes
// (an idempotent one cut mid-call runs again on the new session), and a call
// in flight at the stop ends with SERVICE_UNAVAILABLE saying the server was
// restarted for a config change. A last change that also filters a tool out
// replaces the catalog once the new server has listed its tools.
func TestConfigRestartUnderLoad(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, runs := taskServer(t, "alpha")
	cfg.EnvVars["MODE"] = model.EnvVar{Value: "0"}
	cfg = e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The catalog must never be deleted: a gateway would drop the tools.
	watcher, err := e.Assets.Tools.Watch(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watcher.Stop() }()
	var catalogDeletes, catalogPuts int
	var catMu sync.Mutex
	go func() {
		for entry := range watcher.Updates() {
			if entry == nil {
				continue
			}
			catMu.Lock()
			if entry.Operation() != jetstream.KeyValuePut {
				catalogDeletes++
			} else {
				catalogPuts++
			}
			catMu.Unlock()
		}
	}()

	var mu sync.Mutex
	var callErrs []error
	var tasks []string
	calls, settled := 0, 0
	var paused atomic.Bool
	var wg sync.WaitGroup
	load, stopLoad := context.WithCancel(ctx)
	for i := range 4 {
		wg.Go(func() {
			for n := 0; load.Err() == nil; n++ {
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				msg := fmt.Sprintf("%d-%d", i, n)
				res, err := e.Client.Call(cctx, "alpha", "echo", json.RawMessage(fmt.Sprintf(`{"message":%q}`, msg)), nil)
				ccancel()
				mu.Lock()
				calls++
				switch {
				case err != nil:
					callErrs = append(callErrs, err)
				case text(t, res) != msg:
					callErrs = append(callErrs, fmt.Errorf("echo %s answered %s", msg, res))
				}
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for load.Err() == nil {
			if paused.Load() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			task, err := e.Client.CreateTask(ctx, "alpha", "sleep_idempotent", json.RawMessage(`{"ms":10}`))
			mu.Lock()
			if err != nil {
				callErrs = append(callErrs, fmt.Errorf("task.create: %w", err))
			} else {
				tasks = append(tasks, task.ID)
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})

	const rounds = 3
	for round := 1; round <= rounds; round++ {
		// In flight at the stop: a call of a tool not marked idempotent
		// and a task of one that is. The short tasks pause meanwhile, so
		// that the task's run is told apart in the run file.
		paused.Store(true)
		time.Sleep(50 * time.Millisecond) // a create under way lands first
		mu.Lock()
		pending := slices.Clone(tasks[settled:])
		settled = len(tasks)
		mu.Unlock()
		for _, id := range pending {
			taskResult(t, e.Client, ctx, id, 20*time.Second)
		}
		before := runCount(runs)
		cut := make(chan error, 1)
		go func() {
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			defer ccancel()
			_, err := e.Client.Call(cctx, "alpha", "sleep", json.RawMessage(`{"ms":20000}`), nil)
			cut <- err
		}()
		long, err := e.Client.CreateTask(ctx, "alpha", "sleep_idempotent", json.RawMessage(`{"ms":1500}`))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		tasks = append(tasks, long.ID)
		mu.Unlock()
		waitRun(t, runs, before, "sleep")
		waitRun(t, runs, before, "sleep_idempotent")
		paused.Store(false)

		cfg.EnvVars["MODE"] = model.EnvVar{Value: fmt.Sprint(round)}
		if round == rounds {
			cfg.Tools.Deny = []string{"sleep"}
		}
		cfg = e.Put(t, cfg)
		select {
		case err := <-cut:
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.ServiceUnavailable || !strings.Contains(ae.Message, configCutMessage) {
				t.Errorf("round %d: the call in flight at the restart got %v, want SERVICE_UNAVAILABLE saying the server %s", round, err, configCutMessage)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: the call in flight at the restart did not end", round)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			now := e.Status("alpha")
			if now.State == model.StateRunning && now.PID != st.PID {
				st = now
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: not restarted with the new config: %+v", round, now)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // some calls on the new session
	}
	stopLoad()
	wg.Wait()

	if res, err := call(t, e, "alpha", "env", `{"name":"MODE"}`); err != nil || text(t, res) != fmt.Sprint(rounds) {
		t.Fatalf("MODE after the updates: %s %v", res, err)
	}
	for _, err := range callErrs {
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == apierr.ServiceUnavailable && strings.Contains(ae.Message, configCutMessage) {
			continue // cut in flight, as documented
		}
		t.Errorf("a call during the restarts failed: %v", err)
	}
	t.Logf("%d calls, %d errors, %d tasks", calls, len(callErrs), len(tasks))
	for _, id := range tasks {
		task := taskResult(t, e.Client, ctx, id, 20*time.Second)
		if task.State != model.TaskCompleted {
			t.Errorf("task %s ended %s: %+v", id, task.State, task.Error)
		}
	}
	// The last change filtered sleep out: the catalog says so once the new
	// server has listed its tools.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cat, ok := catalogOf(t, e, "alpha")
		if ok && cat["sleep_idempotent"] && !cat["sleep"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog after the filtering change: %v", cat)
		}
		time.Sleep(20 * time.Millisecond)
	}
	catMu.Lock()
	defer catMu.Unlock()
	if catalogDeletes != 0 {
		t.Fatalf("the catalog was deleted %d times during config restarts (%d writes)", catalogDeletes, catalogPuts)
	}
}

// waitRun waits until the run file has a run of tool past its first
// before lines (lines are "<tool> <pid>").
func waitRun(t *testing.T, runs string, before int, tool string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(runs)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i := before; i < len(lines); i++ {
			if strings.HasPrefix(lines[i], tool+" ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run of %s began: %s", tool, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// catalogOf is the set of tools (by their own names) of server's catalog
// in KV mcp_tools, and whether it has one.
func catalogOf(t *testing.T, e *runnertest.Env, server string) (map[string]bool, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entry, err := e.Assets.Tools.Get(ctx, server)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var cat model.Catalog
	if err := json.Unmarshal(entry.Value(), &cat); err != nil {
		t.Fatal(err)
	}
	tools := map[string]bool{}
	for _, tl := range cat.Tools {
		tools[tl.Tool] = true
	}
	return tools, true
}

// A restart on a changed config that fails answers the calls that waited
// for it as a crash does: SERVICE_UNAVAILABLE with the time of the next
// try, not a second spawn per waiting call nor a timeout; the server is in
// error with retry_at and its catalog goes, as after a crash.
func TestFailedConfigRestartAnswersWaitingCalls(t *testing.T) {
	opts := quickOpts()
	opts.RestartBackoff = time.Minute // no automatic retry within the test
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	cfg = e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	// The new config's server blocks at start reading a FIFO, then fails.
	fifo := filepath.Join(t.TempDir(), "hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(t.TempDir(), "starts")
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_TRY_READ": {Value: fifo}, "TESTMCP_FAIL_START": {Value: "1"},
		"TESTMCP_START_LOG": {Value: starts}}
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateStarting, 10*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, e, "alpha", "echo", `{"message":"x"}`)
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // the call waits for the start
	select {
	case err := <-errc:
		t.Fatalf("a call during the restart did not wait for it: %v", err)
	default:
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close() // the server reads its end, then fails its start
	select {
	case err := <-errc:
		ae := wantCode(t, err, apierr.ServiceUnavailable)
		if !strings.Contains(ae.Message, "retry after") {
			t.Fatalf("the waiting call got %q, want a retry hint", ae.Message)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting call did not end")
	}
	st := e.Status("alpha")
	if st.State != model.StateError || st.RetryAt.IsZero() {
		t.Fatalf("status after the failed restart: %+v", st)
	}
	if b, _ := os.ReadFile(starts); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the new config's server started %d times before its retry, want once: %q", strings.Count(string(b), "\n"), b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := catalogOf(t, e, "alpha"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the catalog stayed after the failed restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartCutMessage is what a call in flight when `mcpbus restart` (or a
// credential change, or the end of an OAuth flow) restarts its server is
// told (docs/servers.md, Lifecycle).
const restartCutMessage = "was restarted on request during the call"

// The restart verb (`mcpbus restart`, credential changes, the end of an
// upstream OAuth flow) restarts a running server in place, as a config
// change does: calls in a loop across two restarts see no "is stopped" nor
// NOT_FOUND, the catalog is never deleted, and a call in flight at the stop
// ends with SERVICE_UNAVAILABLE saying the server was restarted on request.
func TestManualRestartUnderLoad(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, runs := taskServer(t, "alpha")
	e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher, err := e.Assets.Tools.Watch(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watcher.Stop() }()
	var catalogDeletes atomic.Int32
	go func() {
		for entry := range watcher.Updates() {
			if entry != nil && entry.Operation() != jetstream.KeyValuePut {
				catalogDeletes.Add(1)
			}
		}
	}()

	var mu sync.Mutex
	var callErrs []error
	calls := 0
	var wg sync.WaitGroup
	load, stopLoad := context.WithCancel(ctx)
	for i := range 4 {
		wg.Go(func() {
			for n := 0; load.Err() == nil; n++ {
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				msg := fmt.Sprintf("%d-%d", i, n)
				res, err := e.Client.Call(cctx, "alpha", "echo", json.RawMessage(fmt.Sprintf(`{"message":%q}`, msg)), nil)
				ccancel()
				mu.Lock()
				calls++
				switch {
				case err != nil:
					callErrs = append(callErrs, err)
				case text(t, res) != msg:
					callErrs = append(callErrs, fmt.Errorf("echo %s answered %s", msg, res))
				}
				mu.Unlock()
			}
		})
	}
	for round := 1; round <= 2; round++ {
		before := runCount(runs)
		cut := make(chan error, 1)
		go func() {
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			defer ccancel()
			_, err := e.Client.Call(cctx, "alpha", "sleep", json.RawMessage(`{"ms":20000}`), nil)
			cut <- err
		}()
		waitRun(t, runs, before, "sleep")
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		now, err := e.Client.Runtime(rctx, "restart", "alpha")
		rcancel()
		if err != nil {
			t.Fatalf("round %d: restart: %v", round, err)
		}
		if now.State != model.StateRunning || now.PID == st.PID {
			t.Fatalf("round %d: after the restart: %+v (pid before %d)", round, now, st.PID)
		}
		st = now
		select {
		case err := <-cut:
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.ServiceUnavailable || !strings.Contains(ae.Message, restartCutMessage) {
				t.Errorf("round %d: the call in flight at the restart got %v, want SERVICE_UNAVAILABLE saying the server %s", round, err, restartCutMessage)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: the call in flight at the restart did not end", round)
		}
		time.Sleep(200 * time.Millisecond) // some calls on the new session
	}
	stopLoad()
	wg.Wait()
	for _, err := range callErrs {
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == apierr.ServiceUnavailable && strings.Contains(ae.Message, restartCutMessage) {
			continue // cut in flight, as documented
		}
		t.Errorf("a call during the restarts failed: %v", err)
	}
	t.Logf("%d calls, %d errors", calls, len(callErrs))
	if _, ok := catalogOf(t, e, "alpha"); !ok {
		t.Fatal("no catalog after the restarts")
	}
	if n := catalogDeletes.Load(); n != 0 {
		t.Fatalf("the catalog was deleted %d times during manual restarts", n)
	}
}

// A server in error whose automatic restarts are spent is started again by
// the restart verb, with a fresh series of retries.
func TestManualRestartStartsServerThatGaveUp(t *testing.T) {
	opts := quickOpts()
	opts.RestartBackoff = 50 * time.Millisecond
	e := runnertest.Start(t, opts)
	// The server fails at start until the file ok appears in dir (passed as
	// an argument, which the sandbox grants).
	dir := t.TempDir()
	gated := filepath.Join(t.TempDir(), "gated")
	if err := os.WriteFile(gated, []byte("#!/bin/sh\n[ -f \"$1/ok\" ] || exit 2\nshift\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := runnertest.Binary("gated", gated, dir, testServer)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := e.Status("gated")
		if st.State == model.StateError && st.RetryAt.IsZero() && strings.Contains(st.Message, "gave up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing server did not give up: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.Client.Runtime(ctx, "restart", "gated")
	if err != nil {
		t.Fatalf("restart of a server that gave up: %v", err)
	}
	if st.State != model.StateRunning {
		t.Fatalf("after the restart: %+v", st)
	}
	if res, err := call(t, e, "gated", "echo", `{"message":"back"}`); err != nil || text(t, res) != "back" {
		t.Fatalf("call after the restart: %s %v", res, err)
	}
}
