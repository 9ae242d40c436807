package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// view is the MCP server of one principal: the tools it may see.
type view struct {
	key       string
	principal *auth.Principal
	server    *mcp.Server
	installed map[string]*toolEntry
	// search: the view of /mcp?tools=search (or of a key whose tools_mode
	// is search), which serves search_tools and call_tool instead of the
	// tools (searchmode.go); installed holds only the key's pinned tools.
	search   bool
	lastUsed atomic.Int64
	// sources names the servers its resource and prompt lists draw on,
	// as its sessions last heard (listchanged.go).
	sources string
	// subs are the resources its sessions subscribed to (subscriptions.go).
	subs viewSubs
	// updates passes resource updates on to its sessions (subscriptions.go).
	updates viewUpdates
}

// lists reports whether the view lists e: every tool its principal may
// call, or in search mode only those it pins.
func (v *view) lists(e *toolEntry) bool {
	p := v.principal
	if p == nil || !p.Tools.IsZero() && !p.AllowsTool(e.names()...) { // no filter (most keys): no names made
		return false
	}
	return !v.search || slices.Contains(p.PinnedTools, e.name)
}

// tool is the tool v lists (or installs) as name; a.mu is held.
func (v *view) tool(name string) *toolEntry { return v.installed[name] }

func (v *view) touch() { v.lastUsed.Store(time.Now().UnixNano()) }

// newSessionID starts the session id with the view's key, so that owns can
// tell a session of this key (and filter) from anyone else's.
func (v *view) newSessionID() string { return v.key + "-" + rand.Text() }

// owns reports whether session id sid was opened through v.
func (v *view) owns(sid string) bool { return strings.HasPrefix(sid, v.key+"-") }

// viewKey identifies a principal's server: its key, its issuer (an OAuth
// token's key id is only its subject, which two issuers may both use), its
// filter, the mode and its pins, so a changed filter gets a fresh server (and
// the old sessions end) and a session of one mode is unknown to the other.
func viewKey(p *auth.Principal, search bool) string {
	f, _ := json.Marshal(p.Tools)
	mode := ""
	if search {
		pins, _ := json.Marshal(p.PinnedTools)
		mode = "\x00search" + string(pins)
	}
	sum := sha256.Sum256([]byte(p.KeyID + "\x00" + p.Issuer + "\x00" + string(f) + mode))
	return hex.EncodeToString(sum[:8])
}

// viewFor returns the server of p (in search mode: search_tools and
// call_tool only), creating it on first use.
func (a *Aggregator) viewFor(p *auth.Principal, search bool) (*view, error) {
	key := viewKey(p, search)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, apierr.New(apierr.ServiceUnavailable, "the MCP gateway is shutting down")
	}
	if v, ok := a.views[key]; ok {
		v.touch()
		return v, nil
	}
	cp := *p
	v := &view{key: key, principal: &cp, installed: map[string]*toolEntry{}, search: search}
	caps := &mcp.ServerCapabilities{
		Tools:       &mcp.ToolCapabilities{ListChanged: true},
		Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: a.opts.Agent == ""},
		Prompts:     &mcp.PromptCapabilities{ListChanged: true},
		Completions: &mcp.CompletionCapabilities{},
	}
	if a.tasksServed() {
		caps.AddExtension(tasksExtension, nil) // taskcaps.go
	}
	sopts := &mcp.ServerOptions{
		Instructions: "The tools, resources and prompts of every MCP server mcpbus runs. " +
			"Tools and prompts are named <server>__<name>; resource URIs are mcpbus://<server>/<escaped original URI>. " +
			"_meta of each names the server (" + MetaServer + ") and the original name.",
		Logger:       a.sdkLog,
		Capabilities: caps,
		CompletionHandler: func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return a.complete(ctx, v, req)
		},
		// Handler refuses a session id used by another key (or under a
		// changed filter): see owns.
		GetSessionID: v.newSessionID,
		// A list depends on the key's tool filter.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.CacheScope = privateCache },
	}
	if a.opts.Agent == "" { // an agent gets no resource updates (the runner refuses it)
		sopts.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error { return a.subscribe(ctx, v, req) }
		sopts.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error { return a.unsubscribe(ctx, v, req) }
	}
	v.server = mcp.NewServer(a.impl, sopts)
	v.server.AddReceivingMiddleware(a.features(v))
	v.touch()
	if search {
		a.installSearchTools(v)
	}
	a.syncView(v)
	v.sources = a.sources(v)
	a.views[key] = v
	return v, nil
}

// syncView brings a principal's server in line with the tool set; a.mu is
// held. A search-mode view holds only its pinned tools beside its two, so
// only a change of those tells its sessions tools/list_changed.
func (a *Aggregator) syncView(v *view) {
	var gone []string
	for name := range v.installed {
		if e, ok := a.tools[name]; !ok || !v.lists(e) {
			gone = append(gone, name)
			delete(v.installed, name)
		}
	}
	if len(gone) > 0 {
		v.server.RemoveTools(gone...)
	}
	for name, e := range a.tools {
		if v.installed[name] == e || !v.lists(e) {
			continue
		}
		if a.addTool(v, e) {
			v.installed[name] = e
		}
	}
}

// addTool adds e to the server of v. go-sdk panics on tools it cannot serve (a bad
// x-mcp-header annotation, say): such a tool is left out, not the gateway.
func (a *Aggregator) addTool(v *view, e *toolEntry) (ok bool) {
	if e.unservable {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			a.log.Warn("tool left out of the aggregate", "server", e.cat.Server, "tool", e.cat.Tool, "error", fmt.Sprint(p))
			e.unservable = true
			ok = false
		}
	}()
	v.server.AddTool(e.tool, a.toolHandler(v, e))
	return true
}

// DropKey ends every MCP session opened with keyID and forgets its views:
// called when the key is revoked, so a revoked key keeps nothing open.
func (a *Aggregator) DropKey(keyID string) {
	a.mu.Lock()
	var dropped []*view
	for key, v := range a.views {
		if v.principal.KeyID == keyID {
			dropped = append(dropped, v)
			delete(a.views, key)
		}
	}
	a.mu.Unlock()
	a.sessions.closeAll(dropped)
	a.held.cancel(func(hc *heldCall) bool {
		return slices.ContainsFunc(dropped, func(v *view) bool { return v.key == hc.owner })
	})
	if len(dropped) > 0 {
		a.log.Info("API key revoked: its MCP sessions were closed", "key_id", keyID, "views", len(dropped))
	}
}
