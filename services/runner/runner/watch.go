package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// watchShared keeps the catalog, status and agents caches in step with KV, so
// that tools.list and runtime.status answer the same on every runner (other
// runners write there too) and agents' requests are checked against their
// current records. ready is closed once all three have their first
// snapshot, or when ctx ends.
func (r *Runner) watchShared(ctx context.Context, ready chan<- struct{}) {
	closeReady := sync.OnceFunc(func() { close(ready) })
	defer closeReady()
	var pending atomic.Int32
	pending.Store(3)
	loaded := func() {
		if pending.Add(-1) == 0 {
			closeReady()
		}
	}
	tools := followCache(&r.mu, r.catalog, decodeJSON[model.Catalog])
	tools.Ready = loaded
	status := followCache(&r.mu, r.status, decodeJSON[model.Status])
	status.Ready = loaded
	agents := r.forgetRates(followCache(&r.mu, r.agents, decodeJSON[model.AgentRecord]))
	agents.Ready = loaded
	var wg sync.WaitGroup
	wg.Go(func() { bus.FollowKV(ctx, r.nc, r.assets.Agents, agents, bus.KVFollowOptions{Logger: r.log}) })
	wg.Go(func() { bus.FollowKV(ctx, r.nc, r.assets.Tools, tools, bus.KVFollowOptions{Logger: r.log}) })
	wg.Go(func() { bus.FollowKV(ctx, r.nc, r.assets.Status, status, bus.KVFollowOptions{Logger: r.log}) })
	wg.Wait()
}

// followCache is the bus.FollowKV handler that keeps cache (guarded by mu) a
// decoded copy of a bucket; values that do not decode are left out.
func followCache[T any](mu sync.Locker, cache map[string]T, decode func([]byte) (T, bool)) bus.KVHandler {
	return bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			mu.Lock()
			defer mu.Unlock()
			clear(cache)
			for key, e := range entries {
				if v, ok := decode(e.Value()); ok {
					cache[key] = v
				}
			}
		},
		Update: func(e jetstream.KeyValueEntry) {
			mu.Lock()
			defer mu.Unlock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(cache, e.Key())
			} else if v, ok := decode(e.Value()); ok {
				cache[e.Key()] = v
			}
		},
	}
}

func decodeJSON[T any](data []byte) (T, bool) {
	var v T
	return v, json.Unmarshal(data, &v) == nil
}

// watchConfigs applies every config in KV mcp_configs and every change to
// it. r.ready is closed once the configs present at start are applied (or
// when ctx ends).
func (r *Runner) watchConfigs(ctx context.Context) {
	closeReady := sync.OnceFunc(func() { close(r.ready) })
	defer closeReady()
	bus.FollowKV(ctx, r.nc, r.assets.Configs, bus.KVHandler{
		Snapshot: r.applySnapshot,
		Update: func(e jetstream.KeyValueEntry) {
			if e.Operation() != jetstream.KeyValuePut {
				r.remove(e.Key())
				return
			}
			r.applyEntry(e)
		},
		Ready: closeReady,
	}, bus.KVFollowOptions{Logger: r.log})
}

// applySnapshot brings the runner in line with the complete set of configs
// (at start, and after the watch restarted): configs deleted meanwhile are
// removed first, so that a new config may take a slug they freed; then every
// config is applied in revision order, the order a watch delivers them in
// (of two configs sharing a slug the older one wins).
func (r *Runner) applySnapshot(entries map[string]jetstream.KeyValueEntry) {
	r.mu.Lock()
	var gone []string
	for id := range r.byID {
		if _, ok := entries[id]; !ok {
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	for _, id := range gone {
		r.remove(id)
	}
	for _, e := range slices.SortedFunc(maps.Values(entries), func(a, b jetstream.KeyValueEntry) int {
		return cmp.Compare(a.Revision(), b.Revision())
	}) {
		r.applyEntry(e)
	}
}

// applyEntry decodes, checks and applies one stored config.
func (r *Runner) applyEntry(e jetstream.KeyValueEntry) {
	var cfg model.McpConfig
	if err := json.Unmarshal(e.Value(), &cfg); err != nil {
		r.log.Warn("ignoring a config that is not valid JSON", "key", e.Key(), "error", err)
		return
	}
	if cfg.ID == "" {
		cfg.ID = e.Key()
	}
	cfg.Revision = e.Revision()
	cfg.Normalize()
	if verr := cfg.Validate(); verr != nil {
		r.log.Warn("ignoring an invalid config", "key", e.Key(), "field", verr.Field, "error", verr.Message)
		if model.ValidSlug(cfg.Slug) {
			r.publishStatus(model.Status{Server: cfg.Slug, State: model.StateError, Code: string(verr.Code),
				Message: verr.Message, Runner: r.opts.ID, UpdatedAt: time.Now().UTC()})
		}
		return
	}
	r.apply(&cfg)
}

// apply brings the runner in line with one config: an enabled one becomes
// wanted (the ownership pass takes it), a disabled one is stopped and given
// back, one whose launch changed restarts where it runs.
func (r *Runner) apply(cfg *model.McpConfig) {
	r.mu.Lock()
	if old, ok := r.byID[cfg.ID]; ok && old != cfg.Slug {
		// Renamed: the old slug goes away entirely.
		delete(r.desired, old)
		delete(r.byID, cfg.ID)
		r.mu.Unlock()
		r.releaseServer(context.Background(), old, model.StateStopped, false)
		r.forgetStatus(old)
		r.mu.Lock()
	}
	if other, ok := r.desired[cfg.Slug]; ok && other.ID != cfg.ID {
		r.mu.Unlock()
		r.log.Error("two configs share a slug; keeping the first", "server", cfg.Slug, "ignored_id", cfg.ID)
		return
	}
	r.byID[cfg.ID] = cfg.Slug
	s, owned := r.servers[cfg.Slug]
	if !cfg.Enabled {
		delete(r.desired, cfg.Slug)
		r.mu.Unlock()
		if owned {
			r.releaseServer(context.Background(), cfg.Slug, model.StateDisabled, false)
		} else {
			r.publishStatus(model.Status{Server: cfg.Slug, State: model.StateDisabled, UpdatedAt: time.Now().UTC()})
		}
		return
	}
	r.desired[cfg.Slug] = cfg
	r.mu.Unlock()
	if !owned {
		r.kick()
		return
	}
	restart, filterChanged := s.setConfig(cfg)
	switch {
	case restart:
		s.post(func() {
			switch s.status().State {
			case model.StateRunning:
				_ = s.restartInPlace(context.Background(), restartConfig, false)
			case model.StateIdle:
				if _, refused := r.checkExec(s.config()); refused != nil {
					// Its new package is refused here: not idle any more, in error.
					s.stop(model.StateStopped, false)
					_ = s.start(context.Background())
				}
			case model.StateError:
				// A failed start (a wrong package, a bad argument) whose
				// config was fixed: the fix gets a fresh series of starts,
				// as a manual restart would.
				_ = s.restartInPlace(context.Background(), restartConfig, true)
			}
		})
	case filterChanged:
		s.post(func() {
			switch s.status().State {
			case model.StateRunning:
				s.publishCatalog()
				s.setState(model.StateRunning, nil)
			case model.StateIdle:
				// The idle tool list came from the catalog under the old filter:
				// start once to learn the tools the new filter lets through.
				_ = s.start(context.Background())
			}
		})
	}
}

// remove handles a deleted config: stop, give the lease back, forget status and catalog.
func (r *Runner) remove(id string) {
	r.mu.Lock()
	slug, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return
	}
	delete(r.byID, id)
	delete(r.desired, slug)
	r.mu.Unlock()
	r.releaseServer(context.Background(), slug, model.StateStopped, false)
	r.forgetStatus(slug)
}

// maxRestartCuts bounds server.restartCuts: the calls cut by a restart end
// with its stop, long before this many more restarts.
const maxRestartCuts = 8

// errRestartCut marks a call cut by a restart in place (a changed config, a
// requested restart): a task's run that meets it goes back to the queue
// (runTask).
var errRestartCut = errors.New("the server was restarted during the call")

// restartCut is a session stopped by restartInPlace and why (restartConfig
// or restartManual): a call that fails on it says so (restartCutError).
type restartCut struct {
	gen    uint64
	reason string
}

// restartInPlace restarts the server, counted as reason, as a health
// restart does rather than as a stop and a start: the state is "starting"
// from the moment the session goes, so calls that arrive meanwhile wait for
// the new session within their own deadline (liveOrStart); the tools stay
// listed (the catalog is replaced once the new server has listed its tools,
// without those a new config drops); calls in flight on the old session end
// with a SERVICE_UNAVAILABLE that says why (restartCutError). fresh begins a
// new series of automatic restarts, as a requested restart (and a config
// fixed after a failure) must: the backoff and MaxRestarts count again from
// nothing. A start that fails leaves the server in error as a crash does,
// with retry_at when it will be tried again, and its catalog goes last, as
// a crash's does. It serves a running server and one in error, idle or
// stopped alike. cause parents the start's span. Runs on the server's
// goroutine.
func (s *server) restartInPlace(cause context.Context, reason string, fresh bool) error {
	if fresh {
		s.resetRetries(reason)
	} else {
		s.countRestart(reason)
	}
	s.mu.Lock()
	if s.sess != nil {
		if len(s.restartCuts) == maxRestartCuts {
			s.restartCuts = s.restartCuts[1:]
		}
		s.restartCuts = append(s.restartCuts, restartCut{gen: s.gen, reason: reason})
	}
	s.mu.Unlock()
	s.stop(model.StateStarting, true)
	// Not when the server is let go meanwhile (its start cancelled): its
	// close decides about the catalog (a handover keeps it).
	err := s.start(cause)
	if err != nil && s.ctx.Err() == nil && s.status().State != model.StateRunning {
		s.deleteCatalog()
	}
	return err
}

// restartCutError is the error of a call on the session of generation gen
// that failed with err (as callError mapped it) because restartInPlace
// stopped that session; nil for any other failure. Only a lost connection
// (SERVICE_UNAVAILABLE) is one: the server's own answer, the caller's
// deadline or cancellation are said as they are.
func (s *server) restartCutError(ctx context.Context, gen uint64, err error) error {
	if ctx.Err() != nil || apierr.Of(err) != apierr.ServiceUnavailable {
		return nil
	}
	s.mu.RLock()
	i := slices.IndexFunc(s.restartCuts, func(c restartCut) bool { return c.gen == gen })
	var reason string
	if i >= 0 {
		reason = s.restartCuts[i].reason
	}
	s.mu.RUnlock()
	if i < 0 {
		return nil
	}
	why := "for a config change"
	if reason == restartManual {
		why = "on request"
	}
	return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("server %s was restarted %s during the call, so the call may or may not have run; "+
		"retry only a call that is safe to run twice", s.slug, why), fmt.Errorf("%w: %w", errRestartCut, err))
}
