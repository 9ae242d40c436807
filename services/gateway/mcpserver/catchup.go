package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/libs/model"
)

// Reading our own writes of the catalog. A server just enabled answers its
// start (POST …/enable and `mcpbus servers enable` wait for it) once its
// catalog is in KV mcp_tools, but this gateway's watch of the bucket may not
// have brought it in yet: a tools/call right after must not be told that the
// tool does not exist. On a miss of a well-formed <server>__<tool> name the
// server's key is read once, and the call waits (at most catchUpWait) until
// the watch has installed that revision. The tool then comes from the watch,
// as every tool does, so a read never replaces a newer update.

// catchUpWait bounds the read and the wait of one miss.
const catchUpWait = 2 * time.Second

// caughtUp records that the watch installed the bucket up to rev and wakes
// the calls waiting for it. a.mu is held.
func (a *Aggregator) caughtUp(rev uint64) {
	if rev <= a.catalogRev {
		return // a watch started over holds no more than it had
	}
	a.catalogRev = rev
	close(a.catalogMoved)
	a.catalogMoved = make(chan struct{})
}

// awaitTool is find(name) (called with a.mu held), waiting for the watch to
// bring in the catalog of name's server when the bucket already holds it;
// nil when there is no such tool (not in the bucket, not the caller's, or
// the wait ran out). Only a name v's principal may call is looked up: how
// long an answer takes says nothing of servers the caller cannot see.
func (a *Aggregator) awaitTool(ctx context.Context, v *view, name string, find func(string) *toolEntry) *toolEntry {
	a.mu.Lock()
	e := find(name)
	a.mu.Unlock()
	if e != nil || a.toolsKV == nil || !v.principal.AllowsTool(name) {
		return e
	}
	server, _, ok := strings.Cut(name, "__")
	if !ok || !model.ValidSlug(server) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	stored, err := a.toolsKV.Get(ctx, server)
	if err != nil {
		return nil // no such server (or the bucket does not answer): unknown, as before
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.catalogRev < stored.Revision() {
		moved := a.catalogMoved
		a.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			a.mu.Lock()
			return nil
		}
		a.mu.Lock()
	}
	return find(name)
}

// awaitCalled is awaitTool for a tools/call that go-sdk will answer: once it
// returns, go-sdk's server of v has the tool if the bucket had it.
func (a *Aggregator) awaitCalled(ctx context.Context, v *view, msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "tools/call" {
		return
	}
	var params struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(req.Params, &params) != nil || params.Name == "" {
		return // go-sdk answers it
	}
	a.awaitTool(ctx, v, params.Name, v.tool)
}
