package mcpserver_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// Resources and prompts are gathered from the servers at each list, so
// go-sdk alone would never say they changed: a session of either era hears
// prompts/list_changed and resources/list_changed when a server starts for
// the first time and when one leaves, and then lists the new set.
func TestResourceAndPromptListsChanged(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	clients := map[string]*client{
		"2025-11-25": connect(t, e.url, "", nil),
		"2026-07-28": connect(t, e.url, "", &mcp.ClientSessionOptions{}),
	}
	for era, c := range clients {
		caps := c.InitializeResult().Capabilities
		if caps.Prompts == nil || !caps.Prompts.ListChanged || caps.Resources == nil || !caps.Resources.ListChanged {
			t.Fatalf("%s: capabilities %+v %+v, want listChanged on prompts and resources", era, caps.Prompts, caps.Resources)
		}
	}
	wantChanged := func(what string) {
		t.Helper()
		for era, c := range clients {
			for _, ch := range []chan struct{}{c.promptsChanged, c.resourcesChanged} {
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no list_changed of prompts and resources after %s", era, what)
				}
			}
		}
	}
	prompts := func(c *client) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := c.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range res.Prompts {
			names = append(names, p.Name)
		}
		return names
	}

	e.addServer(t, "beta", nil)
	wantChanged("adding server beta")
	for era, c := range clients {
		if got := prompts(c); !slices.Equal(got, []string{"alpha__greet", "beta__greet"}) {
			t.Fatalf("%s: prompts %v after beta started", era, got)
		}
	}

	cfgs, err := e.Store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if cfg.Slug == "beta" {
			e.Delete(t, cfg.ID)
		}
	}
	wantChanged("removing server beta")
	for era, c := range clients {
		if got := prompts(c); !slices.Equal(got, []string{"alpha__greet"}) {
			t.Fatalf("%s: prompts %v after beta left", era, got)
		}
	}
}
