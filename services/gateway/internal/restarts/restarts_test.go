package restarts

import (
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

func cat(slug string) model.Catalog {
	return model.Catalog{Server: slug, Tools: []model.Tool{{Name: slug + "__t", Server: slug, Tool: "t"}}}
}

// The runner's crash sequence: catalog deleted, error with retry_at,
// starting, new catalog, running (an older runner wrote a bare error
// before the one with retry_at; the gateway may also see the catalog's
// deletion before the status). The tools are served from error with
// retry_at on, and calls are told to wait until the new catalog is in.
func TestKeepsCatalogThroughCrashRestart(t *testing.T) {
	now := time.Now()
	c := New()
	c.SetStatus(map[string]model.Status{"a": {State: model.StateRunning}, "b": {State: model.StateRunning}})
	if got := c.SetLive(map[string]model.Catalog{"a": cat("a"), "b": cat("b")}); len(got) != 2 {
		t.Fatalf("served %v", got)
	}
	// Crash of a: the catalog goes first, while the status still says running.
	got := c.SetLive(map[string]model.Catalog{"b": cat("b")})
	if _, ok := got["a"]; ok {
		t.Fatal("a is served with its status running and no catalog")
	}
	got, _ = c.SetStatus(map[string]model.Status{"a": {State: model.StateError}, "b": {State: model.StateRunning}})
	if _, ok := got["a"]; ok {
		t.Fatal("a is served in error without retry_at")
	}
	got, changed := c.SetStatus(map[string]model.Status{"a": {State: model.StateError, RetryAt: now.Add(5 * time.Second)}, "b": {State: model.StateRunning}})
	if _, ok := got["a"]; !ok || !changed {
		t.Fatalf("a not served while it waits for its restart: %v changed=%v", got, changed)
	}
	if d, ok := c.Restarting("a", now); !ok || d != 5*time.Second {
		t.Fatalf("Restarting(a) = %s %v", d, ok)
	}
	if d, ok := c.Restarting("a", now.Add(time.Minute)); !ok || d != time.Second {
		t.Fatalf("Restarting(a) past retry_at = %s %v, want at least 1s", d, ok)
	}
	if _, ok := c.Restarting("b", now); ok {
		t.Fatal("running b is restarting")
	}
	got, changed = c.SetStatus(map[string]model.Status{"a": {State: model.StateStarting}, "b": {State: model.StateRunning}})
	if _, ok := got["a"]; !ok || changed {
		t.Fatalf("a starting: served %v changed=%v", got, changed)
	}
	if d, ok := c.Restarting("a", now); !ok || d != time.Second {
		t.Fatalf("Restarting(a) starting = %s %v", d, ok)
	}
	c.SetLive(map[string]model.Catalog{"a": cat("a"), "b": cat("b")})
	if _, ok := c.Restarting("a", now); ok {
		t.Fatal("a starting with its catalog in place: calls should reach the runner")
	}
	c.SetStatus(map[string]model.Status{"a": {State: model.StateRunning}, "b": {State: model.StateRunning}})
	if len(c.kept) != 0 {
		t.Fatalf("kept after the restart: %v", c.kept)
	}
}

// A server stopped, disabled or removed forgets its kept catalog.
func TestForgetsStoppedServers(t *testing.T) {
	for _, st := range []*model.Status{{State: model.StateStopped}, {State: model.StateDisabled}, {State: model.StateIdle}, nil} {
		c := New()
		c.SetStatus(map[string]model.Status{"a": {State: model.StateRunning}})
		c.SetLive(map[string]model.Catalog{"a": cat("a")})
		c.SetLive(map[string]model.Catalog{})
		status := map[string]model.Status{}
		if st != nil {
			status["a"] = *st
		}
		c.SetStatus(status)
		got, _ := c.SetStatus(map[string]model.Status{"a": {State: model.StateStarting}})
		if _, ok := got["a"]; ok || len(c.kept) != 0 {
			t.Fatalf("status %v: catalog kept: %v", st, c.kept)
		}
	}
}

// A server waiting for room on its runner (at --max-servers) keeps its
// tools listed, but calls are not held back until retry_at: the runner
// tries a call's start at once, and starts it as soon as a slot frees.
func TestWaitingForRoomIsNotHeldBack(t *testing.T) {
	now := time.Now()
	c := New()
	c.SetStatus(map[string]model.Status{"a": {State: model.StateRunning}})
	c.SetLive(map[string]model.Catalog{"a": cat("a")})
	c.SetLive(map[string]model.Catalog{})
	got, _ := c.SetStatus(map[string]model.Status{"a": {State: model.StateError, Field: model.StatusFieldMaxServers, RetryAt: now.Add(30 * time.Second)}})
	if _, ok := got["a"]; !ok {
		t.Fatal("a's tools are not served while it waits for room")
	}
	if d, ok := c.Restarting("a", now); ok {
		t.Fatalf("a call to a server waiting for room is held back %s", d)
	}
}
