package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// watchShared keeps the catalog and status caches in step with KV, so that
// tools.list and runtime.status answer the same on every runner (other runners
// write there too). ready is closed once both have delivered their initial values.
func (r *Runner) watchShared(ctx context.Context, ready chan<- struct{}) {
	tools, err := r.assets.Tools.WatchAll(ctx)
	if err != nil {
		r.log.Error("watching tool catalog failed", "error", err)
		close(ready)
		return
	}
	defer func() { _ = tools.Stop() }()
	status, err := r.assets.Status.WatchAll(ctx)
	if err != nil {
		r.log.Error("watching status failed", "error", err)
		close(ready)
		return
	}
	defer func() { _ = status.Stop() }()
	pending := 2
	for {
		select {
		case <-ctx.Done():
			if pending > 0 {
				close(ready)
			}
			return
		case e, ok := <-tools.Updates():
			if !ok {
				return
			}
			if e == nil {
				if pending--; pending == 0 {
					close(ready)
				}
				continue
			}
			r.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				var c model.Catalog
				if json.Unmarshal(e.Value(), &c) == nil {
					r.catalog[e.Key()] = c
				}
			} else {
				delete(r.catalog, e.Key())
			}
			r.mu.Unlock()
		case e, ok := <-status.Updates():
			if !ok {
				return
			}
			if e == nil {
				if pending--; pending == 0 {
					close(ready)
				}
				continue
			}
			r.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				var st model.Status
				if json.Unmarshal(e.Value(), &st) == nil {
					r.status[e.Key()] = st
				}
			} else {
				delete(r.status, e.Key())
			}
			r.mu.Unlock()
		}
	}
}

// watchConfigs applies every config in KV mcp_configs and every change to it.
func (r *Runner) watchConfigs(ctx context.Context) {
	w, err := r.assets.Configs.WatchAll(ctx)
	if err != nil {
		r.log.Error("watching configs failed", "error", err)
		close(r.ready)
		return
	}
	defer func() { _ = w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			if initial {
				close(r.ready)
			}
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if initial {
					initial = false
					close(r.ready)
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				r.remove(e.Key())
				continue
			}
			var cfg model.McpConfig
			if err := json.Unmarshal(e.Value(), &cfg); err != nil {
				r.log.Warn("ignoring a config that is not valid JSON", "key", e.Key(), "error", err)
				continue
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
				continue
			}
			r.apply(&cfg)
		}
	}
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
			if s.status().State == model.StateRunning {
				s.stop(model.StateStopped, false)
				_ = s.start()
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
				_ = s.start()
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
