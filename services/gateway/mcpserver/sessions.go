package mcpserver

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The gateway tracks go-sdk's stateful sessions itself: fast-path calls
// (fastcall.go) never reach go-sdk's session, so its idle timer is off and
// the janitor closes idle sessions from the use recorded here.

// liveSession is a go-sdk session the gateway has seen a request for.
type liveSession struct {
	ss       *mcp.ServerSession
	lastUsed atomic.Int64 // unix ns of the last request's start or end
	posts    atomic.Int64 // POSTs being served: the session is not idle
	// streams are the GET streams open: a client listening for
	// notifications is not idle either (a dead connection ends its stream
	// once TCP keepalive or a write's deadline finds it).
	streams atomic.Int64
	// streamed: the client opened the GET stream at least once. A session
	// that never did is closed after a shorter idle time (janitor.go).
	streamed atomic.Bool
	// done ends when the session is closed, by go-sdk or by the gateway:
	// fast-path calls of a closed session are cancelled, as go-sdk cancels
	// its own handlers, and a closed session is never served again.
	done   context.Context
	cancel context.CancelFunc
	// inflight holds the cancel functions of fast-path calls by JSON-RPC id,
	// for notifications/cancelled and to refuse a duplicate id.
	inflight sync.Map
	// sdkCalls holds, by JSON-RPC id, whether the client cancelled a call
	// go-sdk serves (*atomic.Bool; cancelled.go).
	sdkCalls sync.Map
	// push carries the gateway's own notifications to the session (taskpush.go).
	push sessionPush
}

func (ls *liveSession) closed() bool { return ls.done.Err() != nil }

// touch records use now.
func (ls *liveSession) touch() { ls.lastUsed.Store(time.Now().UnixNano()) }

// sessionTable tracks the live stateful sessions by id.
type sessionTable struct {
	mu   sync.Mutex
	byID map[string]*liveSession
}

// lookup returns the live session sid of v, finding it among go-sdk's
// sessions on first sight (and forgetting it once closed); nil when v has no
// such session. The scan on a miss covers only v's own sessions (the key's).
func (t *sessionTable) lookup(v *view, sid string) *liveSession {
	t.mu.Lock()
	ls, ok := t.byID[sid]
	t.mu.Unlock()
	if ok {
		if ls.closed() {
			return nil
		}
		return ls
	}
	for ss := range v.server.Sessions() {
		if ss.ID() == sid {
			return t.track(ss)
		}
	}
	return nil
}

// track adds ss, once; it is dropped when the session ends. Sessions without
// an id (stateless requests) are not tracked.
func (t *sessionTable) track(ss *mcp.ServerSession) *liveSession {
	id := ss.ID()
	if id == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls, ok := t.byID[id]; ok {
		return ls
	}
	ls := &liveSession{ss: ss}
	ls.done, ls.cancel = context.WithCancel(context.Background())
	ls.touch()
	if t.byID == nil {
		t.byID = map[string]*liveSession{}
	}
	t.byID[id] = ls
	go func() {
		_ = ss.Wait()
		t.forget(id)
	}()
	return ls
}

// forget marks session id closed at once (the gateway closes it, or go-sdk
// did) and drops it from the table.
func (t *sessionTable) forget(id string) {
	t.mu.Lock()
	ls, ok := t.byID[id]
	delete(t.byID, id)
	t.mu.Unlock()
	if ok {
		ls.cancel()
	}
}

// close closes ss, marking it closed first so no request is served on it
// meanwhile.
func (t *sessionTable) close(ss *mcp.ServerSession) {
	t.forget(ss.ID())
	_ = ss.Close()
}

// closeIdle closes the sessions of views with no POST in flight, no GET
// stream open and no request since cutoff (since streamlessCutoff for a
// session that never opened the GET stream), tracking first those never
// seen since their initialize.
func (t *sessionTable) closeIdle(views []*view, cutoff, streamlessCutoff time.Time) {
	for _, v := range views {
		for ss := range v.server.Sessions() {
			t.track(ss)
		}
	}
	idle := func(ls *liveSession) bool {
		c := cutoff
		if !ls.streamed.Load() {
			c = streamlessCutoff
		}
		return ls.posts.Load() == 0 && ls.streams.Load() == 0 && ls.lastUsed.Load() < c.UnixNano()
	}
	t.mu.Lock()
	var candidates []*liveSession
	for _, ls := range t.byID {
		if idle(ls) {
			candidates = append(candidates, ls)
		}
	}
	t.mu.Unlock()
	for _, ls := range candidates {
		if idle(ls) { // again: a request may have come meanwhile
			t.close(ls.ss)
		}
	}
}

// enter records an HTTP request with method on session sid of v and returns
// the live session (nil: v has no such session) and the function to call when
// the request is done. A session is not idle while it has a POST in flight;
// a DELETE marks it closed at once, for the fast path too.
func (t *sessionTable) enter(v *view, sid, method string) (*liveSession, func()) {
	ls := t.lookup(v, sid)
	if ls == nil {
		return nil, func() {}
	}
	ls.touch()
	switch method {
	case http.MethodPost:
		ls.posts.Add(1)
		return ls, func() { ls.posts.Add(-1); ls.touch() }
	case http.MethodGet:
		ls.streamed.Store(true)
		ls.streams.Add(1)
		return ls, func() { ls.streams.Add(-1); ls.touch() }
	case http.MethodDelete:
		t.forget(sid)
	}
	return ls, func() {}
}

// makeRoom closes v's least recently used sessions without a request in
// flight so that one more fits within max; false when too many are busy.
func (t *sessionTable) makeRoom(v *view, max int) bool {
	var open, idle []*liveSession
	for ss := range v.server.Sessions() {
		if ls := t.track(ss); ls != nil && !ls.closed() {
			open = append(open, ls)
			if ls.posts.Load() == 0 {
				idle = append(idle, ls)
			}
		}
	}
	over := len(open) - max + 1
	if over <= 0 {
		return true
	}
	if len(idle) < over {
		return false
	}
	slices.SortFunc(idle, func(a, b *liveSession) int { return cmp.Compare(a.lastUsed.Load(), b.lastUsed.Load()) })
	for _, ls := range idle[:over] {
		t.close(ls.ss)
	}
	return true
}

// closeAll closes every session of views.
func (t *sessionTable) closeAll(views []*view) {
	for _, v := range views {
		for ss := range v.server.Sessions() {
			t.close(ss)
		}
	}
}
