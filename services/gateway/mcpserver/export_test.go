package mcpserver

import (
	"context"
	"runtime"
	"strings"
)

// Knows tells whether the aggregate has tool in its catalog (learnt from the
// tools KV bucket, after the runner wrote the server's status).
func (a *Aggregator) Knows(tool string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.tools[tool]
	return ok
}

// HeldGoroutines counts the goroutines running a held call's code (its bus
// call, or a relayed request waiting for the client's answer).
func HeldGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mcpserver.(*heldCall)") {
			count++
		}
	}
	return count
}

// HoldCatalogs stands for a catalog watch that lags: no update of KV
// mcp_tools is installed until release.
func (a *Aggregator) HoldCatalogs() (release func()) {
	a.watchGate.Lock()
	return a.watchGate.Unlock
}

// RenewSubscriptions runs one renewal of the resource subscriptions held
// and returns the URIs renewed, once every renewal ended.
func (a *Aggregator) RenewSubscriptions(ctx context.Context) []string {
	uris, wait := a.renewHeld(ctx, nil)
	wait()
	return uris
}
