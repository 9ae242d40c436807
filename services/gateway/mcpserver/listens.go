package mcpserver

import (
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// A subscriptions/listen request (2026-07-28; go-sdk serves one on a
// session too) holds its POST, a goroutine and the connection open for as
// long as the client likes, outside any session (so outside MaxSessions):
// each principal holds at most Options.MaxListens of them on an instance,
// as it does its /api/v1 event streams (rest/events.go).

// listenCounts counts the open listen streams by principal id (an OAuth
// user's names its issuer, which its key id does not).
type listenCounts struct {
	mu  sync.Mutex
	per map[string]int
}

// take counts one more stream of who, unless it holds max already (ok
// false); release uncounts it.
func (l *listenCounts) take(who string, max int) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per[who] >= max {
		return nil, false
	}
	if l.per == nil {
		l.per = map[string]int{}
	}
	l.per[who]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.per[who]--; l.per[who] <= 0 {
			delete(l.per, who)
		}
	}, true
}

// takeListen counts msg against p's listen streams when it is a
// subscriptions/listen request, and refuses it once p holds MaxListens:
// the JSON-RPC error the key's cap on resource subscriptions gives
// (-32602, RATE_LIMITED in its data), with HTTP 400 as SEP-2575 wants for
// -32602. release is to be called when the request is done.
func (a *Aggregator) takeListen(w http.ResponseWriter, p *auth.Principal, msg jsonrpc.Message) (release func(), ok bool) {
	req, isReq := msg.(*jsonrpc.Request)
	if !isReq || !req.IsCall() || req.Method != "subscriptions/listen" {
		return func() {}, true
	}
	release, ok = a.listens.take(p.Bus().ID, a.opts.MaxListens)
	if !ok {
		writeRPCError(w, req.ID, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.RateLimited,
			"this key holds %d subscriptions/listen streams open on this gateway instance, the most it may: end one first", a.opts.MaxListens)))
	}
	return release, ok
}
