package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// lifecycleOpts shortens every lifecycle period so the rules show within a test.
func lifecycleOpts() runner.Options {
	o := quickOpts()
	o.TickInterval = 20 * time.Millisecond
	o.RestartBackoff = 200 * time.Millisecond
	o.RestartBackoffMax = 2 * time.Second
	o.HealthInterval = time.Hour
	return o
}

// Idle stop, then a lazy start on the next call; the tools stay listed while idle.
func TestIdleStopAndLazyRestart(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.IdleTimeout = model.Duration(300 * time.Millisecond)
	e.Put(t, cfg)
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second) // learns its tools once
	idle := e.WaitState(t, "alpha", model.StateIdle, 3*time.Second)
	waitGone(t, first.PID, 3*time.Second)
	if len(idle.Tools) == 0 {
		t.Fatal("an idle server must keep its tools in its status")
	}
	tools, err := e.Client.ListTools(context.Background(), "alpha")
	if err != nil || len(tools) == 0 {
		t.Fatalf("an idle server's tools must stay listed: %d %v", len(tools), err)
	}
	// An unknown tool of an idle server is NOT_FOUND without starting it.
	_, err = call(t, e, "alpha", "nosuch", `{}`)
	wantCode(t, err, apierr.NotFound)
	if st := e.Status("alpha"); st.State != model.StateIdle {
		t.Fatalf("unknown tool started the server: %s", st.State)
	}
	begin := time.Now()
	res, err := call(t, e, "alpha", "echo", `{"message":"wake up"}`)
	if err != nil || text(t, res) != "wake up" {
		t.Fatalf("lazy start call: %s %v", res, err)
	}
	t.Logf("cold start to first result: %s", time.Since(begin))
	second := e.WaitState(t, "alpha", model.StateRunning, time.Second)
	if second.PID == first.PID || second.PID == 0 {
		t.Fatalf("lazy start reused pid %d", second.PID)
	}
	// And idle again.
	e.WaitState(t, "alpha", model.StateIdle, 3*time.Second)
}

// A restarted runner that finds the catalog of an unchanged config does not
// start the server at all until a call comes.
func TestLazyServerStaysIdleAcrossRunnerRestart(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.StopRunner(t)
	e.StartRunner(t, lifecycleOpts())
	st := e.WaitState(t, "alpha", model.StateIdle, 5*time.Second)
	if st.PID != 0 || len(st.Tools) == 0 {
		t.Fatalf("idle after takeover: %+v", st)
	}
	if res, err := call(t, e, "alpha", "echo", `{"message":"lazy"}`); err != nil || text(t, res) != "lazy" {
		t.Fatalf("call after takeover: %v", err)
	}
}

func TestEagerServerStartsAtOnce(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.StopRunner(t)
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	e.StartRunner(t, lifecycleOpts())
	if st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second); st.PID == 0 {
		t.Fatal("eager server has no process")
	}
}

// A crash is followed by an automatic restart after the backoff.
func TestCrashRestartsAutomatically(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	crashed := time.Now()
	_, err := call(t, e, "alpha", "crash", `{}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	e.WaitState(t, "alpha", model.StateError, 2*time.Second)
	// The error says when the scheduled restart comes.
	var st model.Status
	for wait := time.Now().Add(time.Second); ; {
		st = e.Status("alpha")
		if !st.RetryAt.IsZero() || st.State == model.StateRunning {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("a crashed server should say when it restarts: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st = e.Status("alpha")
		if st.State == model.StateRunning && st.PID != first.PID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(crashed); d < 200*time.Millisecond {
		t.Fatalf("restarted after %s, before the backoff", d)
	}
	if st.Restarts != 1 {
		t.Fatalf("restarts = %d, want 1", st.Restarts)
	}
	if res, err := call(t, e, "alpha", "echo", `{"message":"back"}`); err != nil || text(t, res) != "back" {
		t.Fatalf("after restart: %v", err)
	}
}

// Every write of a crashed server's status until its restart carries
// retry_at, the call counters' refresh during the backoff too: it wrote the
// error without retry_at (scheduleRestart cleared it after publishing), and
// gateways then stopped serving the crashed server's kept tools for the rest
// of the backoff (TestCrashedServerKeepsTools: "unknown tool").
func TestRetryAtStaysUntilRestart(t *testing.T) {
	opts := lifecycleOpts()
	opts.RestartBackoff = 3 * time.Second
	opts.RestartBackoffMax = 3 * time.Second
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	// The first call's counters are written at the next tick; the next
	// write of them waits 2 s (statusRefresh), within the 3 s backoff.
	if _, err := call(t, e, "alpha", "echo", `{"message":"hi"}`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); e.Status("alpha").Calls < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call counter was not written")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := e.Assets.Status.Watch(ctx, "alpha", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	_, err = call(t, e, "alpha", "crash", `{}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	var retryAt time.Time
	later := 0 // error writes after the one that set retry_at
	for {
		var en jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			t.Fatalf("no restart seen (retry_at %s, %d later writes)", retryAt, later)
		case en = <-w.Updates():
		}
		if en == nil || en.Operation() != jetstream.KeyValuePut {
			continue
		}
		var st model.Status
		if err := json.Unmarshal(en.Value(), &st); err != nil {
			t.Fatal(err)
		}
		switch {
		case st.State == model.StateError && retryAt.IsZero():
			retryAt = st.RetryAt // in the crash's error itself (TestErrorSaysWhetherARestartComes)
			if !retryAt.IsZero() {
				// A call during the backoff is told when to retry.
				_, err := call(t, e, "alpha", "echo", `{"message":"hi"}`)
				wantCode(t, err, apierr.ServiceUnavailable)
				if msg := apierr.From(err).Message; !strings.Contains(msg, "restarting after a crash") || !strings.Contains(msg, "retry after") {
					t.Fatalf("a call during the backoff: %q, want it told to retry after the restart", msg)
				}
			}
		case st.State == model.StateError:
			later++
			if !st.RetryAt.Equal(retryAt) {
				t.Fatalf("a status written during the backoff lost retry_at %s: %+v", retryAt, st)
			}
		case st.State == model.StateStarting:
			if retryAt.IsZero() || later == 0 || st.Calls < 2 {
				t.Fatalf("want error with retry_at, the counters' refresh, then starting; got retry_at %s, %d later writes, %+v", retryAt, later, st)
			}
			return
		}
	}
}

// A server that exits at start is tried MaxRestarts times with a doubling
// backoff, then stays in error until a manual restart.
func TestCrashLoopGivesUp(t *testing.T) {
	opts := lifecycleOpts()
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("loop", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_FAIL_START": {Value: "boom"}}
	cfg.Runtime.Eager = true
	e.Put(t, cfg)

	// Follow the status events: one "starting" per attempt.
	var mu sync.Mutex
	var starts []time.Time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = e.Client.FollowEvents(ctx, e.Client.Subjects().Event("status", "loop"), true, func(ev client.Event) {
			var st model.Status
			if json.Unmarshal(ev.Data, &st) == nil && st.State == model.StateStarting {
				mu.Lock()
				starts = append(starts, ev.Time)
				mu.Unlock()
			}
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	var st model.Status
	for {
		st = e.Status("loop")
		if st.State == model.StateError && st.RetryAt.IsZero() && st.Restarts >= 2 {
			break // gave up
		}
		if time.Now().After(deadline) {
			t.Fatalf("crash loop did not settle: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The failed start is the first of the default 3 tries (issue 27: it
	// was not counted, and the server was spawned 4 times).
	if st.Restarts != 2 {
		t.Fatalf("restarts = %d, want 2 (3 tries, the default max, the start included)", st.Restarts)
	}
	time.Sleep(1500 * time.Millisecond) // no further attempt may come
	mu.Lock()
	got := append([]time.Time(nil), starts...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d start attempts, want 1 + 2 restarts", len(got))
	}
	// Backoff 200, 400 ms: each gap at least the backoff, and doubling.
	for i, want := range []time.Duration{200, 400} {
		gap := got[i+1].Sub(got[i])
		if gap < want*time.Millisecond-20*time.Millisecond {
			t.Fatalf("gap %d = %s, want ≥ %dms", i, gap, want)
		}
	}
	if st := e.Status("loop"); st.State != model.StateError || st.Code != string(apierr.ServiceUnavailable) {
		t.Fatalf("after giving up: %+v", st)
	}
	// A manual restart tries again (and fails the same way, with a fresh series).
	_, err := e.Client.Runtime(context.Background(), "restart", "loop")
	wantCode(t, err, apierr.ServiceUnavailable)
}

// A server that stops answering pings is restarted.
func TestHealthCheckRestartsAFrozenServer(t *testing.T) {
	opts := lifecycleOpts()
	opts.HealthInterval = 100 * time.Millisecond
	opts.HealthTimeout = 100 * time.Millisecond
	opts.HealthFailures = 2
	opts.StopTimeout = 300 * time.Millisecond
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if err := syscall.Kill(first.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(first.PID, syscall.SIGKILL) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Status("alpha")
		if st.State == model.StateRunning && st.PID != first.PID {
			if st.Restarts < 1 {
				t.Fatalf("health restart not counted: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("frozen server not restarted: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitGone(t, first.PID, 3*time.Second)
}

func TestMaxInflightCalls(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.MaxInflight = 2
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = call(t, e, "alpha", "sleep", `{"ms":800}`) }()
	}
	time.Sleep(200 * time.Millisecond)
	begin := time.Now()
	_, err := call(t, e, "alpha", "echo", `{"message":"third"}`)
	if e := wantCode(t, err, apierr.ServiceUnavailable); time.Since(begin) > 200*time.Millisecond {
		t.Fatalf("refusal took %s: %s", time.Since(begin), e.Message)
	}
	wg.Wait()
	if _, err := call(t, e, "alpha", "echo", `{"message":"later"}`); err != nil {
		t.Fatalf("after the others finished: %v", err)
	}
}

func TestMaxServersPerRunner(t *testing.T) {
	opts := lifecycleOpts()
	opts.MaxServers = 2
	e := runnertest.Start(t, opts)
	for _, name := range []string{"a", "b"} {
		cfg := runnertest.Binary(name, testServer)
		cfg.Runtime.Eager = true
		e.Put(t, cfg)
		e.WaitState(t, name, model.StateRunning, 10*time.Second)
	}
	cfg := runnertest.Binary("c", testServer)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	st := e.WaitState(t, "c", model.StateError, 5*time.Second)
	if st.Code != string(apierr.ServiceUnavailable) || st.RetryAt.IsZero() {
		t.Fatalf("over the limit: %+v, want it waiting for room (retry_at)", st)
	}
	// Freeing a slot lets it start.
	if _, err := e.Client.Runtime(context.Background(), "stop", "a"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Client.Runtime(context.Background(), "start", "c"); err != nil || st.State != model.StateRunning {
		t.Fatalf("start after a slot freed: %+v %v", st, err)
	}
}

// A server refused at the runner's server limit (a lazy one starting to
// learn its tools) waits for room: error with retry_at, and it starts on its
// own once a slot frees. A call meanwhile is told the limit, and does not
// keep it from starting later. It stayed in error with no retry for good.
func TestAtLimitStartWaitsForRoom(t *testing.T) {
	opts := lifecycleOpts()
	opts.MaxServers = 1
	e := runnertest.Start(t, opts)
	a := runnertest.Binary("alpha", testServer)
	a.Runtime.Eager = true
	e.Put(t, a)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.Put(t, runnertest.Binary("beta", testServer)) // lazy, never seen: starts once to learn its tools
	st := e.WaitState(t, "beta", model.StateError, 5*time.Second)
	if st.Code != string(apierr.ServiceUnavailable) || !strings.Contains(st.Message, "limit") || st.RetryAt.IsZero() {
		t.Fatalf("at the limit: %+v, want SERVICE_UNAVAILABLE naming the limit, with retry_at", st)
	}
	_, err := call(t, e, "beta", "echo", `{"message":"x"}`)
	if ae := wantCode(t, err, apierr.ServiceUnavailable); !strings.Contains(ae.Message, "limit") {
		t.Fatalf("a call at the limit: %q, want it told the limit", ae.Message)
	}
	if _, err := e.Client.Runtime(context.Background(), "stop", "alpha"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, "beta", model.StateRunning, 5*time.Second)
	if res, err := call(t, e, "beta", "echo", `{"message":"room"}`); err != nil || text(t, res) != "room" {
		t.Fatalf("a call once room was back: %s %v", res, err)
	}
}

// An automatic restart after a crash that meets the server limit waits for
// room the same way, and a start asked for once there is room starts it. The
// restart ended in error with no retry, and runtime.start (config.enable)
// was refused with the old limit message however much room there was.
func TestAtLimitRestartWaitsForRoom(t *testing.T) {
	opts := lifecycleOpts()
	opts.MaxServers = 1
	opts.RestartBackoff = 2 * time.Second // beta takes the slot before alpha's restart
	opts.RestartBackoffMax = 30 * time.Second
	e := runnertest.Start(t, opts)
	for _, name := range []string{"alpha", "beta"} {
		cfg := runnertest.Binary(name, testServer)
		cfg.Runtime.Eager = true
		e.Put(t, cfg)
		e.WaitState(t, name, map[string]string{"alpha": model.StateRunning, "beta": model.StateError}[name], 10*time.Second)
	}
	_, err := call(t, e, "alpha", "crash", `{}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	e.WaitState(t, "alpha", model.StateError, 2*time.Second) // its slot is free
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Started by the freed slot, or by this request.
	if st, err := e.Client.Runtime(ctx, "start", "beta"); err != nil || st.State != model.StateRunning {
		t.Fatalf("start beta once alpha crashed: %+v %v", st, err)
	}
	var st model.Status
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st = e.Status("alpha")
		if st.State == model.StateError && strings.Contains(st.Message, "limit") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha's restart did not meet the limit: %+v", st)
		}
	}
	if st.Code != string(apierr.ServiceUnavailable) || st.RetryAt.IsZero() {
		t.Fatalf("a restart at the limit: %+v, want SERVICE_UNAVAILABLE with retry_at", st)
	}
	if _, err := e.Client.Runtime(ctx, "stop", "beta"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Client.Runtime(ctx, "start", "alpha"); err != nil || st.State != model.StateRunning {
		t.Fatalf("start alpha once room was back: %+v %v", st, err)
	}
}

// Each call renews the idle timer (seeds/002 §9.2 "Tool call: update
// last_used"): a server called more often than its idle timeout keeps its
// process, and goes idle only once the calls stop.
func TestCallsKeepAServerFromGoingIdle(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.IdleTimeout = model.Duration(600 * time.Millisecond)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	// Two idle timeouts' worth of calls, one every 150 ms.
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); time.Sleep(150 * time.Millisecond) {
		if res, err := call(t, e, "alpha", "echo", `{"message":"busy"}`); err != nil || text(t, res) != "busy" {
			t.Fatalf("call: %s %v", res, err)
		}
		if st := e.Status("alpha"); st.State != model.StateRunning || st.PID != first.PID {
			t.Fatalf("a server in use went idle or restarted: %+v (first pid %d)", st, first.PID)
		}
	}
	e.WaitState(t, "alpha", model.StateIdle, 3*time.Second)
	waitGone(t, first.PID, 3*time.Second)
}

// statusWrites collects every status of slug written from now on (KV
// mcp_status updates), in order.
func statusWrites(t *testing.T, e *runnertest.Env, slug string) (next func(time.Duration) (model.Status, bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := e.Assets.Status.Watch(ctx, slug, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return func(d time.Duration) (model.Status, bool) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case <-timer.C:
				return model.Status{}, false
			case en := <-w.Updates():
				if en == nil || en.Operation() != jetstream.KeyValuePut {
					continue
				}
				var st model.Status
				if err := json.Unmarshal(en.Value(), &st); err != nil {
					t.Fatal(err)
				}
				return st, true
			}
		}
	}
}

// Every error a crash or a failed start leaves says at once whether an
// automatic restart comes: retry_at is in the same write as the error, up
// to the last try, whose error has none. The runner wrote a bare error
// first and retry_at in a second write, so whoever read the first (the
// console's "disconnected. Reconnecting..." toast) could not tell a
// scheduled restart from one given up or never tried.
func TestErrorSaysWhetherARestartComes(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	next := statusWrites(t, e, "alpha")
	_, err := call(t, e, "alpha", "crash", `{}`)
	wantCode(t, err, apierr.ServiceUnavailable)
	for {
		st, ok := next(5 * time.Second)
		if !ok {
			t.Fatal("no error after the crash")
		}
		if st.State == model.StateError {
			if st.RetryAt.IsZero() {
				t.Fatalf("the crash's first error has no retry_at: %+v", st)
			}
			break
		}
	}

	// A server that never starts: each failed try but the last has its
	// retry_at; the last has none and says it gave up.
	loop := runnertest.Binary("loop", testServer)
	loop.EnvVars = map[string]model.EnvVar{"TESTMCP_FAIL_START": {Value: "boom"}}
	next = statusWrites(t, e, "loop")
	e.Put(t, loop)
	var errs []model.Status
	for {
		st, ok := next(10 * time.Second)
		if !ok {
			t.Fatalf("the crash loop did not give up; errors: %+v", errs)
		}
		if st.State != model.StateError {
			continue
		}
		errs = append(errs, st)
		if strings.Contains(st.Message, "gave up") {
			break
		}
	}
	for i, st := range errs {
		if last := i == len(errs)-1; last != st.RetryAt.IsZero() {
			t.Fatalf("error %d of %d: retry_at %v, want it on every error but the last: %+v", i+1, len(errs), st.RetryAt, errs)
		}
	}
	if len(errs) != 3 {
		t.Fatalf("%d errors, want 3 (the default 3 tries): %+v", len(errs), errs)
	}
}

// One try is "1 try", not "1 tries".
func TestGaveUpAfterOneTry(t *testing.T) {
	opts := lifecycleOpts()
	opts.MaxRestarts = 1
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("loop", testServer)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_FAIL_START": {Value: "boom"}}
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := e.Status("loop")
		if st.State == model.StateError && strings.Contains(st.Message, "gave up") {
			if !strings.Contains(st.Message, "gave up after 1 try;") {
				t.Fatalf("message %q, want \"gave up after 1 try;\"", st.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("did not give up: %+v", st)
		}
	}
}
