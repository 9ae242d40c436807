package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The lifecycle rules of docs/design.md: lazy start on the first
// call (or eager at boot), idle stop, automatic restart with backoff after a
// crash, and a health ping that restarts a server which stops answering.

// errIdle tells the call path that the server must be started first.
var errIdle = errors.New("server idle")

// boot runs when this runner takes a server: an eager server starts; a lazy
// one whose tools are known from an earlier run (same config revision) goes
// idle at once; a lazy one never seen before starts to learn its tools and is
// then stopped by the idle timer like any other.
func (s *server) boot() {
	s.mu.Lock()
	began := s.booted // a state was set here before the boot: a request got in first
	s.booted = true
	s.mu.Unlock()
	switch st := s.status().State; {
	case st == model.StateRunning || st == model.StateError:
		// A start request got in first (runtime.start racing the takeover):
		// the server is already what boot would make it, or failed trying.
		return
	case st == model.StateStopped && began:
		// A stop request got in first (runtime.stop racing the takeover):
		// the operator's stop holds.
		return
	}
	cfg := s.config()
	// A config the exec policy refuses does not go idle: start refuses it
	// and the status tells why.
	if _, refused := s.r.checkExec(cfg); refused == nil && !cfg.Runtime.Eager {
		if cat, ok := s.r.cachedCatalog(s.slug); ok && cat.ConfigRevision == cfg.Revision {
			s.mu.Lock()
			s.tools = toolsFromCatalog(cat)
			s.mu.Unlock()
			s.setState(model.StateIdle, nil)
			return
		}
	}
	_ = s.start(context.Background())
}

// toolsFromCatalog rebuilds the tool index of an idle server from its catalog:
// a call needs only the original name to reach the tool once started.
func toolsFromCatalog(cat model.Catalog) map[string]*mcp.Tool {
	tools := make(map[string]*mcp.Tool, len(cat.Tools))
	for _, t := range cat.Tools {
		tools[model.ToolToken(t.Tool)] = &mcp.Tool{Name: t.Tool, Title: t.Title, Description: t.Description}
	}
	return tools
}

// ensureRunning starts an idle (or starting) server for a call, or one
// waiting for room, waiting at most until ctx ends; the start goes on
// without the caller if it gives up.
func (s *server) ensureRunning(ctx context.Context) error {
	select {
	case <-s.done:
		return s.gone()
	default:
	}
	res := make(chan error, 1)
	waited := time.Now()
	op := func() {
		if s.ctx.Err() != nil {
			res <- s.gone() // queued before close's stop: the server is going away
			return
		}
		// The call gets what a call arriving now would (live): a start
		// that failed while it waited (a first start, a restart on a
		// changed config) answers with its error, and the time of the
		// next try when one is armed, rather than spawning the server
		// again ahead of its backoff; a server running now serves it.
		if _, _, _, err := s.live(""); err != errIdle {
			res <- err
			return
		}
		res <- s.start(ctx)
	}
	select {
	case s.ops <- op:
	case <-s.done:
		return s.gone()
	case <-ctx.Done():
		return apierr.Newf(apierr.Network, "server %s did not start before the call's deadline", s.slug)
	}
	select {
	case err := <-res:
		s.lastStart.linkIfWaited(ctx, waited)
		return err
	case <-s.done: // closed with the start still queued: it never runs
		return s.gone()
	case <-ctx.Done():
		return apierr.Newf(apierr.Network, "server %s did not start before the call's deadline", s.slug)
	}
}

// retryable reports whether a failed start may succeed if tried again: a
// crash or a timeout may, and so may a credential backend that is down or
// rate limiting (Vault's 429 reaches the runner as RATE_LIMITED); a missing
// package or credential will not.
func retryable(e *apierr.Error) bool {
	if errors.Is(e, errAtLimit) {
		return false
	}
	return e.Code == apierr.ServiceUnavailable || e.Code == apierr.Network || e.Code == apierr.RateLimited
}

var errAtLimit = errors.New("runner at its server limit")

// credentialsUnavailable marks a start that failed because the server's
// secrets could not be read: the credential service, or Vault behind it,
// is down, sealed or rate limiting (a retryable error of cred.resolve).
type credentialsUnavailable struct{ err error }

func (c credentialsUnavailable) Error() string { return c.err.Error() }
func (c credentialsUnavailable) Unwrap() error { return c.err }

// waitForCredentials leaves a server whose start could not read its secrets
// (credentialsUnavailable) in error and tries again after the backoff,
// without spending its restart budget (MaxRestarts): the outage is not the
// server's, and the server starts by itself once its secrets can be read,
// however long Vault stays sealed. Runs on the server's goroutine.
func (s *server) waitForCredentials(e *apierr.Error) {
	if s.ctx.Err() != nil {
		s.setState(model.StateError, e)
		return
	}
	delay := s.backoff(s.credWaits)
	s.credWaits++
	s.retryIn(delay)
	s.setState(model.StateError, e) // keeps the retry_at retryIn set
	s.log.Warn("server's credentials cannot be read; will try again", "in", delay, "code", e.Code)
}

// statusRefresh is how often changed call counters are written to the status.
const statusRefresh = 2 * time.Second

// scheduleRestart puts a server that crashed or failed to start with e in
// error and arranges the next automatic restart: backoff 1, 2, 4 … 60 s, at
// most MaxRestarts in a row, then the server stays in error until someone
// restarts it. A series that began with a failed start counts that spawn as
// one of them, so a server that never comes up is spawned MaxRestarts times
// in all, not one more. The error and its retry_at go out in one write:
// whoever reads the status (the console's toasts, the gateway's kept tools)
// tells a restart to come (retry_at) from one given up (none) at the first
// error, not after a second write. Runs on the server's goroutine.
func (s *server) scheduleRestart(e *apierr.Error) {
	if s.ctx.Err() != nil {
		s.setState(model.StateError, e)
		return
	}
	max := s.r.opts.MaxRestarts
	used := s.attempts
	if s.failedFirst {
		used++
	}
	if used >= max {
		tries := "tries"
		if used == 1 {
			tries = "try"
		}
		s.setState(model.StateError, apierr.New(e.Code, fmt.Sprintf("%s; gave up after %d %s; run `mcpbus restart %s`", e.Message, used, tries, s.slug)))
		s.log.Error("server keeps failing: automatic restarts exhausted", "attempts", used)
		return
	}
	delay := s.backoff(s.attempts)
	s.attempts++
	s.restarts.Add(1)
	s.countRestart(restartCrash)
	s.retryIn(delay)
	s.setState(model.StateError, e) // keeps the retry_at retryIn set
	// Numbered as the status counts tries: a failed first start was one.
	s.log.Warn("server will restart", "in", delay, "attempt", used+1, "of", max)
}

// backoff is the delay before the automatic try after n in a row: 1, 2, 4 …
// (RestartBackoff doubled) up to RestartBackoffMax.
func (s *server) backoff(n int) time.Duration {
	delay := s.r.opts.RestartBackoff << n
	if delay > s.r.opts.RestartBackoffMax || delay <= 0 {
		delay = s.r.opts.RestartBackoffMax
	}
	return delay
}

// retryIn arms the automatic start after delay and sets its retry_at; the
// caller writes the status. The previous timer goes first: cancelRetry also
// clears retry_at, which every later write of the status (the call
// counters' refresh) must carry until the restart, or gateways stop serving
// the kept tools.
func (s *server) retryIn(delay time.Duration) {
	s.cancelRetry()
	s.mu.Lock()
	s.retryAt = time.Now().Add(delay).UTC()
	s.mu.Unlock()
	var timer *time.Timer
	timer = time.AfterFunc(delay, func() {
		s.post(func() {
			// A timer stopped after it fired still has this queued: only
			// the pending one may restart (a later crash has its own).
			if s.retry == timer {
				s.retryNow()
			}
		})
	})
	s.retry = timer
}

// retryNow runs the pending automatic start: its time came, or a slot freed
// for a server waiting for room. Runs on the server's goroutine.
func (s *server) retryNow() {
	// The restart is under way: a start refused before it writes
	// "starting" (exec policy, server limit) must not leave a retry_at in
	// the past behind.
	s.cancelRetry()
	if s.status().State != model.StateError {
		return // stopped, restarted or removed meanwhile
	}
	_ = s.start(context.Background())
}

// cancelRetry drops a pending automatic restart.
func (s *server) cancelRetry() {
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	s.waitingRoom.Store(false)
	s.mu.Lock()
	s.retryAt = time.Time{}
	s.mu.Unlock()
}

// waitForRoom leaves a server whose start met the runner's server limit in
// error until a slot frees (slotFreed) or, at the latest, its retry_at
// (the backoff of the restarts). The limit is the runner's, not the
// server's: these tries never count against MaxRestarts, nor ever give up.
// Runs on the server's goroutine.
func (s *server) waitForRoom(e *apierr.Error) {
	if s.waitingRoom.Load() {
		return // a call's try while it waits: its status stands
	}
	s.roomSince.CompareAndSwap(0, time.Now().UnixNano())
	if s.retry == nil { // else a restart is pending already (a crash's)
		s.retryIn(s.backoff(s.roomWaits))
		s.roomWaits++
		s.waitingRoom.Store(true)
	}
	s.setState(model.StateError, e)
	s.log.Warn("server waits for room: the runner is at its server limit", "max_servers", s.r.opts.MaxServers)
}

// takeSlot reserves one of the runner's MaxServers for a start, or reports
// how many run when none is left. Reserved before the spawn: two servers
// starting at once could both take the last one otherwise.
func (r *Runner) takeSlot() (int64, bool) {
	for {
		n := r.running.Load()
		if n >= int64(r.opts.MaxServers) {
			return n, false
		}
		if r.running.CompareAndSwap(n, n+1) {
			return n, true
		}
	}
}

// slotFreed gives a slot back: the servers waiting for room try at once.
func (r *Runner) slotFreed() {
	r.running.Add(-1)
	r.mu.Lock()
	var waiting []*server
	for _, s := range r.servers {
		if s.waitingRoom.Load() {
			waiting = append(waiting, s)
		}
	}
	r.mu.Unlock()
	for _, s := range waiting {
		s.post(func() {
			if s.waitingRoom.Load() {
				s.retryNow()
			}
		})
	}
}

// backingOff is the error to answer a start with while a series of automatic
// restarts after a crash is under way or has given up: a start (enable, a
// lazy call) waits for the backoff; only a restart begins a fresh series.
// A server waiting for room (its restart met the server limit) is tried at
// once: there may be room now.
func (s *server) backingOff() *apierr.Error {
	st := s.status()
	if st.State != model.StateError || s.attempts == 0 || s.waitingRoom.Load() {
		return nil
	}
	code := apierr.Code(st.Code)
	if !code.Valid() {
		code = apierr.ServiceUnavailable
	}
	msg := st.Message
	if !st.RetryAt.IsZero() {
		msg += model.NextRestartNote + st.RetryAt.Format(time.RFC3339)
	}
	return apierr.New(code, msg).WithField(st.Field)
}

// resetRetries starts a fresh series of automatic restarts (a manual
// restart, or a changed config after a failure), counted as reason.
func (s *server) resetRetries(reason string) {
	s.countRestart(reason)
	s.cancelRetry()
	s.attempts, s.failedFirst, s.roomWaits, s.credWaits = 0, false, 0, 0
	s.roomSince.Store(0)
}

// maintain runs the idle stop and the health ping of every server.
func (r *Runner) maintain(ctx context.Context) {
	t := time.NewTicker(r.opts.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.expireLeases()
			r.mu.Lock()
			servers := make([]*server, 0, len(r.servers))
			for _, s := range r.servers {
				servers = append(servers, s)
			}
			r.mu.Unlock()
			for _, s := range servers {
				s.tick(now)
			}
		}
	}
}

// idleTimeout is the server's idle timeout; 0 means never.
func (s *server) idleTimeout(cfg *model.McpConfig) time.Duration {
	d := time.Duration(cfg.Runtime.IdleTimeout)
	if d == 0 {
		d = s.r.opts.IdleTimeout
	}
	if d < 0 {
		return 0
	}
	return d
}

func (s *server) tick(now time.Time) {
	// Call counters reach the shared status every few seconds, not per call.
	if n := s.calls.Load(); n != s.publishedCalls.Load() && now.Sub(time.Unix(0, s.publishedAt.Load())) >= statusRefresh {
		s.publishedCalls.Store(n)
		s.publishedAt.Store(now.UnixNano())
		// On the server's goroutine, like every other status write: a
		// status read here and written later could land after a newer one
		// (a crash's error with retry_at) and undo it.
		s.post(func() {
			if !s.lost.Load() {
				s.r.publishStatus(s.status())
			}
		})
	}
	s.mu.RLock()
	running, sess, cfg := s.state == model.StateRunning, s.sess, s.cfg
	s.mu.RUnlock()
	if !running || sess == nil {
		return
	}
	if cfg.Auth.PerPrincipal {
		s.evictIdle(s.idleTimeout(cfg))
	}
	if idle := s.idleTimeout(cfg); idle > 0 && s.active.Load() == 0 &&
		now.Sub(time.Unix(0, s.lastUse.Load())) >= idle && !s.subs.leased(now) {
		s.post(func() {
			// Check again on the server's goroutine: a call may have come in.
			if s.sess == sess && s.active.Load() == 0 && time.Since(time.Unix(0, s.lastUse.Load())) >= idle && !s.subs.leased(time.Now()) {
				s.log.Info("server idle: stopping it until the next call", "idle", idle)
				s.stop(model.StateIdle, true)
			}
		})
		return
	}
	if now.Sub(time.Unix(0, s.lastPing.Load())) >= s.r.opts.HealthInterval && s.pinging.CompareAndSwap(false, true) {
		go s.healthCheck(sess)
	}
}

// healthCheck pings the server; HealthFailures failures in a row restart it.
func (s *server) healthCheck(sess *mcp.ClientSession) {
	defer s.pinging.Store(false)
	ctx, cancel := context.WithTimeout(s.ctx, s.r.opts.HealthTimeout)
	defer cancel()
	err := sess.Ping(ctx, nil)
	s.lastPing.Store(time.Now().UnixNano())
	if err == nil {
		s.pingFails.Store(0)
		return
	}
	n := s.pingFails.Add(1)
	// The error may quote the server's answer: redacted and bounded as
	// its error texts are wherever else they go.
	s.log.Warn("health ping failed", "failures", n, "error", s.serverText(err.Error()))
	if int(n) < s.r.opts.HealthFailures {
		return
	}
	s.post(func() {
		if s.sess != sess {
			return
		}
		s.log.Error("server failed its health checks: restarting it", "failures", n)
		s.restarts.Add(1)
		s.countRestart(restartHealth)
		s.stop(model.StateStarting, true)
		_ = s.start(context.Background())
	})
}
